#!/usr/bin/env python3
"""Checks `pipesched tune --report` in a headless browser: the page renders (a screenshot that
is not blank) and its script runs without an error (the DOM after the script carries its
marker and no recorded error; the console shows no error either).

Fails when chromium is absent: scripts/setup.sh installs it, so a machine without it has not
been set up. Every run of a program is bounded by a timeout.
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        fail("chromium is not installed, so the report cannot be checked in a browser; "
             "run scripts/setup.sh as root (or: sudo apt-get install -y chromium)")
    os.makedirs(args.work, exist_ok=True)
    report = os.path.abspath(os.path.join(args.work, "report.html"))
    shot = os.path.abspath(os.path.join(args.work, "report.png"))
    for f in (report, shot):
        if os.path.exists(f):
            os.remove(f)
    tune = run([args.cli, "tune", "--ranks", "4", "--global-batch", "8", "--memory-budget", "3",
                "--bases", "1f1b,interleaved-1f1b,zb-h1", "--checkpoint", "none,selective,mario",
                "--threads", "1", "--report", report])
    if tune.returncode != 0 or not os.path.isfile(report):
        fail("pipesched tune --report failed (exit %d): %s" % (tune.returncode, tune.stderr))
    html = open(report, encoding="utf-8").read()
    for needed in ('id="scatter"', 'class="budget"', 'class="frontier"', "step time (units)"):
        if needed not in html:
            fail("the report lacks %s" % needed)
    if re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", html):
        fail("the report loads an external resource")
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
    dom = run(common + ["--virtual-time-budget=5000", "--dump-dom", "file://" + report])
    if dom.returncode != 0:
        fail("chromium --dump-dom failed (exit %d): %s" % (dom.returncode, dom.stderr[-2000:]))
    if 'data-done="yes"' not in dom.stdout:
        fail("the page's script did not finish (no data-done=\"yes\" in the DOM)")
    errors = re.findall(r'<div class="script-error">(.*?)</div>', dom.stdout)
    if errors:
        fail("the page's script raised: " + "; ".join(errors))
    console = [l for l in (shot_run.stderr + dom.stderr).splitlines()
               if "CONSOLE" in l and ("Uncaught" in l or "Error" in l)]
    if console:
        fail("console errors: " + "; ".join(console))
    points = html.count('class="point ')
    print("tune_report.browser: %s, %d bytes, %d points; screenshot %d bytes, %s colours; "
          "script ran without errors" % (report, len(html), points, os.path.getsize(shot),
                                         "%d+" % len(colours) if len(colours) >= 64
                                         else len(colours)))


if __name__ == "__main__":
    main()
