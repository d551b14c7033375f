"""Replay execution with the real AIPerf subprocess against the local OpenAI-compatible test server,
routes and stores in moto. Small request counts: each AIPerf run takes a few seconds."""

from __future__ import annotations

import json
import os
import socket
import statistics
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from infercrane.adapters.aiperf_runner import AiperfRunner, aiperf_version, cl100k_source
from infercrane.cli.client import CliError
from infercrane.clock import utcnow
from infercrane.domain.execution import Target, build_evidence, check_evidence, plan_execution
from tests.support.execution import InProcessApi, cl100k_counter, env_var, execute_command, make_trace
from tests.support.openai_server import OpenAIServer

# Slow: each test starts the real AIPerf (seconds apiece), the tier's longest module; declared so
# that `make test-fast` starts it first instead of leaving it to one worker at the end.
pytestmark = [pytest.mark.skipif(aiperf_version() is None,
                                 reason="AIPerf is not installed (pip install -e '.[execute]')"),
              pytest.mark.slow]


@pytest.fixture(autouse=True)
def run_folders_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # execute_replay keeps AIPerf's artifacts in a mkdtemp folder: keep the tests' in tmp_path.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


@pytest.fixture(scope="module")
def count_tokens(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return cl100k_counter(tmp_path_factory.mktemp("tiktoken"))


@pytest.fixture
def server(count_tokens: Any) -> Any:
    with OpenAIServer(count_tokens) as s:
        yield s


def invoke(api: InProcessApi, trace: dict[str, Any], *args: str) -> tuple[int, Any, str]:
    result = CliRunner().invoke(execute_command(api, trace), ["--execute", *args])
    code = result.exception.exit_code if isinstance(result.exception, CliError) \
        else result.exit_code
    if result.exception is not None and not isinstance(result.exception, CliError | SystemExit):
        raise result.exception
    # The in-process handler may print its cold-start metric line first: the document is last.
    lines = result.stdout.strip().splitlines()
    doc = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else None
    # `infercrane` prints a CliError as "error: <message>" on stderr (cli/main.py).
    error = f"error: {result.exception.message}" if isinstance(result.exception, CliError) else ""
    return code, doc, result.output + error


def varied_sizes(n: int) -> list[tuple[int, int]]:
    # A spread of input and output sizes so the stddevs are not zero.
    return [(60 + (i * 37) % 90, 4 + (i * 5) % 9) for i in range(n)]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_mean_schedule_gives_aiperf_the_trace_statistics_and_the_server_sees_them(
        aws: Any, server: OpenAIServer) -> None:
    # 24 requests of 120 ms every 50 ms: three in flight at the peak.
    trace = make_trace(varied_sizes(24), spacing_ms=50, latency_ms=120.0)
    stats = trace["statistics"]
    inputs = [r["input_tokens"] for r in trace["records"]]
    outputs = [r["output_tokens"] for r in trace["records"]]
    api = InProcessApi("acme")
    api.request("PUT", "/v1/deployments/coder-production/revisions/candidate",
                {"url": server.url, "model": "test-llm", "api_key_env": "CANDIDATE_TEST_KEY"})
    server.options.expected_bearer = "sk-test-secret-123"

    with env_var("CANDIDATE_TEST_KEY", "sk-test-secret-123"):
        code, doc, output = invoke(api, trace, "--acknowledge-cost", "--revision", "candidate",
                                   "--max-requests", "16")

    assert code == 0, output
    params = doc["aiperf"]["parameters"]
    # The parameters AIPerf was given are the trace's statistics ...
    assert params["isl"] == round(stats["input_tokens"]["mean"])
    assert params["osl"] == round(stats["output_tokens"]["mean"])
    assert params["isl_stddev"] == pytest.approx(statistics.pstdev(inputs), abs=1e-3)
    assert params["osl_stddev"] == pytest.approx(statistics.pstdev(outputs), abs=1e-3)
    assert params["concurrency"] == stats["peak_concurrency"] == 3
    assert params["request_count"] == min(stats["request_count"], 16) == 16
    assert params["streaming"] is True
    assert params["export_level"] != "raw"
    # ... and the server received exactly that many requests of those sizes.
    arrivals = server.arrivals
    assert len(arrivals) == 16
    assert all(a.streaming and a.model == "test-llm" for a in arrivals)
    assert all(a.authorization_ok for a in arrivals)
    assert server.peak_in_flight <= params["concurrency"]
    received_isl = [a.prompt_tokens for a in arrivals]
    received_osl = [a.max_tokens for a in arrivals]
    assert statistics.mean(received_isl) == pytest.approx(
        doc["measured"]["input_sequence_length"]["avg"])
    assert statistics.mean(received_osl) == pytest.approx(
        doc["measured"]["output_sequence_length"]["avg"])
    # Sizes are drawn around the means; 16 draws stay within a few standard errors.
    assert abs(statistics.mean(received_isl) - params["isl"]) <= \
        4 * params["isl_stddev"] / 16 ** 0.5 + 1
    assert abs(statistics.mean(received_osl) - params["osl"]) <= \
        4 * params["osl_stddev"] / 16 ** 0.5 + 1
    # The evidence is stored as posted, for this tenant only, and never holds the credential.
    assert doc["evidence_class"] == "approximation"
    assert doc["method"] == "aiperf-mean-concurrency"
    assert doc["status"] == "succeeded"
    assert doc["source"]["trace_digest"] == trace["digest"]
    assert doc["target"] == {"revision": "candidate", "url": server.url, "model": "test-llm",
                             "api_key_env": "CANDIDATE_TEST_KEY"}
    assert doc["aiperf"]["version"] == aiperf_version()
    assert doc["measured"]["request_count"] == 16
    assert doc["measured"]["error_count"] == 0
    assert "sk-test-secret-123" not in json.dumps(doc)
    assert "sk-test-secret-123" not in output
    assert api.request("GET", f"/v1/executions/{doc['execution_id']}") == doc
    with pytest.raises(CliError) as other:
        InProcessApi("other").request("GET", f"/v1/executions/{doc['execution_id']}")
    assert other.value.exit_code == 4
    print(json.dumps({"comparison": doc["comparison"], "fidelity": doc["fidelity"]}, indent=1))


def test_trace_schedule_replays_the_trace_rows_compressed_and_cut(
        aws: Any, server: OpenAIServer) -> None:
    # Ten arrivals 400 ms apart, compressed 4x (100 ms) and cut after 0.5 s: the first six.
    sizes = [(50 + 10 * i, 3 + i % 4) for i in range(10)]
    trace = make_trace(sizes, spacing_ms=400, latency_ms=80.0)
    api = InProcessApi("acme")

    code, doc, output = invoke(api, trace, "--acknowledge-cost", "--target-url", server.url,
                               "--schedule", "trace", "--time-scale", "4",
                               "--max-duration", "0.5")

    assert code == 0, output
    assert doc["method"] == "aiperf-trace-schedule"
    params = doc["aiperf"]["parameters"]
    assert params["fixed_schedule"] is True
    assert params["custom_dataset_type"] == "mooncake_trace"
    assert (params["time_scale"], params["max_duration_s"]) == (4.0, 0.5)
    assert params["request_count"] == params["input_rows"] == 6
    expected = sizes[:6]
    assert sorted(a.prompt_tokens for a in server.arrivals) == sorted(i for i, _ in expected)
    assert sorted(a.max_tokens or 0 for a in server.arrivals) == sorted(o for _, o in expected)
    assert doc["target"]["revision"] is None
    assert doc["target"]["model"] == "coder-production"


def test_without_acknowledge_cost_it_explains_and_sends_nothing(
        aws: Any, server: OpenAIServer) -> None:
    trace = make_trace(varied_sizes(12))
    api = InProcessApi("acme")

    code, doc, output = invoke(api, trace, "--target-url", server.url)

    assert code == 3
    assert doc is None
    assert server.arrivals == []
    assert ("POST", "/v1/executions") not in api.calls
    for shown in (server.url, "12", "concurrency", "ISL", "OSL", "estimated input tokens"):
        assert shown in output


def test_an_unknown_revision_is_not_found_and_sends_nothing(
        aws: Any, server: OpenAIServer) -> None:
    api = InProcessApi("acme")
    api.request("PUT", "/v1/deployments/coder-production/revisions/candidate",
                {"url": server.url})

    code, _, output = invoke(api, make_trace(varied_sizes(4)), "--acknowledge-cost",
                             "--revision", "nightly")
    # Another tenant's revision of the same name is as unknown as a missing one.
    other_code, _, _ = invoke(InProcessApi("other"), make_trace(varied_sizes(4)),
                              "--acknowledge-cost", "--revision", "candidate")

    assert (code, other_code) == (4, 4)
    assert "nightly" in output
    assert server.arrivals == []


def test_a_missing_credential_variable_refuses_before_sending(
        aws: Any, server: OpenAIServer) -> None:
    api = InProcessApi("acme")
    api.request("PUT", "/v1/deployments/coder-production/revisions/candidate",
                {"url": server.url, "api_key_env": "UNSET_CANDIDATE_KEY"})
    with env_var("UNSET_CANDIDATE_KEY", None):
        code, _, output = invoke(api, make_trace(varied_sizes(4)), "--acknowledge-cost",
                                 "--revision", "candidate")
    assert code == 2
    assert "UNSET_CANDIDATE_KEY" in output
    assert server.arrivals == []


def test_a_failing_aiperf_run_leaves_a_failed_evidence_record(aws: Any) -> None:
    api = InProcessApi("acme")
    trace = make_trace(varied_sizes(4))

    code, doc, output = invoke(api, trace, "--acknowledge-cost", "--target-url",
                               f"http://127.0.0.1:{closed_port()}")

    assert code == 1
    assert f"recorded as {doc['execution_id']}" in output
    assert doc["status"] == "failed"
    assert doc["failure"]["kind"] == "aiperf_failed"
    assert "failed" in doc["failure"]["reason"]
    assert doc["measured"] is None
    stored = api.request("GET", f"/v1/executions/{doc['execution_id']}")
    assert stored["status"] == "failed"
    assert stored["failure"] == doc["failure"]
    assert stored["source"]["trace_digest"] == trace["digest"]


def test_an_interrupted_run_stops_aiperf_and_records_a_failure(tmp_path: Path) -> None:
    # A stand-in for the aiperf executable that finishes one request and then hangs: the
    # interrupt arrives while it runs, as Ctrl-C would.
    fake = tmp_path / "aiperf"
    pid_file = tmp_path / "pid"
    fake.write_text(f"#!{sys.executable}\n" + textwrap.dedent(f"""
        import os, sys, time, pathlib
        pathlib.Path({str(pid_file)!r}).write_text(str(os.getpid()))
        out = pathlib.Path(sys.argv[sys.argv.index("--artifact-dir") + 1])
        out.mkdir(parents=True, exist_ok=True)
        with open(out / "profile_export.jsonl", "a") as f:
            f.write("{{}}\\n")
        time.sleep(120)
    """))
    fake.chmod(0o755)
    trace = make_trace(varied_sizes(6))
    plan = plan_execution(trace, Target(url="http://127.0.0.1:9", model="m"))

    def interrupt(_: int) -> None:
        raise KeyboardInterrupt

    started = utcnow()
    outcome = AiperfRunner(executable=str(fake), poll_s=0.05, stop_grace_s=2).run(
        plan, tmp_path / "work", api_key=None, on_progress=interrupt)
    evidence = build_evidence(plan, execution_id="exe_" + "0" * 24, started=started,
                              ended=utcnow(), outcome=outcome)

    assert outcome.failure_kind == "interrupted"
    assert outcome.requests_completed == 1
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert evidence["status"] == "failed"
    assert evidence["measured"] is None
    assert check_evidence(evidence) == evidence


def fake_aiperf(tmp_path: Path, body: str) -> str:
    """An executable standing in for aiperf: records its argv and environment, then runs body."""
    fake = tmp_path / "fake-aiperf"
    fake.write_text(f"#!{sys.executable}\n" + textwrap.dedent(f"""
        import json, os, sys, pathlib
        out = pathlib.Path(sys.argv[sys.argv.index("--artifact-dir") + 1])
        out.mkdir(parents=True, exist_ok=True)
        pathlib.Path({str(tmp_path / "seen.json")!r}).write_text(json.dumps(
            {{"argv": sys.argv[1:], "tiktoken": os.environ.get("TIKTOKEN_CACHE_DIR"),
              "hub_offline": os.environ.get("HF_HUB_OFFLINE")}}))
    """) + textwrap.dedent(body))
    fake.chmod(0o755)
    return str(fake)


@pytest.mark.parametrize(("body", "kind", "reason"), [
    ('print("ERROR All 7 inference request(s) failed; no successful responses")\nsys.exit(1)',
     "aiperf_failed", "All 7 requests failed"),
    ("sys.exit(3)", "aiperf_failed", "AIPerf exited with code 3."),
    ("sys.exit(0)", "no_results", "without writing its summary"),
    ('(out / "profile_export_aiperf.json").write_text(json.dumps({"was_cancelled": True}))',
     "interrupted", "cancelled"),
])
def test_aiperf_failures_become_fixed_sentence_reasons(tmp_path: Path, body: str, kind: str,
                                                       reason: str) -> None:
    plan = plan_execution(make_trace(varied_sizes(3)), Target(url="http://127.0.0.1:9", model="m"))
    outcome = AiperfRunner(executable=fake_aiperf(tmp_path, body), poll_s=0.05).run(
        plan, tmp_path / "work", api_key=None, on_progress=lambda _: None)
    assert outcome.failure_kind == kind
    assert reason in (outcome.failure_reason or "")


def test_the_runner_seeds_cl100k_offline_and_never_asks_for_raw_export(tmp_path: Path) -> None:
    plan = plan_execution(make_trace(varied_sizes(3)), Target(url="http://127.0.0.1:9", model="m"),
                          schedule="trace")
    AiperfRunner(executable=fake_aiperf(tmp_path, "sys.exit(0)"), poll_s=0.05).run(
        plan, tmp_path / "work", api_key=None, on_progress=lambda _: None)
    seen = json.loads((tmp_path / "seen.json").read_text())
    cached = Path(seen["tiktoken"]) / "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"
    assert cached.is_file()
    assert cached.read_bytes() == cl100k_source().read_bytes()
    assert seen["hub_offline"] == "1"
    assert "raw" not in seen["argv"]
    input_file = Path(seen["argv"][seen["argv"].index("--input-file") + 1])
    assert [json.loads(line) for line in input_file.read_text().splitlines()] == list(plan.rows)


def test_trace_schedule_with_shared_prefix_blocks_sends_the_traced_sizes(
        aws: Any, server: OpenAIServer) -> None:
    # Eight requests sharing a first 32-token block: AIPerf builds prompts from the blocks.
    shared = "v1:" + "a" * 64
    blocks = [[shared, f"v1:{i:064x}"] for i in range(8)]
    sizes = [(40 + 3 * i, 4) for i in range(8)]
    trace = make_trace(sizes, spacing_ms=20, blocks=blocks, block_size=32)

    code, doc, output = invoke(InProcessApi("acme"), trace, "--acknowledge-cost",
                               "--target-url", server.url, "--schedule", "trace")

    assert code == 0, output
    assert doc["aiperf"]["parameters"]["isl_block_size"] == 32
    assert doc["measured"]["input_sequence_length"]["avg"] == pytest.approx(
        statistics.mean(i for i, _ in sizes))
    assert sorted(a.prompt_tokens for a in server.arrivals) == sorted(i for i, _ in sizes)
