"""Headless Chromium (Debian's package, installed by `make install`) for the report tests."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import zlib
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars"]
# Lets the page's load handlers and plotly's promises settle before the DOM is read.
BUDGET_MS = "8000"


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, ("chromium is not installed: `make install` installs Debian's package "
                   "(apt-get install -y chromium)")
    return found


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        return subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}", *args],
                              capture_output=True, text=True, timeout=240, check=False)


def dump_dom(page: Path) -> str:
    done = _run(f"--virtual-time-budget={BUDGET_MS}", "--dump-dom", page.resolve().as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def screenshot(page: Path, out: Path, width: int = 1400, height: int = 2000,
               settle: bool = True) -> None:
    """A PNG of the page; `settle=False` takes it as soon as the page has loaded (no extra
    virtual time for timers or promises), as a user's first look or a quick screenshot would."""
    budget = [f"--virtual-time-budget={BUDGET_MS}"] if settle else []
    done = _run(*budget, f"--window-size={width},{height}", f"--screenshot={out.resolve()}",
                page.resolve().as_uri())
    assert done.returncode == 0 and out.exists(), done.stderr[-2000:]


def png_pixels(path: Path) -> tuple[bytes, bytes]:
    """(IHDR, the decompressed image data) of a PNG: equal for equal pixels from one encoder,
    without an imaging library."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, header, idat = 8, b"", b""
    while pos < len(data):
        length = int.from_bytes(data[pos:pos + 4], "big")
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    return header, zlib.decompress(idat)


@dataclass
class Section:
    figure: str
    chart: bool
    text: str = ""
    drawn: bool = False
    marks: int = 0  # drawn plot elements: bars, line paths, heatmap images, table cells


@dataclass
class RenderedPage(HTMLParser):
    """What the browser built: body flags, and per section what was drawn inside it."""

    body: dict[str, str] = field(default_factory=dict)
    sections: list[Section] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        classes = set(a.get("class", "").split())
        if tag == "body":
            self.body = a
        elif tag == "section" and "data-figure" in a:
            self.sections.append(Section(a["data-figure"], a.get("data-chart") == "yes"))
        elif self.sections:
            s = self.sections[-1]
            if "plotly-graph-div" in classes and a.get("data-drawn") == "yes":
                s.drawn = True
            # A bar (g.point), a line trace's path, a heatmap (g.hm holding its raster), a table cell's text.
            if (tag == "g" and "point" in classes) or (tag == "path" and "js-line" in classes) or (
                    tag == "g" and "hm" in classes) or "cell-text" in classes:
                s.marks += 1

    def handle_data(self, data: str) -> None:
        if self.sections:
            self.sections[-1].text += data


def rendered(page: Path) -> RenderedPage:
    parsed = RenderedPage()
    parsed.feed(dump_dom(page))
    return parsed
