"""The capacity table: scope statement, sort order and the capacity-dominance mark."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from rich.console import Console

from infercrane.cli.capacity import render
from infercrane.domain.capacity import CapacityService
from tests.support.capacity_memory import MemoryCapacityStore

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)


def attempt(i, gpu, outcome, code=None):
    start = NOW - timedelta(hours=2, minutes=i)
    doc = {"attempt_id": f"a{i}", "deployment": "d", "operation": "create", "adapter": "aws",
           "runtime": "vllm", "compute_mode": "spot", "region": "us-east-1", "gpu": gpu,
           "gpu_count": 1, "started_at": start.isoformat(),
           "finished_at": (start + timedelta(seconds=90)).isoformat(), "outcome": outcome}
    if code:
        doc["error_code"] = code
    return doc


def test_table_states_scope_sorts_by_samples_and_marks_capacity_dominated_groups():
    svc = CapacityService(MemoryCapacityStore())
    items = [attempt(i, "H100", "failed", "InsufficientInstanceCapacity") for i in range(3)]
    items += [attempt(10 + i, "L4", "failed" if i < 2 else "succeeded", "VcpuLimitExceeded")
              for i in range(6)]
    assert svc.ingest("acme", items, NOW).rejected == 0
    doc = svc.report("acme", "24h", NOW, None, NOW)
    console = Console(record=True, width=250, color_system=None)
    render(console, doc)
    text = console.export_text()
    flat = " ".join(text.split())
    assert "tenant-observed" in flat
    assert "not global availability" in flat
    rows = [line for line in text.splitlines() if "H100" in line or " L4 " in line]
    assert "L4" in rows[0]  # 6 samples before 3
    assert rows[1].strip("│ ").startswith("!")  # H100: every failure is capacity
    assert not rows[0].strip("│ ").startswith("!")  # L4 failures are quota, never capacity


def test_estimated_percentiles_carry_an_approx_mark_and_exact_ones_none():
    from infercrane.domain.capacity.advice import option

    svc = CapacityService(MemoryCapacityStore())
    small = [attempt(i, "L4", "succeeded") for i in range(30)]
    # 600 finished H100 attempts: beyond the exact bound, so a DDSketch estimate.
    large = [attempt(100 + i, "H100", "succeeded") | {
        "attempt_id": f"h{i}",
        "started_at": (NOW - timedelta(hours=3, seconds=10 * i)).isoformat(),
        "finished_at": (NOW - timedelta(hours=3, seconds=10 * i - 60 - i)).isoformat()}
        for i in range(600)]
    for batch in (small, large[:300], large[300:]):
        assert svc.ingest("acme", batch, NOW).rejected == 0
    doc = svc.report("acme", "24h", NOW, None, NOW)
    methods = {g["gpu"]: (g["duration_method"], g["duration_relative_error"]) for g in doc["groups"]}
    assert methods == {"L4": ("exact", 0.0), "H100": ("ddsketch", 0.01)}
    console = Console(record=True, width=250, color_system=None)
    render(console, doc)
    rows = {("H100" if "H100" in line else "L4"): line for line in console.export_text().splitlines()
            if "H100" in line or " L4 " in line}
    assert rows["H100"].count("≈") == 2  # p50 and p95
    assert "≈" not in rows["L4"]
    basis = {g["gpu"]: option(g, None)["basis"] for g in doc["groups"]}
    assert "p95 ≈" in basis["H100"]
    assert "≈" not in basis["L4"]


def _headers(doc):
    """The grid's column names as the wide render shows them."""
    wide = Console(record=True, width=400, color_system=None)
    render(wide, doc)
    header = next(line for line in wide.export_text().splitlines() if "samples" in line)
    return [h.strip() for h in header.strip("┃").split("┃") if h.strip()]


def test_at_80_columns_the_table_turns_vertical_and_cuts_no_header_or_value():
    svc = CapacityService(MemoryCapacityStore())
    items = [attempt(i, "H100", "failed", "InsufficientInstanceCapacity") for i in range(3)]
    items += [attempt(10 + i, "L4", "succeeded") for i in range(6)]
    assert svc.ingest("acme", items, NOW).rejected == 0
    doc = svc.report("acme", "24h", NOW, None, NOW)
    console = Console(record=True, width=80, color_system=None)
    render(console, doc)
    text = console.export_text()
    assert "…" not in text
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80
    lines = [line.strip() for line in text.splitlines()]
    numeric = [h for h in _headers(doc) if h not in ("adapter", "runtime", "mode", "region", "gpu")]
    for name in numeric:  # every column is a whole, named line in each group's block
        assert sum(line.startswith(name + " ") for line in lines) >= len(doc["groups"]), name
    assert "! aws · vllm · spot · us-east-1 · H100" in lines  # the dominance mark stays first
    assert "too few samples (n=3)" in text
