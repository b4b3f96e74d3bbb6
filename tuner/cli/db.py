"""`fusion-tuner db show DIR`, `db merge SRC... -o DST` and `db curate SRC... -o schedules/<target-key>`."""

from __future__ import annotations

import argparse

from tuner.cli import common


def build_parser() -> argparse.ArgumentParser:
    p = common.parser("db")
    sub = p.add_subparsers(dest="action", required=True)
    s = sub.add_parser("show", formatter_class=common.HelpFormatter, help="tasks, trials and best latency per task")
    s.add_argument("dir")
    common.add_output_flags(s)
    m = sub.add_parser(
        "merge", formatter_class=common.HelpFormatter, help="merge databases of one target, deduplicated"
    )
    m.add_argument("sources", nargs="+")
    m.add_argument("-o", "--output", required=True)
    common.add_output_flags(m)
    c = sub.add_parser(
        "curate",
        formatter_class=common.HelpFormatter,
        help="the best records per kernel of databases of one target, for schedules/",
    )
    c.add_argument("sources", nargs="+")
    c.add_argument("-o", "--output", required=True, help="a new folder, e.g. schedules/<target-key>")
    c.add_argument("--top-k", type=int, default=2, help="records kept per kernel")
    common.add_output_flags(c)
    return p


def main(argv: list[str]) -> int:
    args = common.parse(build_parser(), argv)
    from tuner.tuning.database import store as D

    if args.action == "show":
        doc = D.show(args.dir)
        if args.json:
            common.print_json(doc)
            return 0
        from rich.table import Table

        con = common.console()
        con.print(
            f"{doc['db']}: target {doc['target']}, TVM {doc['tvm_version']}, host {doc['host']}, "
            f"{doc['workloads']} workloads, {doc['records']} records"
        )
        t = Table()
        for col in ("task", "trials", "best ms", "GFLOP/s"):
            t.add_column(col)
        for task in doc["tasks"]:
            t.add_row(
                task["task"],
                str(task["trials"]),
                f"{task['best_ms']:.4f}" if task["best_ms"] else "—",
                f"{task['gflops']:.1f}" if task["gflops"] else "—",
            )
        con.print(t)
        for r in doc["repairs"]:
            con.print(f"[yellow]repaired:[/] {r}")
        return 0
    if args.action == "curate":
        from tuner.tuning.database.warm_start import curate

        doc = curate(args.sources, args.output, top_k=args.top_k)
        if args.json:
            common.print_json(doc)
        else:
            common.console().print(
                f"curated {doc['records']} records of {doc['workloads']} kernels into {doc['db']} ({doc['target_key']})"
            )
        return 0
    doc = D.merge(args.sources, args.output)
    if args.json:
        common.print_json(doc)
    else:
        common.console().print(
            f"merged into {doc['db']}: {doc['added']} records added, {doc['duplicates']} duplicates "
            f"skipped, {doc['records']} in total"
        )
    return 0
