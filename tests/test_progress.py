"""tune-model's live display (tuner/cli/progress.py), driven by its events without tuning anything."""

import io
import time

from rich.console import Console

from tuner.cli.progress import LiveProgress
from tuner.tuning.progress import RoundStatus


def test_time_bar_moves_between_measured_batches():
    """Between batches (30-100 s of search and builds) no event arrives: the bar and ETA follow the clock."""
    console = Console(file=io.StringIO(), force_terminal=True, width=110)
    live = LiveProgress(console)
    live.stage("tune", "3 kernels, until 600 s")
    live.begin(RoundStatus(spent=3, budget=10**9, elapsed_s=1.0, time_budget_s=600.0, estimate_ms=1.5))
    (task,) = live.bar.tasks
    first = task.completed
    time.sleep(1.5)  # no event
    assert task.completed >= first + 1.0 and task.total == 600.0
    assert "ETA" in task.fields["eta"] and "kernel-time estimate 1.500 ms" in task.fields["status"]
    live.close()
    done = task.completed
    time.sleep(0.8)
    assert task.completed == done  # closed: the clock no longer redraws


def test_live_line_fits_an_80_column_terminal_with_every_field():
    """A long status (kernel names) used to push the line past the terminal's width: it wrapped, the in-place
    redraw cleared only its last line, and the bar looked frozen. The status is cut instead."""
    console = Console(file=io.StringIO(), force_terminal=True, width=80)
    live = LiveProgress(console)
    live.stage("tune", "4 kernels, until 40 s")
    names = ["fused_conv2d1_add_relu_add11", "fused_conv2d2_add2_maximum_minimum_multiply", "mean1", "x"]
    live.round(RoundStatus(spent=5, budget=10**9, elapsed_s=2.0, time_budget_s=40.0, estimate_ms=0.196, tasks=names))
    out = Console(file=io.StringIO(), width=80, record=True)
    out.print(live.bar.make_tasks_table(live.bar.tasks))
    live.close()
    (line,) = [x for x in out.export_text().splitlines() if x.strip()]
    assert len(line) <= 80 and "5 trials" in line and "ETA 3" in line and "kernel-time" in line, line


def test_live_status_says_which_kernels_hold_the_time():
    """With the default build profiled (issue 39, lever 2) the estimate is the model's and the kernels that hold
    most of it are named with their share."""
    console = Console(file=io.StringIO(), force_terminal=True, width=200)
    live = LiveProgress(console)
    live.stage("tune", "2 kernels, until 40 s")
    holding = [("fused_conv2d1_add_relu", 2.0, 0.8), ("mean1", 0.5, 0.2)]
    status = RoundStatus(5, 10**9, 2.0, 40.0, 2.7, ["fused_conv2d1_add_relu"], in_model=True, holding=holding)
    live.round(status)
    (task,) = live.bar.tasks
    live.close()
    words = task.fields["status"]
    assert "in-model estimate 2.700 ms" in words and "time held by fused_conv2d1_add_relu 80%, mean1 20%" in words
