"""The report as one self-contained HTML file, drawn with plotly (the only module importing it).

plotly.js is inlined once, and a Content-Security-Policy allows no network at all: the file opens
offline, and anything that tried to fetch would be blocked and recorded. Each chart's caption
names its evidence class and source digest (from the domain figure, never decided here).
A small script records script errors and CSP violations in `data-errors` and the number of drawn
charts in `data-drawn` on <body>, so a headless browser can check the page really rendered.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from typing import Any

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

CSP = ("default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; "
       "style-src 'unsafe-inline'; img-src data: blob:; font-src data:")
CONFIG = {"displaylogo": False, "displayModeBar": False, "responsive": True}
LAYOUT = {"template": "plotly_white", "height": 340, "autosize": True,
          "margin": {"l": 70, "r": 30, "t": 50, "b": 60}}

_MONITOR = """
<script>
(function () {
  var errors = [];
  function note(text) { errors.push(String(text)); document.body.dataset.errors = JSON.stringify(errors); }
  window.addEventListener('error', function (e) { note(e.message || 'error'); });
  window.addEventListener('unhandledrejection', function (e) { note(e.reason); });
  document.addEventListener('securitypolicyviolation', function (e) {
    note('blocked ' + e.blockedURI + ' by ' + e.violatedDirective);
  });
  var original = console.error;
  console.error = function () {
    note(Array.prototype.join.call(arguments, ' '));
    original.apply(console, arguments);
  };
})();
</script>"""

# Every chart is drawn by one synchronous script after the last section, so each is laid out
# once at its final width before the load event: a chart drawn while the grid held only its own
# section was as wide as the page, then clipped to its cell (a screenshot at load showed half the
# arrival bars until a later resize). Nothing animates and nothing waits for a timer.
_DRAW = """
<script>
(function () {
  var figures = %s;
  Object.keys(figures).forEach(function (id) {
    Plotly.newPlot(id, figures[id].data, figures[id].layout, %s);
  });
})();
</script>"""

_DRAWN = """
<script>
document.body.dataset.errors = document.body.dataset.errors || '[]';
window.addEventListener('load', function () {
  var drawn = 0;
  document.querySelectorAll('.plotly-graph-div').forEach(function (div) {
    if (div.querySelector('.main-svg') && div.data && div.data.length) {
      div.dataset.drawn = 'yes';
      drawn++;
    }
  });
  document.body.dataset.drawn = String(drawn);
});
</script>"""


def _script_json(text: str) -> str:
    """JSON safe inside <script>: no `</script>` or `<!--` can close or change it."""
    return text.replace("<", "\\u003c")


def _figure(f: Mapping[str, Any]) -> go.Figure:
    kind = f["kind"]
    if kind == "bar":
        bar = go.Bar(x=f["x"], y=f["y"], marker_color="#3b6ea5",
                     width=f.get("bar_width"), hovertext=f.get("hover"))
        fig = go.Figure(bar)
        if f.get("reference_y") is not None:
            fig.add_hline(y=f["reference_y"], line_dash="dash", line_color="#888")
    elif kind == "line":
        fig = go.Figure(go.Scatter(x=f["x"], y=f["y"], mode="lines", line_color="#2a9d8f"))
        fig.update_yaxes(range=[0, 1])
    elif kind == "heatmap":
        fig = go.Figure(go.Heatmap(x=f["x"], y=f["y"], z=f["z"], text=f["text"],
                                   texttemplate="%{text}", zmin=0, zmax=1, colorscale="RdYlGn",
                                   colorbar={"title": {"text": f["z_label"]}},
                                   hovertemplate="%{y} %{x}: %{text}<extra></extra>"))
    elif kind == "table":
        columns: list[Any] = [list(c) for c in zip(*f["rows"], strict=True)]
        fig = go.Figure(go.Table(header={"values": f["columns"], "fill_color": "#dde6f0"},
                                 cells={"values": columns}))
    else:
        raise ValueError(f"unknown figure kind {kind!r}")
    fig.update_layout(title={"text": html.escape(f["title"])}, **LAYOUT)
    if kind != "table":
        fig.update_xaxes(title_text=f.get("x_label"))
        fig.update_yaxes(title_text=f.get("y_label"))
    return fig


def _section(f: Mapping[str, Any]) -> str:
    caption = (f"<p class=caption><span class=dates>{html.escape(f['dates'])}</span> · evidence: "
               f"<b>{html.escape(f['evidence_class'])}</b> · source "
               f"<code>{html.escape(f['source_digest'])}</code></p>")
    note = f"<p class=note>{html.escape(f['note'])}</p>" if f.get("note") else ""
    if f.get("empty"):
        body = (f"<h2>{html.escape(f['title'])}</h2><p class=empty>{html.escape(f['empty'])}</p>")
    else:
        body = (f"<div id='chart-{html.escape(f['id'])}' class=plotly-graph-div"
                f" style='height:{LAYOUT['height']}px; width:100%'></div>")
    return (f"<section data-figure='{html.escape(f['id'])}'"
            f" data-chart='{'no' if f.get('empty') else 'yes'}'>{body}{caption}{note}</section>")


def _draw_script(figures: list[Mapping[str, Any]]) -> str:
    charts = ",".join(f"{json.dumps('chart-' + f['id'])}:{_figure(f).to_json()}"
                      for f in figures if not f.get("empty"))
    return _DRAW % (_script_json("{" + charts + "}"), json.dumps(CONFIG))


def render_html(report: Mapping[str, Any]) -> str:
    window = report["window"]
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in report["notes"])
    sections = "".join(_section(f) for f in report["figures"])
    meta = html.escape(json.dumps({"schema": report["schema"],
                                   "trace_digest": report["trace_digest"]}))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<title>InferCrane report: {html.escape(report['deployment'])}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5rem auto; max-width: 1500px; color: #222;
        padding: 0 1rem; }}
main {{ display: grid; grid-template-columns: repeat(auto-fit, minmax(560px, 1fr)); gap: 1rem; }}
section {{ border: 1px solid #e3e3e3; border-radius: 6px; padding: .5rem 1rem; min-width: 0;
          overflow: hidden; }}
.plotly-graph-div {{ width: 100% !important; }}
.caption {{ font-size: .85rem; color: #555; }} code {{ font-size: .8rem; }}
.empty {{ color: #a33; }} .dates {{ font-weight: 600; }} .note {{ font-size: .85rem; }}
</style></head>
<body data-report='{meta}'>
{_MONITOR}
<script>{get_plotlyjs()}</script>
<h1>InferCrane report: {html.escape(report['deployment'])}</h1>
<p>Window {html.escape(window['start'])} → {html.escape(window['end'])}, {report['sample_count']:,}
requests in trace <code>{html.escape(report['trace_digest'])}</code>; generated
{html.escape(report['generated_at'])}. Each chart states the evidence it rests on: imported or
modeled data is never shown as measured, capacity is this tenant's own attempts only.</p>
<ul>{notes}</ul>
<main>{sections}</main>
{_draw_script(report["figures"])}
{_DRAWN}
</body></html>
"""
