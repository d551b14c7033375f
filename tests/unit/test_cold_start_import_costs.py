"""The cold-start figure names a miss's leading costs from `-X importtime` output: what the handler
loaded that the bare handler did not, summed by package; and every function's libraries floor runs
in the same rounds as the handler and bare runs. The inputs here are written by hand."""

from __future__ import annotations

import pytest
from bench.figures.cold_start import _import_self_times, beyond_bare

IMPORTTIME = """\
import time: self [us] | cumulative | imported package
import time:      1000 |       1000 |   json
import time:     20000 |      21000 |     pydantic_core.core_schema
import time:      3000 |      30000 |   pydantic
import time:       500 |        500 |       aws_lambda_powertools.utilities.batch.base
import time:      1500 |       2000 |     aws_lambda_powertools.utilities.batch
import time:      4000 |       4000 |     aws_lambda_powertools.utilities.data_classes.sqs_event
import time:       700 |        700 |   aws_lambda_powertools.logging.logger
import time:      9000 |       9000 |   asyncio.base_events
import time:      2000 |       2000 | infercrane.domain.capture
import time:      1000 |       1000 | infercrane.settings
"""


def test_importtime_lines_give_each_module_its_own_microseconds() -> None:
    times = _import_self_times("unrelated stderr line\n" + IMPORTTIME)
    assert times["pydantic_core.core_schema"] == 20000
    assert times["pydantic"] == 3000
    assert times["infercrane.settings"] == 1000
    assert "imported package" not in times  # the header line
    assert len(times) == 10


def test_costs_beyond_bare_leave_out_what_bare_loaded_and_group_by_package() -> None:
    runs = [{"import_self_us": _import_self_times(IMPORTTIME)},
            # A second, slower run: each module counts its least time of the two.
            {"import_self_us": {k: v * 2 for k, v in _import_self_times(IMPORTTIME).items()}}]
    bare = [{"module_names": ["json", "sys"]}, {"module_names": ["asyncio.base_events"]}]
    costs = dict(beyond_bare(runs, bare))
    assert "json" not in costs and "asyncio" not in costs  # both loaded by a bare run
    assert costs["pydantic"] == 3.0
    assert costs["pydantic_core"] == 20.0
    # Powertools by utility (batch's modules together, data classes apart), other parts by module.
    assert costs["aws_lambda_powertools.utilities.batch"] == 2.0
    assert costs["aws_lambda_powertools.utilities.data_classes"] == 4.0
    assert costs["aws_lambda_powertools.logging"] == 0.7
    # Ours by layer.
    assert costs["infercrane.domain"] == 2.0
    assert costs["infercrane.settings"] == 1.0
    assert next(iter(costs)) == "pydantic_core"  # largest first


class _Runner:
    """Stands in for the bench's process runner: logs which kind of run came when."""

    def __init__(self, real_s: float) -> None:
        self.order: list[str] = []
        self.real_s = real_s

    def run(self, mode, handler, event, paths, extra_env=None):  # type: ignore[no-untyped-def]
        from bench.figures.cold_start import BARE

        if mode == "record":
            kind = "record"
        elif handler != BARE:
            kind = "real"
        else:
            kind = "libs" if "pydantic" in (extra_env or {}).get("BENCH_BARE_IMPORTS", "") else "bare"
        self.order.append(kind if mode != "imports" else "imports")
        seconds = {"bare": 0.3, "libs": 0.36}.get(kind, self.real_s)
        return {"error": None, "result": {}, "calls": [("dynamodb", "GetItem", {})],
                "libraries": ["pydantic", "pynamodb"], "first_call_top": [], "modules": 1,
                "module_names": [], "import_self_us": {}, "total_s": seconds, "cpu_s": seconds,
                "startup_s": 0.01, "import_s": seconds / 2, "invoke_s": seconds / 2}


@pytest.mark.parametrize(("real_s", "met"), [(0.33, True), (0.45, False)])
def test_the_libraries_floor_runs_in_the_same_rounds_met_or_missed(real_s: float, met: bool) -> None:
    from pathlib import Path

    from bench.figures import cold_start

    runner = _Runner(real_s)
    scenario = cold_start.Scenario("authorizer", "an event", {}, (Path("fn"), Path("layer")))
    [figure] = cold_start.measure(None, runner, scenario)
    # Handler, bare, bare + libraries, in that order each round: drift moves all three alike.
    assert runner.order[1:1 + 3 * cold_start.RUNS] == ["real", "bare", "libs"] * cold_start.RUNS
    assert figure.met is met
    assert figure.extra["vs_libs_floor"] == round(real_s / 0.36, 3)
    assert "bare + the same library imports 360 ms" in figure.detail
    # Only a miss pays for the untimed -X importtime runs that name its leading costs.
    assert ("imports" in runner.order) is not met
