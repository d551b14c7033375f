"""The cold-start figure names a miss's leading costs from `-X importtime` output: what the handler
loaded that the bare handler did not, summed by package. The inputs here are written by hand."""

from __future__ import annotations

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
