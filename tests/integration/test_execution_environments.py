"""The local stack's execution environments enforce what Lambda enforces, on tiny artifacts made
here (standard library only, so each environment starts in milliseconds)."""

from __future__ import annotations

import io
import textwrap
import time
from pathlib import Path

import pytest

from infercrane.local.artifacts import Artifact
from infercrane.local.runtime import (
    MAX_SYNC_PAYLOAD,
    FunctionError,
    FunctionPool,
    FunctionTimeout,
    LogSink,
    PayloadTooLarge,
)
from infercrane.local.template import FunctionSpec

HANDLER = '''
import json, sys, time

def handler(event, context):
    action = event.get("action")
    if action == "sleep":
        time.sleep(event["seconds"])
    elif action == "allocate":
        hold = bytearray(event["mb"] * 1024 * 1024)
        for i in range(0, len(hold), 4096):
            hold[i] = 1
        time.sleep(1)
    elif action == "import":
        try:
            __import__(event["module"])
        except ImportError:
            return {"caught": True}
    elif action == "print":
        print(json.dumps({"_aws": {"CloudWatchMetrics": []}, "n": 1}))
        print("a plain log line")
    elif action == "big":
        return "x" * event["bytes"]
    return {"remaining_ms": context.get_remaining_time_in_millis(), "path": sys.path[:1]}
'''


@pytest.fixture
def pool_for(tmp_path: Path):
    pools: list[FunctionPool] = []

    def make(timeout_s: float = 3, memory_mb: int = 128, sink: LogSink | None = None,
             size: int = 1) -> FunctionPool:
        folder = tmp_path / "fn"
        folder.mkdir(exist_ok=True)
        (folder / "app.py").write_text(textwrap.dedent(HANDLER))
        spec = FunctionSpec("TinyFunction", "functions/tiny", "app.handler", timeout_s=timeout_s,
                            memory_mb=memory_mb)
        pool = FunctionPool(spec, Artifact(spec.logical_id, spec.handler, (folder,)),
                            "arn:aws:lambda:us-east-1:123456789012:function:tiny",
                            {"PATH": "/usr/bin:/bin"}, size=size, sink=sink or LogSink(io.StringIO()))
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        pool.close()


def test_an_invocation_past_the_timeout_is_ended_and_the_next_one_gets_a_fresh_environment(pool_for):
    pool = pool_for(timeout_s=1)
    with pytest.raises(FunctionTimeout):
        pool.invoke({"action": "sleep", "seconds": 30})
    assert 0 < pool.invoke({})["remaining_ms"] <= 1000


def test_an_environment_over_its_memory_size_is_killed(pool_for):
    pool = pool_for(memory_mb=128)
    with pytest.raises(FunctionError) as raised:
        pool.invoke({"action": "allocate", "mb": 200})
    assert raised.value.error_type == "Runtime.OutOfMemory"
    assert pool.invoke({"action": "allocate", "mb": 16})


def test_the_environment_sees_only_the_standard_library_and_its_artifact(pool_for):
    pool = pool_for()
    # pytest is installed in the venv running this test, never in the artifact.
    doc = pool.call({"action": "import", "module": "pytest"})
    assert doc["result"] == {"caught": True}
    assert doc["missing"] == ["pytest"]


def test_payloads_over_6_mb_are_refused_both_ways(pool_for):
    pool = pool_for()
    with pytest.raises(PayloadTooLarge) as request:
        pool.invoke({"pad": "x" * MAX_SYNC_PAYLOAD})
    assert request.value.error_type == "RequestEntityTooLargeException"
    with pytest.raises(PayloadTooLarge) as response:
        pool.invoke({"action": "big", "bytes": MAX_SYNC_PAYLOAD + 10_000})
    assert response.value.error_type == "Function.ResponseSizeTooLarge"


@pytest.mark.parametrize("keep_metrics", [False, True])
def test_function_output_reaches_the_log_without_emf_lines_unless_asked(pool_for, keep_metrics):
    stream = io.StringIO()
    pool = pool_for(sink=LogSink(stream, keep_metrics=keep_metrics))
    pool.invoke({"action": "print"})
    pool.close()  # the output pipe is drained when the process ends
    for _ in range(100):
        if "a plain log line" in stream.getvalue():
            break
        time.sleep(0.05)
    assert "a plain log line" in stream.getvalue()
    assert ('"_aws"' in stream.getvalue()) is keep_metrics


def test_idle_environments_are_stopped_keeping_the_most_recently_used(pool_for):
    from concurrent.futures import ThreadPoolExecutor

    pool = pool_for(size=3)
    with ThreadPoolExecutor(3) as workers:  # three at once: three environments
        list(workers.map(lambda _: pool.invoke({"action": "sleep", "seconds": 0.5}), range(3)))
    processes = [e.proc for e in pool._all]
    assert len(processes) == 3
    assert pool.reap(idle_s=3600) == 0  # none idle that long
    assert pool.reap(idle_s=0, keep=1) == 2
    alive = [p for p in processes if p.poll() is None]
    assert len(alive) == 1 and len(pool._all) == 1  # the others' processes are gone
    assert pool.invoke({})["remaining_ms"] > 0  # the kept one still serves, warm
    assert [e.proc for e in pool._all] == alive
    assert pool.reap(idle_s=0) == 1 and pool._all == []  # keep=0: a quiet function has none
    assert pool.invoke({})["remaining_ms"] > 0  # and the next call starts one again
