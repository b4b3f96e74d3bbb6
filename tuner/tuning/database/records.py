"""The two JSON files MetaSchedule keeps, read and checked line by line.

`database_workload.json` has a line per workload; `database_tuning_record.json` a line per measured candidate,
naming its workload by line number. So a damaged workload line in the middle cannot be dropped (every later
record would point at the wrong kernel): that is refused with the line number. What can be dropped without
losing anything valid: a truncated last line (a write interrupted by a kill) and record lines that are not
records (unparsable, the wrong shape, or naming a workload that does not exist).

`scan` only reads; `repair` rewrites the files and must run under the database lock (tuning holds it).
Readers that find something to drop load a repaired copy instead of touching the files.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from tuner.core.errors import TunerError

WORKLOADS = "database_workload.json"
RECORDS = "database_tuning_record.json"


@dataclass
class Scan:
    workloads: list[str] = field(default_factory=list)  # good lines
    records: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what a repair drops, in words
    dirty: bool = False  # the files hold something a repair would drop


def _lines(path: str) -> tuple[list[str], bool]:
    """(non-empty lines, whether the file ends without a newline: an interrupted append)."""
    if not os.path.exists(path):
        return [], False
    with open(path, "rb") as f:
        data = f.read()
    text = data.decode("utf-8", errors="replace")
    return [ln for ln in text.split("\n") if ln.strip()], bool(text) and not text.endswith("\n")


def _is_record(obj, n_workloads: int) -> str | None:
    """Why a parsed record line is not a record (None: it is one)."""
    if not (isinstance(obj, list) and len(obj) == 2 and isinstance(obj[0], int) and isinstance(obj[1], list)):
        return "not shaped like a record"
    if not 0 <= obj[0] < n_workloads:
        return "names a workload that does not exist"
    if len(obj[1]) < 2 or not isinstance(obj[1][0], list):
        return "not shaped like a record"
    return None


def scan(db_dir: str) -> Scan:
    s = Scan()
    path = os.path.join(db_dir, WORKLOADS)
    lines, unterminated = _lines(path)
    for k, line in enumerate(lines):
        try:
            ok = isinstance(json.loads(line), list)
        except json.JSONDecodeError:
            ok = False
        if ok:
            s.workloads.append(line)
        elif k == len(lines) - 1 and unterminated:
            s.notes.append(f"{WORKLOADS}: dropped a truncated last line (an interrupted write)")
            s.dirty = True
        else:
            raise TunerError(
                f"{path}: line {k + 1} is damaged; records refer to workloads by line number, so it cannot be "
                "dropped without pointing later records at the wrong kernels",
                "restore the folder from a copy, or tune into a new --db (nothing was changed here)",
            )
    dropped: dict[str, int] = {}
    lines, unterminated = _lines(os.path.join(db_dir, RECORDS))
    for k, line in enumerate(lines):
        try:
            why = _is_record(json.loads(line), len(s.workloads))
        except json.JSONDecodeError:
            why = "truncated (an interrupted write)" if k == len(lines) - 1 and unterminated else "unparsable"
        if why is None:
            s.records.append(line)
        else:
            dropped[why] = dropped.get(why, 0) + 1
    for why, n in dropped.items():
        s.notes.append(f"{RECORDS}: dropped {n} line(s): {why}")
    s.dirty = s.dirty or bool(dropped) or unterminated
    return s


def _atomic_write_text(path: str, text: str) -> None:
    from tuner.core.fsio import atomic_write

    def write(tmp):
        with open(tmp, "w") as f:
            f.write(text)

    atomic_write(path, write)


def write_clean(dst_dir: str, s: Scan) -> None:
    _atomic_write_text(os.path.join(dst_dir, WORKLOADS), "".join(ln + "\n" for ln in s.workloads))
    _atomic_write_text(os.path.join(dst_dir, RECORDS), "".join(ln + "\n" for ln in s.records))


def repair(db_dir: str) -> list[str]:
    """Drop what `scan` says can go, in place (hold the database lock). Returns notes."""
    s = scan(db_dir)
    if s.dirty:
        write_clean(db_dir, s)
    for name in (WORKLOADS, RECORDS):
        path = os.path.join(db_dir, name)
        if not os.path.exists(path):
            open(path, "a").close()
    return s.notes


def record_counts(db_dir: str) -> dict[int, dict]:
    """workload index -> {trials, best_s} from the record file (invalid runs count as trials)."""
    out: dict[int, dict] = {}
    s = scan(db_dir)
    for line in s.records:
        idx, rec = json.loads(line)
        entry = out.setdefault(idx, {"trials": 0, "best_s": None})
        entry["trials"] += 1
        run_secs = rec[1] if len(rec) > 1 else None
        if run_secs:
            mean = sum(float(x) for x in run_secs) / len(run_secs)
            if mean < 1e9 and (entry["best_s"] is None or mean < entry["best_s"]):
                entry["best_s"] = mean
    return out


def workload_hashes(db_dir: str) -> list[str]:
    return [json.loads(line)[0] for line in scan(db_dir).workloads]
