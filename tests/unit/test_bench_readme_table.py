"""The README's performance table is generated from the committed bench/results.json."""

from __future__ import annotations

import json

import pytest
from bench import readme_table

committed = pytest.mark.skipif(not readme_table.RESULTS.exists(),
                               reason="no bench/results.json committed yet (make bench writes it)")


@committed
def test_readme_performance_table_matches_the_committed_bench_results():
    results = json.loads(readme_table.RESULTS.read_text())
    readme = readme_table.README.read_text()
    assert readme_table.current_table(readme) == readme_table.render(results), (
        "README.md's table is stale: run `python bench/readme_table.py --write`")


@committed
def test_every_committed_figure_appears_in_the_readme_with_its_verdict():
    results = json.loads(readme_table.RESULTS.read_text())
    table = readme_table.current_table(readme_table.README.read_text())
    for figure in results["figures"]:
        row = next(line for line in table.splitlines() if line.startswith(f"| {figure['name']} |"))
        if figure["met"] is False:
            assert row.endswith("| **missed** |")
        elif figure["met"] is True:
            assert row.endswith("| yes |")


def test_table_marks_missed_targets_and_unmeasured_figures():
    results = {"machine": {"nproc": 2, "cpu": "cpu", "python": "3.11", "loadavg_at_start": 1.0},
               "figures": [
                   {"name": "a", "value": 1.25, "unit": "x", "target": "<= 1.3", "met": True},
                   {"name": "b", "value": 4.0, "unit": "x", "target": "<= 3", "met": False},
                   {"name": "c", "value": None, "unit": "", "target": None, "met": None},
                   {"name": "d", "value": 1234.5, "unit": "obs/s", "target": None, "met": None},
                   {"name": "e", "value": 1.6, "unit": "x", "target": "<= 1.3", "met": False,
                    "extra": {"vs_libs_floor": 1.04}},
               ]}
    table = readme_table.render(results)
    assert "| a | 1.25x | <= 1.3 | yes |" in table
    assert "| b | 4.00x | <= 3 | **missed** |" in table
    assert "| c | not measured | — | — |" in table
    assert "| d | 1,234 obs/s | — | — |" in table
    assert "| e | 1.60x (1.04x of bare + the same libraries) | <= 1.3 | **missed** |" in table
    assert "1 of 3 targets met" in table


def test_replacing_the_table_keeps_the_rest_of_the_readme():
    old = f"intro\n{readme_table.BEGIN}\nold rows\n{readme_table.END}\noutro\n"
    new = readme_table.replace_table(old, f"{readme_table.BEGIN}\nnew\n{readme_table.END}")
    assert new == f"intro\n{readme_table.BEGIN}\nnew\n{readme_table.END}\noutro\n"
    with pytest.raises(ValueError, match="no generated table"):
        readme_table.replace_table("no markers here", "x")
