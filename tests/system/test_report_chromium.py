"""The HTML report in a real browser: Debian's headless Chromium renders it to PNG; the
page's elements are checked in the DOM Chromium built, and the picture is not blank (the
verdict colours of the GPU timeline are on it)."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import time
import zlib
from pathlib import Path

import pytest
import structlog

from rogue_watchdog.cli import main
from tests.conftest import need_program
from tests.unit.test_report import burst_week, busy_html, check_timeline, parse_timeline, week

pytestmark = pytest.mark.system


def _chromium() -> str:
    need_program("chromium")  # Debian's package (scripts/setup.sh --test installs it)
    path = shutil.which("chromium")
    assert path is not None
    return path


def _headless(chromium: str, tmp_path: Path) -> list[str]:
    """Headless Chromium's command line at 1300x1000, with a profile of this test's."""
    return [
        chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1300,1000",
    ]  # fmt: skip


def _dump_dom(base: list[str], page: Path) -> str:
    """The DOM Chromium built from ``page``."""
    dom = subprocess.run(
        [*base, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    return dom.stdout


def _pixels(png: bytes) -> tuple[int, int, set[tuple[int, int, int]]]:
    """Width, height and the set of RGB colours of an 8-bit non-interlaced PNG."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    height = depth = ctype = 0
    while pos < len(png):
        (n,), kind = struct.unpack(">I", png[pos : pos + 4]), png[pos + 4 : pos + 8]
        body = png[pos + 8 : pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, ctype = struct.unpack(">IIBB", body[:10])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    assert depth == 8 and ctype in (2, 6)
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    colours: set[tuple[int, int, int]] = set()
    for y in range(height):
        row = raw[y * (stride + 1) : (y + 1) * (stride + 1)]
        f, line = row[0], bytearray(row[1:])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[i] = (line[i] + pred) & 255
        for x in range(0, stride, bpp * 4):  # every 4th pixel is plenty
            colours.add((line[x], line[x + 1], line[x + 2]))
        prev = line
    return width, height, colours


def test_html_report_renders_in_headless_chromium(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chromium = _chromium()
    now = time.time()
    try:
        busy_html(tmp_path, now)  # writes tmp_path/week.html
        state = week(tmp_path / "small", now)
        small = tmp_path / "small.html"
        args = ["report", "--state-dir", str(state), "--since", "1h", "--format", "html"]
        assert main([*args, "--output", str(small)]) == 0
    finally:
        structlog.reset_defaults()
    page = tmp_path / "week.html"
    base = _headless(chromium, tmp_path)
    dom = _dump_dom(base, page)
    html = dom
    for element in ('id="timeline"', 'id="by-origin"', 'id="by-user"', 'id="events"', 'id="open"'):
        assert element in html, element
    # The DOM Chromium built from the page: rows by GPU index and name, lanes that do
    # not overlap, verdict over time, incidents on their GPU's row, axis, legend.
    check_timeline(parse_timeline(html))
    small_dom = subprocess.run(
        [*base, "--dump-dom", small.as_uri()], capture_output=True, text=True, timeout=120
    ).stdout
    assert "respawned (+12m) as PID 21" in small_dom
    shot = tmp_path / "week.png"
    out = subprocess.run(
        [*base, f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120
    )
    assert out.returncode == 0 and shot.exists(), out.stderr[-2000:]
    width, height, colours = _pixels(shot.read_bytes())
    assert (width, height) == (1300, 1000)
    assert len(colours) > 10  # not blank
    assert (0xC6, 0x28, 0x28) in colours  # a rogue run's bar
    assert (0x2E, 0x7D, 0x32) in colours  # a sanctioned run's bar
    assert (0x4A, 0x14, 0x8C) in colours  # an incident's mark


def test_a_burst_keeps_the_timeline_short_in_headless_chromium(tmp_path: Path) -> None:
    """Fresh-user hour (2026-12-06): one 55-process burst made a timeline row about
    1,000 px tall, so the tables were below the first screen. Before (4456053) on this
    history: the SVG 1,503 units tall (about 1,590 px at 1300 wide). After: 296."""
    chromium = _chromium()
    try:
        state = burst_week(tmp_path, time.time())
        page = tmp_path / "burst.html"
        args = ["report", "--state-dir", str(state), "--since", "7d", "--format", "html"]
        assert main([*args, "--output", str(page)]) == 0
    finally:
        structlog.reset_defaults()
    base = _headless(chromium, tmp_path)
    dom = _dump_dom(base, page)
    t = parse_timeline(dom)
    assert [(r["data-gpu"], r["data-lanes"]) for r in t["rows"]] == [("GPU-a", "8"), ("", "1")]
    # 296: 11 more for the band the host row's incident marks sit in (issue 33).
    assert re.search(r'<svg id="timeline"[^>]*viewBox="0 0 1200 296"', dom)
    shot = tmp_path / "burst.png"
    out = subprocess.run(
        [*base, f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120
    )
    assert out.returncode == 0 and shot.exists(), out.stderr[-2000:]
    keep = os.environ.get("ROGUE_WATCHDOG_SCREENSHOTS")  # for a closing note
    if keep:
        shutil.copy(shot, Path(keep) / "report-burst.png")
    _width, _height, colours = _pixels(shot.read_bytes())
    assert (0xC6, 0x28, 0x28) in colours  # the burst's bar (rogue)
    assert (0x2E, 0x7D, 0x32) in colours  # the notebooks (sanctioned)


#: Appended to a copy of the page (the report itself has no script): each label's,
#: mark's and incident line's box as Chromium laid it out, into the DOM it dumps.
_MEASURE = """<script>
const box = (r) => [r.x, r.x + r.width, r.y, r.y + r.height];
const out = {labels: [], marks: [], lines: []};
out.spill = [];
for (const t of document.querySelectorAll("text.bar-label, text.more-label")) {
  const b = box(t.getBBox());
  out.labels.push(b);
  // A label drawn in its bar (white) stays inside it: labels are never cut, so one that
  // did not fit would spill over the bar's end.
  const g = t.closest("g.run");
  if (g && t.getAttribute("fill") === "#fff" &&
      (b[0] < +g.dataset.x0 - 0.5 || b[1] > +g.dataset.x1 + 0.5)) {
    out.spill.push([t.textContent, b[0], b[1], +g.dataset.x0, +g.dataset.x1]);
  }
}
for (const g of document.querySelectorAll("g.incident")) {
  const parts = [...g.querySelectorAll("path, text.mark-count")].map((e) => box(e.getBBox()));
  out.marks.push([Math.min(...parts.map((p) => p[0])), Math.max(...parts.map((p) => p[1])),
                  Math.min(...parts.map((p) => p[2])), Math.max(...parts.map((p) => p[3]))]);
  for (const l of g.querySelectorAll("line")) {
    const x = +l.getAttribute("x1");
    out.lines.push([x, x, +l.getAttribute("y1"), +l.getAttribute("y2")]);
  }
}
const pre = document.createElement("pre");
pre.id = "geometry";
pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
</script>"""


def test_labels_and_marks_keep_out_of_each_others_way_in_headless_chromium(
    tmp_path: Path,
) -> None:
    """Fresh user E (issue 33): incident lines through bar labels, count marks of one
    minute touching. Checked on the boxes Chromium laid out (the real glyphs, not the
    report's estimate of them): no line crosses a label or another mark, no two labels
    and no two marks touch. Before (f415060): 3 lines through labels, 14 mark pairs
    touching (by the report's own estimate, test_report)."""
    import json

    from tests.unit.test_report import crowded_hour_page, overlaps

    chromium = _chromium()
    try:
        page = crowded_hour_page(tmp_path)
    finally:
        structlog.reset_defaults()
    measured = tmp_path / "measured.html"
    measured.write_text(page.read_text().replace("</body>", _MEASURE + "</body>"))
    base = _headless(chromium, tmp_path)
    dom = _dump_dom(base, measured)
    found = re.search(r'<pre id="geometry">(.*?)</pre>', dom, re.S)
    assert found is not None, dom[-2000:]
    boxes = json.loads(found.group(1).replace("&quot;", '"'))
    assert len(boxes["labels"]) >= 3 and boxes["marks"] and boxes["lines"]
    assert overlaps(boxes) == {
        "line x label": 0, "line x other mark": 0, "label x label": 0, "mark x mark": 0,
    }  # fmt: skip
    assert boxes["spill"] == []  # a label in its bar fits it (fresh user F: labels were cut)
    shot = tmp_path / "hour.png"
    out = subprocess.run(
        [*base, f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120
    )
    assert out.returncode == 0 and shot.exists(), out.stderr[-2000:]
    keep = os.environ.get("ROGUE_WATCHDOG_SCREENSHOTS")  # for a closing note
    if keep:
        shutil.copy(shot, Path(keep) / "report-crowded-hour.png")
