"""tune-model's progress on the terminal: a live display in place (rich), or plain lines when stdout is not a
terminal (logs, CI); nothing with --json or -q. Events come from tuner.tuning.progress."""

from __future__ import annotations

import threading
import time

from tuner.tuning.knobs import UNLIMITED
from tuner.tuning.progress import Progress, RoundStatus


def make_progress(console) -> Progress:
    return LiveProgress(console) if console.is_terminal else PlainProgress(console)


def _estimate_words(status: RoundStatus, reference_ms: float | None) -> str:
    if status.estimate_ms is None:
        return ""
    kind = "in-model estimate" if status.in_model else "kernel-time estimate"
    words = f"{kind} {status.estimate_ms:.3f} ms"
    return words + (f" (ONNX Runtime {reference_ms:.3f} ms)" if reference_ms else "")


def _holding_words(status: RoundStatus) -> str:
    """ "time held by k1 41%, k2 12%": the kernels with the largest estimated share of the model's time."""
    if not status.holding:
        return ""
    return "time held by " + ", ".join(f"{_short([name], 1)} {share:.0%}" for name, _, share in status.holding)


def _counts(spent: int, budget: int | None) -> str:
    """ "72/200 trials", or "72 trials" when only time limits the run."""
    return f"{spent}/{budget} trials" if budget and budget < UNLIMITED else f"{spent} trials"


def _short(names: list[str], n: int = 2) -> str:
    more = f" +{len(names) - n} more" if len(names) > n else ""
    return ", ".join(x if len(x) <= 40 else x[:39] + "…" for x in names[:n]) + more


class PlainProgress(Progress):
    """One line per stage and per round, with the seconds since the command started."""

    def __init__(self, console):
        self.console, self.start = console, time.perf_counter()

    def _line(self, text: str) -> None:
        self.console.print(f"[{time.perf_counter() - self.start:7.1f}s] {text}", markup=False, highlight=False)
        self.console.file.flush()  # piped to a file or a CI log: each line when it happens, not at exit

    def stage(self, name: str, detail: str = "") -> None:
        self._line(f"{name}: {detail}" if detail else name)

    def round(self, status: RoundStatus) -> None:
        parts = [_counts(status.spent, status.budget)]
        if status.time_budget_s:
            parts.append(f"{status.elapsed_s:.0f} of {status.time_budget_s:.0f} s")
        estimate = _estimate_words(status, self.reference_ms)
        if estimate:
            parts.append(estimate)
        if status.holding:
            parts.append(_holding_words(status))
        if status.tasks:
            parts.append(f"next: {_short(status.tasks)}")
        self._line("round: " + "; ".join(parts))


class LiveProgress(Progress):
    """A bar updated in place (trials, or time when --time-budget is set), ETA, the kernels being tuned, and the
    kernel-time estimate against ONNX Runtime; each finished stage stays above it as a line."""

    def __init__(self, console):
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
        from rich.table import Column

        def fixed(width: int):  # kept whole; the status text takes what is left, cut with an ellipsis
            return Column(no_wrap=True, min_width=width)

        self.console, self.start = console, time.perf_counter()
        self.bar = Progress(
            TextColumn("[bold]{task.description:>6}", table_column=fixed(6)),
            BarColumn(bar_width=24, table_column=fixed(24)),
            TextColumn("{task.fields[counts]}", table_column=fixed(10)),
            TimeElapsedColumn(table_column=fixed(7)),
            TextColumn("{task.fields[eta]}", table_column=fixed(9)),
            TextColumn("[dim]{task.fields[status]}", table_column=Column(ratio=1, no_wrap=True, overflow="ellipsis")),
            console=console,
            transient=True,
            expand=True,  # so the status column's ratio takes exactly the width left
        )
        self.task = None
        self.spent = self.budget = 0
        self.time_budget = None
        self.tune_start = None
        self.status = ""
        self._ticking = threading.Event()

    def _tick(self) -> None:
        # Between measured batches (30-100 s of search and builds on 2 cores) no event arrives; redraw from the
        # clock so the time bar and its ETA keep moving (TVM's FFI releases the GIL while it searches).
        while self._ticking.is_set():
            self._draw()
            time.sleep(0.5)

    def stage(self, name: str, detail: str = "") -> None:
        self.bar.console.print(f"[cyan]{name}[/] {detail}", highlight=False)
        if name == "tune" and self.task is None:
            self.bar.start()
            self.task = self.bar.add_task(name, total=1, counts="", eta="", status="")
            self._ticking.set()
            threading.Thread(target=self._tick, name="progress-tick", daemon=True).start()
        elif name != "tune" and self.task is not None:
            self.close()

    def trials(self, n: int) -> None:
        self.spent += n
        self._draw()

    def begin(self, status: RoundStatus) -> None:
        self.round(status)  # the bar knows its budget before the first round ends

    def round(self, status: RoundStatus) -> None:
        # the budget counts from the start of tuning, not of the command (import and seeds come before it)
        self.tune_start = time.perf_counter() - status.elapsed_s
        self.spent, self.budget, self.time_budget = status.spent, status.budget, status.time_budget_s
        estimate = _estimate_words(status, self.reference_ms)
        tuning = f"tuning {_short(status.tasks)}" if status.tasks else ""
        self.status = "; ".join(x for x in (estimate, _holding_words(status), tuning) if x)
        self._draw()

    def _draw(self) -> None:
        task = self.task
        if task is None:
            return
        elapsed = time.perf_counter() - (self.tune_start if self.tune_start is not None else self.start)
        if self.time_budget:
            done, total = min(elapsed, self.time_budget), self.time_budget
        else:
            done, total = self.spent, max(self.budget, self.spent, 1)
        eta = (total - done) * (elapsed / done) if done and not self.time_budget else (total - done)
        counts = _counts(self.spent, self.budget)
        self.bar.update(task, completed=done, total=total, counts=counts, eta=f"ETA {eta:.0f} s", status=self.status)

    def close(self) -> None:
        self._ticking.clear()
        if self.task is not None:
            self.task = None
            self.bar.stop()
