#!/usr/bin/env python3
"""The README's screenshots, taken as a user would see them:

    python scripts/screenshots.py [--model models/cnn.onnx] [--out docs/screenshots]

1. `tune-model` in a 110x30 terminal (tmux): the live display captured mid-tuning and at the end
   (tune_live.png, tune_done.png). The pane's ANSI colours are rendered to HTML with rich, then to PNG.
2. The `compare` HTML report in headless Chromium at 1400 px (report.png).
Needs tmux and chromium (scripts/setup.sh installs both). Run while nothing else runs: it tunes for real.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CHROMIUM = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]


def shoot(url: str, png: str, width: int, height: int) -> None:
    subprocess.run(
        [*CHROMIUM, f"--screenshot={png}", f"--window-size={width},{height}", url], capture_output=True, timeout=180
    )
    if not os.path.exists(png):
        raise SystemExit(f"chromium wrote no screenshot for {url}")


def pane_to_png(ansi: str, png: str, work: str) -> None:
    """A terminal capture (with its escape codes) as a PNG, through rich's HTML export and Chromium."""
    from rich.console import Console
    from rich.terminal_theme import MONOKAI
    from rich.text import Text

    console = Console(record=True, width=110, force_terminal=True, color_system="truecolor", file=open(os.devnull, "w"))
    console.print(Text.from_ansi(ansi.rstrip("\n")))
    html = os.path.join(work, os.path.basename(png) + ".html")
    with open(html, "w") as f:
        f.write(console.export_html(inline_styles=True, theme=MONOKAI))
    lines = ansi.rstrip("\n").count("\n") + 1
    shoot("file://" + html, png, 1200, 40 + 19 * lines)


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=True).stdout


def tune_in_terminal(model: str, budget: str, out: str, work: str) -> None:
    session = f"ft-shot-{os.getpid()}"
    pkg, db = os.path.join(work, "m.ftpkg"), os.path.join(work, "db")
    cmd = (
        f"cd {ROOT} && {sys.executable} -m tuner.cli.main tune-model {model} --time-budget {budget} "
        f"--schedules none --db {db} -o {pkg}; echo '[exit '$?']'; sleep 3600"
    )
    tmux("new-session", "-d", "-s", session, "-x", "110", "-y", "30", cmd)
    try:
        time.sleep(max(20.0, _seconds(budget) * 0.85))  # mid-run: the bar redraws from the clock twice a second
        pane_to_png(tmux("capture-pane", "-p", "-e", "-t", session), os.path.join(out, "tune_live.png"), work)
        deadline = time.time() + _seconds(budget) + 600
        while "[exit" not in tmux("capture-pane", "-p", "-t", session) and time.time() < deadline:
            time.sleep(2)
        pane_to_png(tmux("capture-pane", "-p", "-e", "-t", session), os.path.join(out, "tune_done.png"), work)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def report(model: str, out: str, work: str) -> None:
    rep = os.path.join(work, "report")
    subprocess.run(
        [sys.executable, "-m", "tuner.cli.main", "compare", model, "--fusion", "none,tvm", "--ort", "-o", rep],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    shoot("file://" + os.path.join(rep, "report.html"), os.path.join(out, "report.png"), 1400, 2200)


def _seconds(budget: str) -> float:
    from tuner.core.units import parse_duration

    return parse_duration(budget)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "cnn.onnx"))
    ap.add_argument("--budget", default="60s", help="tuning time of the terminal capture")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "screenshots"))
    args = ap.parse_args(argv)
    for tool in ("tmux", "chromium"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is needed (scripts/setup.sh installs it)")
    sys.path.insert(0, ROOT)
    os.makedirs(args.out, exist_ok=True)
    os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count() or 1))
    with tempfile.TemporaryDirectory() as work:
        tune_in_terminal(os.path.abspath(args.model), args.budget, args.out, work)
        report(os.path.abspath(args.model), args.out, work)
    print("\n".join(os.path.join(args.out, f) for f in ("tune_live.png", "tune_done.png", "report.png")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
