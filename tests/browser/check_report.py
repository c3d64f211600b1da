#!/usr/bin/env python3
"""Checks `pipesched tune --report` in a headless browser: the page renders (a screenshot that
is not blank) and its script runs without an error (the DOM after the script carries its
marker and no recorded error; the console shows no error either). Then what the page shows:
times below a second keep their digits (ms, µs), no debug line, legend symbols coloured as
the plot's markers, a memory axis that spans the points (a device's capacity far beyond them
noted, not drawn), and the summary table of the best plans. Two searches: UniformCost (units,
a budget within the points' range) and TransformerCost (seconds, bytes, a small model on an
80 GB device).

The browser is PIPESCHED_CHROMIUM (a program on PATH or a path) when set, else chromium or
chromium-browser on PATH. Skips (exit 77, ctest's SKIP_RETURN_CODE) when there is none,
saying what is missing: scripts/setup.sh installs it. Every run of a program is bounded by a
timeout.
"""
import argparse
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib

TIMEOUT = 120  # seconds for each program
SKIP = 77  # ctest's SKIP_RETURN_CODE for this test


def fail(message):
    print("tune_report.browser: " + message, file=sys.stderr)
    sys.exit(1)


def run(argv, **kw):
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, **kw)
    except subprocess.TimeoutExpired:
        fail("%s took longer than %d s; stopped" % (argv[0], TIMEOUT))


def png_colours(path, most=64):
    """The distinct colours of an 8-bit RGB or RGBA PNG (up to `most`), read with zlib only."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail("%s is not a PNG file" % path)
    pos, idat, width, height, ctype = 8, b"", 0, 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, ctype = struct.unpack(">IIBB", body[:10])
            if depth != 8 or ctype not in (2, 6):
                fail("%s: a PNG of bit depth %d, colour type %d; expected 8-bit RGB(A)" %
                     (path, depth, ctype))
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    bpp = 3 if ctype == 2 else 4
    stride = width * bpp
    prev = bytearray(stride)
    colours = set()
    i = 0
    for _ in range(height):
        f = raw[i]
        line = bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        for x in range(0, stride, bpp * 7):  # every 7th pixel is plenty to tell colours apart
            colours.add(bytes(line[x:x + 3]))
            if len(colours) >= most:
                return colours
        prev = line
    return colours


def attributes(tag):
    """The attributes of one start tag as a dict."""
    return dict(re.findall(r'([\w:-]+)="([^"]*)"', tag))


def shape_colours(markup):
    """(fill, stroke) of the first shape (path, rect, circle, line) in `markup`."""
    m = re.search(r"<(path|rect|circle|line)\b[^>]*>", markup)
    if not m:
        return None
    a = attributes(m.group(0))
    return (a.get("fill"), a.get("stroke"))


def marker_x(markup):
    """The x of a plot marker's centre: a circle's cx, a square's x + 5, a triangle's apex."""
    m = re.search(r'<circle[^>]* cx="([-\d.]+)"', markup)
    if m:
        return float(m.group(1))
    m = re.search(r'<rect[^>]* x="([-\d.]+)"', markup)
    if m:
        return float(m.group(1)) + 5
    m = re.search(r'<path[^>]* d="M([-\d.]+),', markup)
    return float(m.group(1)) if m else None


TIME = re.compile(r"^-?\d+(\.\d+)? (s|ms|\xb5s)$")


def check_content(name, html, seconds, budget_line):
    """What the page shows, on the HTML as written (the DOM adds nothing but the marker)."""
    def bad(message):
        fail("%s: %s" % (name, message))
    # Times: every step time in the table and the tooltips is a number and a unit; in seconds
    # below 1 s it is in ms or µs with at least three significant digits, never "0.001 s".
    tips = re.findall(r'data-tip="[^"]*?: step ([^,"]*)', html)
    table = re.search(r'<table id="summary"[^>]*>(.*?)</table>', html, re.S)
    if not table:
        bad("no summary table (id=\"summary\")")
    rows = re.findall(r"<tr class=\"(best|baseline)\">(.*?)</tr>", table.group(1), re.S)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", r[1]) for r in rows]
    steps = [c[4] for c in cells if len(c) > 4]
    if not tips or not steps:
        bad("no step times in the tooltips or the table")
    for t in tips + steps:
        if seconds:
            if not TIME.match(t):
                bad("step time %r is not a number with s, ms or µs" % t)
            number, unit = t.split(" ")
            if unit == "s" and abs(float(number)) < 1:
                bad("step time %r under a second is written in seconds" % t)
        elif not re.match(r"^-?\d+(\.\d+)? units?$", t):
            bad("step time %r is not in units" % t)
    if re.search(r"\b0\.0\d{0,2} s\b", html):
        bad("a time under a second lost its digits (%s)" %
            re.search(r"\b0\.0\d{0,2} s\b", html).group(0))
    # No debug line: the script's marker is hidden and says nothing.
    status = re.search(r'<div id="script-status"[^>]*>(.*?)</div>', html, re.S)
    if not status or "hidden" not in status.group(0) or status.group(1).strip():
        bad("the script's status is a visible line: %r" % (status.group(0) if status else None))
    if "script ran" in html:
        bad("a debug line \"script ran\" is on the page")
    # Legend: each symbol has the colours of its markers in the plot.
    legend = dict(re.findall(r'<span class="legend-item" data-marker="([\w-]+)">(.*?)</span>',
                             html, re.S))
    for cls in ("best", "baseline", "frontier-point", "fits", "over-budget"):
        if cls not in legend:
            bad("the legend has no %s symbol" % cls)
        want = shape_colours(legend[cls])
        if not want or want[0] is None or (want[0] == "none" and want[1] in (None, "none")):
            bad("the legend's %s symbol has no colour: %r" % (cls, want))
        for g in re.findall(r'<g class="point %s"[^>]*>(.*?)</g>' % cls, html, re.S):
            if shape_colours(g) != want:
                bad("the legend's %s symbol is %r but its markers are %r" %
                    (cls, want, shape_colours(g)))
    # Memory axis: the points reach well into it; the budget a line or a note.
    area = re.search(r'<rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)" height="[\d.]+" '
                     r'fill="#fafafa"', html)
    xs = [marker_x(g) for g in re.findall(r'<g class="point [^"]*"[^>]*>(.*?)</g>', html, re.S)]
    xs = [x for x in xs if x is not None]
    if not area or not xs:
        bad("no plot area or no points")
    left, width = float(area.group(1)), float(area.group(2))
    # The axis reaches at most twice the largest point (a budget within that range), so the
    # rightmost point lies past 40 % of it.
    if max(xs) < left + 0.4 * width:
        bad("every point lies in the memory axis's left 40%% (rightmost at %.0f of %.0f..%.0f)" %
            (max(xs), left, left + width))
    if budget_line and 'class="budget"' not in html:
        bad("the budget within the points' range is not drawn")
    if not budget_line and ('class="budget"' in html or 'class="budget-note"' not in html):
        bad("the budget far beyond the points is drawn instead of noted")
    return len(rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    wanted = os.environ.get("PIPESCHED_CHROMIUM")
    if wanted is not None:
        chromium = shutil.which(wanted) if wanted else None
        what = "PIPESCHED_CHROMIUM=%r names no program" % wanted
    else:
        chromium = shutil.which("chromium") or shutil.which("chromium-browser")
        what = "chromium (or chromium-browser) is not on PATH"
    if not chromium:
        print("tune_report.browser: skipped: %s, so the report cannot be checked in a "
              "browser; run scripts/setup.sh as root (or: sudo apt-get install -y chromium), "
              "or name the browser in PIPESCHED_CHROMIUM" % what)
        sys.exit(SKIP)
    os.makedirs(args.work, exist_ok=True)
    report = os.path.abspath(os.path.join(args.work, "report.html"))
    model_report = os.path.abspath(os.path.join(args.work, "report-model.html"))
    shot = os.path.abspath(os.path.join(args.work, "report.png"))
    for f in (report, model_report, shot):
        if os.path.exists(f):
            os.remove(f)
    searches = [
        (report, ["--ranks", "4", "--global-batch", "8", "--memory-budget", "3", "--bases",
                  "1f1b,interleaved-1f1b,zb-h1", "--checkpoint", "none,selective,mario"],
         False, True, 9),
        (model_report, ["--ranks", "4", "--global-batch", "8", "--model", "gpt3-1.3b",
                        "--device", "a100-80gb", "--microbatch-sizes", "1,2", "--bases",
                        "1f1b,zb-h1", "--checkpoint", "none,mario"], True, False, 4),
    ]
    pages = []
    for path, flags, seconds, budget_line, pairs in searches:
        tune = run([args.cli, "tune"] + flags + ["--threads", "1", "--report", path])
        if tune.returncode != 0 or not os.path.isfile(path):
            fail("pipesched tune --report failed (exit %d): %s" % (tune.returncode, tune.stderr))
        html = open(path, encoding="utf-8").read()
        for needed in ('id="scatter"', 'class="frontier"',
                       "step time (s)" if seconds else "step time (units)"):
            if needed not in html:
                fail("%s lacks %s" % (path, needed))
        if re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", html):
            fail("%s loads an external resource" % path)
        rows = check_content(os.path.basename(path), html, seconds, budget_line)
        if rows != 1 + pairs:
            fail("%s: the summary table has %d rows; expected the best and %d pairs" %
                 (path, rows, pairs))
        pages.append((path, html))
    profile = os.path.abspath(os.path.join(args.work, "profile"))
    common = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
              "--user-data-dir=" + profile, "--enable-logging=stderr", "--v=0"]
    shot_run = run(common + ["--screenshot=" + shot, "--window-size=1280,2000",
                             "file://" + report])
    if not os.path.isfile(shot) or os.path.getsize(shot) < 1000:
        fail("chromium wrote no screenshot (exit %d): %s" %
             (shot_run.returncode, shot_run.stderr[-2000:]))
    colours = png_colours(shot)
    if len(colours) < 4:
        fail("the screenshot is blank: %d colours" % len(colours))
    logs = shot_run.stderr
    for path, html in pages:
        dom = run(common + ["--virtual-time-budget=5000", "--dump-dom", "file://" + path])
        if dom.returncode != 0:
            fail("chromium --dump-dom failed (exit %d): %s" % (dom.returncode, dom.stderr[-2000:]))
        logs += dom.stderr
        if 'data-done="yes"' not in dom.stdout:
            fail("%s: the page's script did not finish (no data-done=\"yes\" in the DOM)" % path)
        errors = re.findall(r'<div class="script-error">(.*?)</div>', dom.stdout)
        if errors:
            fail("%s: the page's script raised: %s" % (path, "; ".join(errors)))
        if "script ran" in dom.stdout:
            fail("%s: the script wrote a debug line into the page" % path)
    console = [l for l in logs.splitlines()
               if "CONSOLE" in l and ("Uncaught" in l or "Error" in l)]
    if console:
        fail("console errors: " + "; ".join(console))
    for path, html in pages:
        print("tune_report.browser: %s, %d bytes, %d points" %
              (path, len(html), html.count('class="point ')))
    print("tune_report.browser: screenshot %d bytes, %s colours; script ran without errors; "
          "times, legend, memory axis and summary table as expected" %
          (os.path.getsize(shot), "%d+" % len(colours) if len(colours) >= 64 else len(colours)))


if __name__ == "__main__":
    main()
