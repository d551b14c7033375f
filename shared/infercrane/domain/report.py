"""The figures of `infercrane report`: plain data, each labelled with its evidence and source.

Every figure names the evidence class it rests on (`observed`/`imported` traffic with `observed`
or `modeled` timing, `tenant-observed` capacity, cache facts, an AIPerf `approximation`) and the
digest of its source document, so a chart never shows modeled or approximated data as measured.
Drawing is an adapter's job (`adapters/plotly_report.py`); nothing here knows a chart library.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from infercrane.clock import rfc3339
from infercrane.domain.digest import compute_digest
from infercrane.domain.trace import arrival_histogram

ARRIVAL_BINS = 60
TOKEN_BINS = 40
MAX_CURVE_POINTS = 400
SCHEMA = "infercrane.report/v1"


def _trace_evidence(trace: Mapping[str, Any]) -> str:
    return f"{trace['evidence_class']} traffic, {trace['timing_source']} timing"


def _trace_dates(trace: Mapping[str, Any]) -> str:
    return f"traffic {trace['window']['start']} → {trace['window']['end']}"


def _no_data_if_empty(figure: dict[str, Any], reason: str) -> dict[str, Any]:
    """A histogram of no requests says so in words: plotly draws an all-zero series as an axis
    from -1 to 1, which reads as data."""
    if not any(figure["y"]):
        figure["empty"] = f"No data: {reason}"
    return figure


def _histogram(values: Sequence[int], bins: int) -> dict[str, Any]:
    """Equal-width bins over [0, max]: (left edges, width, counts)."""
    top = max(values) if values else 0
    width = max(1, -(-(top + 1) // bins))
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, int(v) // width)] += 1
    return {"edges": [i * width for i in range(bins)], "width": width, "counts": counts}


def arrival_figure(trace: Mapping[str, Any]) -> dict[str, Any]:
    hist = arrival_histogram(trace, ARRIVAL_BINS)
    bin_s = hist["bin_ms"] / 1000
    return _no_data_if_empty({
        "id": "arrival-rate", "kind": "bar",
        "title": f"Arrival rate ({ARRIVAL_BINS} bins of {bin_s:,.0f} s)",
        "x": [round(i * bin_s / 60, 3) for i in range(hist["bins"])],
        "y": [round(c / bin_s, 6) if bin_s else 0 for c in hist["counts"]],
        "x_label": "minutes into the window", "y_label": "requests / s",
        "evidence_class": _trace_evidence(trace), "source_digest": trace["digest"],
        "dates": _trace_dates(trace),
    }, "no requests in this window.")


def token_figure(trace: Mapping[str, Any], name: str) -> dict[str, Any]:
    values = [int(r[name]) for r in trace["records"]]
    hist = _histogram(values, TOKEN_BINS)
    label = name.replace("_", " ")
    return _no_data_if_empty({
        "id": name.replace("_", "-"), "kind": "bar",
        "title": f"{label.capitalize()} per request (n={len(values):,})",
        "x": [e + hist["width"] / 2 for e in hist["edges"]], "y": hist["counts"],
        "bar_width": hist["width"],
        "x_label": label, "y_label": "requests",
        "evidence_class": _trace_evidence(trace), "source_digest": trace["digest"],
        "dates": _trace_dates(trace),
    }, "no requests in this window.")


def prefix_reuse_figure(trace: Mapping[str, Any]) -> dict[str, Any]:
    """Cumulative share of prefix blocks already seen earlier in the trace, request by request."""
    seen: set[str] = set()
    total = reused = 0
    xs: list[int] = []
    ys: list[float] = []
    records = trace["records"]
    step = max(1, len(records) // MAX_CURVE_POINTS)
    for i, r in enumerate(records):
        for block in r.get("prefix_block_ids") or ():
            total += 1
            if block in seen:
                reused += 1
            else:
                seen.add(block)
        if total and (i % step == 0 or i == len(records) - 1):
            xs.append(i + 1)
            ys.append(round(reused / total, 6))
    figure = {
        "id": "prefix-reuse", "kind": "line", "title": "Prefix reuse (cumulative)",
        "x": xs, "y": ys, "x_label": "requests so far", "y_label": "share of reused blocks",
        "evidence_class": _trace_evidence(trace), "source_digest": trace["digest"],
        "dates": _trace_dates(trace),
    }
    if not xs:
        figure["empty"] = "No data: this trace carries no prefix block identities."
    return figure


def capacity_heatmap(report: Mapping[str, Any]) -> dict[str, Any]:
    """Region x GPU, colour = lower bound of the 95 % Wilson interval, annotated with n.

    Its dates are the capacity report's own window (the CLI asks it up to now), which is
    not the traffic's: a report on last year's traffic still shows the tenant's current evidence."""
    groups = [g for g in report["groups"] if g["region"] is not None and g["gpu"] is not None]
    regions = sorted({g["region"] for g in groups})
    gpus = sorted({g["gpu"] for g in groups})
    z: list[list[float | None]] = [[None] * len(gpus) for _ in regions]
    text: list[list[str]] = [[""] * len(gpus) for _ in regions]
    for g in groups:
        i, j = regions.index(g["region"]), gpus.index(g["gpu"])
        ci = g["success_rate_ci"]
        n = g["succeeded"] + g["failed"]
        z[i][j] = None if ci is None else ci[0]
        text[i][j] = (f"n={n}" if ci is None else
                      f"{100 * ci[0]:.0f}% (n={n})" + (" few" if g["insufficient"] else ""))
    figure = {
        "id": "capacity-heatmap", "kind": "heatmap",
        "title": f"Capacity: lower bound of the 95 % success interval ({report['window']['duration']})",
        "x": gpus, "y": regions, "z": z, "text": text, "x_label": "GPU", "y_label": "region",
        "z_label": "success lower bound",
        "evidence_class": "tenant-observed (this tenant's lifecycle attempts; not global "
                          "availability)",
        "source_digest": compute_digest(report),
        "dates": f"capacity {report['window']['start']} → {report['window']['end']}",
    }
    if not groups:
        figure["empty"] = "No data: no lifecycle attempts in this capacity window."
    return figure


def cache_figure(model: str, cache: Mapping[str, Any], read_at: str) -> dict[str, Any]:
    rows = sorted(cache["observations"], key=lambda o: (o["adapter"], o["location"]))
    figure = {
        "id": "cache-state", "kind": "table",
        "title": f"Cache state per location: model {model[:19]}…",
        "columns": ["adapter", "location", "state", "age s", "expires in s"],
        "rows": [[o["adapter"], o["location"], o["state"], o["age_s"], o["expires_in_s"]]
                 for o in rows],
        "evidence_class": "observed cache facts (expire within 24 h; expired reads as unknown)",
        "source_digest": compute_digest(cache),
        "note": f"model {model}",
        "dates": f"cache state as read at {read_at}",
    }
    if not rows:
        figure["empty"] = "No data: no cache observations for this model."
    return figure


def fidelity_figure(execution: Mapping[str, Any]) -> dict[str, Any]:
    """Measured by AIPerf against the captured trace, metric by metric, as measured / captured."""
    names, ratios, hover = [], [], []
    for row in execution.get("comparison") or []:
        captured, candidate = row.get("captured"), row.get("candidate")
        if isinstance(captured, int | float) and isinstance(candidate, int | float) and captured:
            names.append(row["metric"])
            ratios.append(round(candidate / captured, 4))
            hover.append(f"measured {candidate:,.2f} / captured {captured:,.2f}")
    figure = {
        "id": "execution-fidelity", "kind": "bar",
        "title": f"Latest execution {execution['execution_id']}: AIPerf measured / captured",
        "x": names, "y": ratios, "hover": hover, "reference_y": 1.0,
        "x_label": "metric", "y_label": "measured / captured (1 = same)",
        "evidence_class": f"{execution['evidence_class']} ({execution['method']}); captured side: "
                          f"trace {execution['source']['trace_digest']}",
        "source_digest": execution["digest"],
        "note": (execution.get("fidelity") or {}).get("line"),
        "dates": f"execution {execution['started_at']} → {execution['ended_at']}",
    }
    if not names:
        figure["empty"] = ("No data: the execution has no measured figures to compare (it failed "
                           "or ran empty).")
    return figure


def build_report(*, deployment: str, trace: Mapping[str, Any], capacity: Mapping[str, Any],
                 caches: Mapping[str, Mapping[str, Any]], execution: Mapping[str, Any] | None,
                 generated_at: datetime) -> dict[str, Any]:
    figures = [arrival_figure(trace), token_figure(trace, "input_tokens"),
               token_figure(trace, "output_tokens"), prefix_reuse_figure(trace),
               capacity_heatmap(capacity)]
    figures += [cache_figure(model, doc, rfc3339(generated_at))
                for model, doc in sorted(caches.items())]
    notes = []
    if not caches:
        notes.append("Cache state: no model digest given (--model-digest).")
    if execution is not None:
        figures.append(fidelity_figure(execution))
    else:
        notes.append("Execution fidelity: no execution recorded for this deployment yet.")
    cap, traffic = capacity["window"], trace["window"]
    at = datetime.fromisoformat
    if at(cap["end"]) <= at(traffic["start"]) or at(cap["start"]) >= at(traffic["end"]):
        notes.append(f"Capacity shows {cap['start']} → {cap['end']}, this tenant's evidence up to "
                     f"the report, not the traffic's window ({traffic['start']} → "
                     f"{traffic['end']}).")
    return {"schema": SCHEMA, "deployment": deployment, "window": trace["window"],
            "trace_digest": trace["digest"], "sample_count": trace["sample_count"],
            "generated_at": rfc3339(generated_at), "figures": figures, "notes": notes}
