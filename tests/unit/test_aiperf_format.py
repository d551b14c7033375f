"""AIPerf's formats, pure: the `aiperf profile` command line a plan becomes, the trace schedule's
input file, and the flags agreeing with the parameters the evidence records."""

from __future__ import annotations

import json
from typing import Any

import pytest

from infercrane.adapters.aiperf_format import input_jsonl, profile_args
from infercrane.domain.execution import plan_execution
from tests.support.execution import make_trace
from tests.unit.test_execution_plan import TARGET


def test_aiperf_is_given_streaming_a_fixed_seed_cl100k_and_never_raw_export() -> None:
    plan = plan_execution(make_trace([(100, 10), (200, 20), (300, 30)]), TARGET)

    args = profile_args(plan, "/tmp/out", with_api_key="sk-secret")

    assert args[0] == "profile"
    assert "--streaming" in args
    assert args[args.index("--random-seed") + 1] == "42"
    assert args[args.index("--tokenizer") + 1] == "cl100k_base"
    assert args[args.index("--export-level") + 1] == "records"
    assert "raw" not in args
    assert args[args.index("--isl") + 1] == "200"
    assert args[args.index("--osl") + 1] == "20"
    assert args[args.index("--api-key") + 1] == "sk-secret"
    # The recorded parameters never carry the credential, only the variable's name.
    assert "sk-secret" not in json.dumps(plan.parameters())


def test_trace_plan_tells_aiperf_the_traces_prefix_block_size() -> None:
    blocks = [["v1:" + "a" * 64, "v1:" + f"{i:064x}"] for i in range(4)]
    trace = make_trace([(40, 5)] * 4, blocks=blocks, block_size=32)

    plan = plan_execution(trace, TARGET, schedule="trace")
    args = profile_args(plan, "/tmp/out", "/tmp/in.jsonl")

    assert args[args.index("--isl-block-size") + 1] == "32"
    assert [r["hash_ids"] for r in plan.rows] == [[0, 1], [0, 2], [0, 3], [0, 4]]
    assert "--isl-block-size" not in profile_args(
        plan_execution(make_trace([(40, 5)]), TARGET, schedule="trace"), "/o", "/i")


def test_the_trace_schedule_needs_its_input_file() -> None:
    plan = plan_execution(make_trace([(40, 5)]), TARGET, schedule="trace")
    with pytest.raises(ValueError, match="input file"):
        profile_args(plan, "/tmp/out")


def test_the_input_file_holds_the_plans_rows_one_a_line() -> None:
    trace = make_trace([(100 + i, 5 + i) for i in range(6)], spacing_ms=250)
    plan = plan_execution(trace, TARGET, schedule="trace", time_scale=2)

    lines = input_jsonl(plan).splitlines()

    assert [json.loads(line) for line in lines] == list(plan.rows)
    assert [json.loads(line)["timestamp"] for line in lines] == [0, 125, 250, 375, 500, 625]


# Each recorded parameter and the flag that gives AIPerf its value.
FLAGS = {"model": "--model", "url": "--url", "endpoint_type": "--endpoint-type",
         "random_seed": "--random-seed", "tokenizer": "--tokenizer",
         "export_level": "--export-level", "request_count": "--request-count",
         "concurrency": "--concurrency", "isl": "--isl", "isl_stddev": "--isl-stddev",
         "osl": "--osl", "osl_stddev": "--osl-stddev",
         "custom_dataset_type": "--custom-dataset-type", "isl_block_size": "--isl-block-size"}


def flag_values(args: list[str]) -> dict[str, str]:
    return {flag: args[args.index(flag) + 1] for flag in FLAGS.values() if flag in args}


@pytest.mark.parametrize("schedule", ["mean", "trace"])
def test_aiperf_is_given_exactly_the_parameters_the_evidence_records(schedule: Any) -> None:
    blocks = [["v1:" + "a" * 64, "v1:" + f"{i:064x}"] for i in range(5)]
    trace = make_trace([(90, 7), (130, 9), (171, 4), (64, 12), (100, 3)], blocks=blocks,
                       block_size=16)
    plan = plan_execution(trace, TARGET, schedule=schedule)
    params = plan.parameters()

    given = flag_values(profile_args(plan, "/tmp/out", "/tmp/in.jsonl"))

    recorded = {FLAGS[k]: v for k, v in params.items() if k in FLAGS and v is not None}
    assert given.keys() == recorded.keys()
    for flag, value in recorded.items():
        if isinstance(value, float):  # a stddev, written with at most 3 decimals
            assert float(given[flag]) == pytest.approx(value, abs=5e-4)
        else:
            assert given[flag] == str(value)
    assert ("--streaming" in profile_args(plan, "/o", "/i")) is params["streaming"]
    assert ("--fixed-schedule" in profile_args(plan, "/o", "/i")) is bool(params.get("fixed_schedule"))
    assert params["extra_inputs"] == {"ignore_eos": True}
    assert "ignore_eos:true" in profile_args(plan, "/o", "/i")
