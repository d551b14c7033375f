"""Asynchronous trace build: peak memory for a 100,000-request Mooncake-shaped trace.

`TraceService.run_build` (what the trace_build function runs) streams 100,000 observations
(Mooncake-shaped: sessions, 512-token hash-id blocks shared between requests) through the
streaming builder, spools the records to a temporary file and uploads the canonical document
through `S3DocumentStore.put_stream` in 8 MiB parts to a stub S3 client that keeps only the
part sizes (the trace's statement is encoded but not signed: KMS is a network call). Observations
come from a generator in 1,000-item pages, as Query pages do. The figure
is the process's peak RSS (VmHWM) at the end, against the 512 MB the function is given; the
baseline is the same process before the build, with the service and adapter imported.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from bench.common import Figure, info, main

REQUESTS = int(os.environ.get("BENCH_ASYNC_REQUESTS", "100000"))
UNTIL = datetime(2026, 11, 29, tzinfo=UTC)
WINDOW_MS = 24 * 3_600_000


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Observations:
    def __init__(self, n: int):
        self.n = n

    def query(self, tenant: str, deployment: str, start_ms: int, end_ms: int,
              limit: int | None = None, decided: Any = None) -> Iterator[Any]:
        from infercrane.domain.observation import StoredObservation

        step = WINDOW_MS / self.n
        for i in range(min(self.n, limit or self.n)):
            session = i // 6
            blocks = 2 + (i * 7) % 14
            yield StoredObservation(
                tenant=tenant, deployment=deployment, observation_id=f"o-{i:07d}",
                arrival_ms=start_ms + int(i * step), input_tokens=blocks * 512 - (i % 300),
                output_tokens=20 + (i * 13) % 600, latency_ms=None, ttft_ms=None,
                outcome="ok", streaming=True, sampling_rate=1.0, source="imported",
                ingested_at_ms=end_ms, session_id=f"v1:{session:064x}",
                prefix_block_ids=[f"{(session % 500) * 40 + j}" for j in range(blocks)],
                prefix_block_size=512, timing_source="observed", provenance="mooncake-jsonl",
                key_version="v1")


class Traces:
    def __init__(self) -> None:
        self.headers: dict[str, Any] = {}

    def get_header(self, tenant: str, digest: str) -> Any:
        return self.headers.get(digest)

    def put_header(self, tenant: str, header: Any) -> bool:
        self.headers[header["digest"]] = header
        return True


class Builds:
    def __init__(self) -> None:
        self.build: dict[str, Any] = {}

    def put_build(self, tenant: str, build: Any) -> bool:
        # The port's answer: True, the record was written (False: another delivery finished the
        # build first, and run_build stops). A stub answering None stopped every build at its
        # first progress write: the figure measured an empty build (0 records, 21 MiB).
        self.build = dict(build)
        return True

    def get_build(self, tenant: str, build_id: str) -> Any:
        return dict(self.build)


class S3Stub:
    """Takes a multipart upload and keeps the part sizes only."""

    def __init__(self) -> None:
        self.parts: list[int] = []

    def create_multipart_upload(self, **_: Any) -> dict[str, str]:
        return {"UploadId": "u"}

    def upload_part(self, Body: bytes, **_: Any) -> dict[str, str]:
        self.parts.append(len(Body))
        return {"ETag": str(len(self.parts))}

    def complete_multipart_upload(self, **_: Any) -> None:
        return None

    def put_object(self, Body: bytes, **_: Any) -> None:
        self.parts.append(len(Body))


class Signer:
    """Stands in for the KMS signer (a network call in the function): the statement is encoded
    as DSSE would carry it, with an empty signature list."""

    def sign(self, statement: Any) -> dict[str, Any]:
        import base64
        import json

        return {"payloadType": "application/vnd.in-toto+json", "signatures": [],
                "payload": base64.b64encode(json.dumps(statement).encode()).decode()}


def run() -> list[Figure]:
    from infercrane.adapters.s3_documents import S3DocumentStore
    from infercrane.domain.replay import TraceService

    baseline = peak_mib()
    s3, builds, traces = S3Stub(), Builds(), Traces()
    service = TraceService(Observations(REQUESTS), traces, S3DocumentStore(s3, "bench"),
                           builds=builds, build_queue=None, signer=Signer)
    end_ms = int(UNTIL.timestamp() * 1000)
    builds.build = {"build_id": "0" * 32, "status": "queued", "deployment": "mooncake",
                    "window": "24h", "start_ms": end_ms - WINDOW_MS, "end_ms": end_ms,
                    "max_requests": REQUESTS, "records_read": 0}
    t0 = time.perf_counter()
    done = service.run_build("bench", "0" * 32, lambda: UNTIL)
    took = time.perf_counter() - t0
    if done["status"] != "succeeded" or done["records_read"] != REQUESTS:
        raise RuntimeError(f"the build did not read the window: {done}")
    peak = peak_mib()
    size = sum(s3.parts)
    return [info(f"async trace build: peak RSS, {REQUESTS:,} Mooncake-shaped requests", peak,
                 "MiB", f"{done['records_read']:,} records, document {size / 2**20:.0f} MiB in "
                 f"{len(s3.parts)} parts, built in {took:.0f} s; process baseline before the "
                 f"build {baseline:.0f} MiB; the function has 512 MB", target="<= 512")]


if __name__ == "__main__":
    main(run)
