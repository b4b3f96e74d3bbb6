"""`fusion-tuner tune-model MODEL.onnx -o model.ftpkg`: tune every fused kernel, then build the tuned package."""

from __future__ import annotations

import argparse

from tuner.cli import common
from tuner.cli import help as H


def build_parser() -> argparse.ArgumentParser:
    p = common.parser("tune-model")
    common.add_model_args(p)
    common.add_tune_shape_arg(p)
    common.add_target_arg(p)
    common.add_dtype_arg(p)
    common.add_fusion_arg(p)
    common.add_layout_arg(p)
    p.add_argument(
        "--trials",
        type=int,
        default=None,
        help="total measured candidates for the whole model (all tasks together); the gradient task "
        "scheduler spends them where they cut end-to-end latency most (default: 64, or until --time-budget "
        "is spent when that is given alone)",
    )
    p.add_argument("--max-trials-per-task", type=int, help="cap per task")
    p.add_argument(
        "--time-budget",
        help="tune for this long (90s, 20m, 2h): the search stops before a batch that would end past it; "
        "a first batch longer than the whole budget still finishes",
    )
    p.add_argument("--early-stopping", type=int, help="stop after this many rounds without improvement")
    p.add_argument("--db", help=H.TUNE_DB)
    p.add_argument(
        "--resume",
        action="store_true",
        help="count trials already in the database against --trials and start the cost model from the saved one",
    )
    p.add_argument("--schedules", default="auto", metavar="auto|none|DIR", help=H.SCHEDULES)
    p.add_argument("--only", action="append", default=[], help="tune only tasks whose name matches (glob or substring)")
    p.add_argument("--skip", action="append", default=[], help="do not tune tasks whose name matches")
    p.add_argument("--cost-model", choices=["xgb", "random"], default="xgb")
    p.add_argument("--search", choices=["evolutionary", "replay-trace"], default="evolutionary")
    p.add_argument("--measure-cache", choices=["warm", "flush"], default="warm", help=H.MEASURE_CACHE)
    p.add_argument("--rank", choices=["headroom", "model", "alone"], default="headroom", help=H.RANK)
    p.add_argument("--space", choices=["template", "tvm"], default="template", help=H.SPACE)
    p.add_argument(
        "--trials-per-iter",
        type=int,
        help="candidates measured per search iteration (default: 32 with a time budget alone, else the trial "
        "budget over the kernels, 8 to 32)",
    )
    p.add_argument("--seed", type=int)
    p.add_argument("--rpc", metavar="HOST:PORT:KEY", help=H.RPC)
    p.add_argument("--no-verify", action="store_true", help="skip the ONNX Runtime check of the tuned package")
    p.add_argument("-o", "--output", required=True, help=H.OUTPUT_PKG)
    common.add_output_flags(p)
    return p


def main(argv: list[str]) -> int:
    args = common.parse(build_parser(), argv)
    shapes, consts = common.parse_model_args(args)
    import inspect

    from tuner.commands.tune_model import knobs_from_options

    options = [p for p in inspect.signature(knobs_from_options).parameters if p != "budget_flag"]
    knobs = knobs_from_options(**{name: getattr(args, name) for name in options})
    from tuner.cli.progress import make_progress

    progress = None if args.quiet or args.json else make_progress(common.console())
    try:
        summary = _tune(args, knobs, shapes, consts, progress)
    finally:
        if progress:
            progress.close()
    if args.json:
        common.print_json(summary)
    else:
        render(summary)
    if summary["stopped"] == "interrupted":
        return 130
    checks = [summary.get("verify") or {}] + list(summary.get("verify_shapes") or [])
    return 0 if all(c.get("ok", True) for c in checks) else 1


def _tune(args, knobs, shapes, consts, progress) -> dict:
    from tuner.commands.tune_model import tune_model

    return tune_model(
        args.model,
        args.output,
        target=args.target,
        fusion=args.fusion,
        layout=args.layout,
        knobs=knobs,
        db=args.db,
        resume=args.resume,
        schedules=args.schedules,
        shapes=shapes,
        consts=consts,
        precision=args.dtype,
        verify=not args.no_verify,
        progress=progress,
        verbose=args.verbose,
        tune_shapes=common.parse_tune_shapes(args),
    )


def _task_table(tasks: list[dict], title):
    from rich.table import Table

    profiled = any(s.get("model_ms") is not None for s in tasks)
    caption = (
        "sorted by estimated time in the model (best ms x calls x in-model factor); 'default in model': the default"
        " build profiled before tuning; 'x alone': how much slower the model ran it than it ran alone"
        if profiled
        else "sorted by time per inference (best ms x calls)"
    )
    peaked = any(s.get("peak_share") is not None for s in tasks)
    if peaked:
        caption += "; 'of peak': the default build's in-model speed over this CPU's peak (near 100%: little to gain)"
    t = Table(title=title, title_justify="left", caption=caption)
    extra = ("default in model", "x alone") if profiled else ()
    extra += ("of peak",) if peaked else ()
    for col in ("task", "MFLOP", "calls", "trials", "best ms", "ms x calls", *extra, "GFLOP/s", "note"):
        t.add_column(col, justify="left" if col in ("task", "note") else "right")
    notes = [s["skipped"] or s.get("note") or "" for s in tasks]
    shared = {n for n in notes if n and notes.count(n) > 2}  # a note every row repeats is said once, below

    def heaviness(s):
        return s.get("estimate_ms") or s.get("model_ms") or (s["best_ms"] or 0) * s["weight"]

    for s, note in sorted(zip(tasks, notes), key=lambda sn: -heaviness(sn[0])):
        in_model = (_fmt(s.get("model_ms"), "{:.4f}"), _fmt(s.get("in_model_factor"), "{:.2f}")) if profiled else ()
        in_model += (_fmt(s.get("peak_share"), "{:.0%}"),) if peaked else ()
        t.add_row(
            s["task"],
            f"{s['flops'] / 1e6:.2f}",
            str(s["weight"]),
            str(s["trials"]),
            _fmt(s["best_ms"], "{:.4f}"),
            _fmt(s["best_ms"] * s["weight"] if s["best_ms"] else None, "{:.4f}"),
            *in_model,
            _fmt(s["gflops"], "{:.1f}"),
            "(see below)" if note in shared else note,
        )
    if shared:
        t.caption += "".join(f"\n(see below): {n}" for n in sorted(shared))
    return t


def _records_words(con, summary: dict) -> None:
    """What the checks after tuning kept out of the package: records slower in the model, or all of them."""
    left_out = summary.get("records_left_out") or {}
    if left_out:
        worst = ", ".join(f"{k} {v['tuned_us']:.0f} vs {v['default_us']:.0f} µs" for k, v in list(left_out.items())[:3])
        con.print(
            f"records left out of the package (slower in the model than the default schedule; kept in the "
            f"database): {len(left_out)}: {worst}" + (" ..." if len(left_out) > 3 else "")
        )
    withdrawn = summary.get("withdrawn")
    if withdrawn:
        con.print(
            f"[yellow]tuned records withdrawn:[/] with its {withdrawn['applied']} tuned kernel(s) the package ran "
            f"{withdrawn['words']} than the default build ({withdrawn['tuned']:.3f} against {withdrawn['untuned']:.3f}"
            " ms); it holds the default schedules (the records stay in the database)"
        )


def _fmt(v, f):
    return f.format(v) if v is not None else "—"


def render(summary) -> None:
    con = common.console()
    con.print(_task_table(summary["tasks"], f"{summary['model']} on {summary['target']} (fusion={summary['fusion']})"))
    con.print(
        f"trials this run: {summary['trials']} (database holds {summary['trials_in_db']}), "
        f"{summary['tune_seconds']} s, stopped: {summary['stopped']}; database: {summary['db']}"
    )
    if summary.get("schedules_note"):
        con.print(f"[cyan]schedules:[/] {summary['schedules_note']}")
    warm = summary.get("warm_start") or {}
    if warm.get("workloads"):
        con.print(
            f"warm start: best records of {warm['workloads']} kernel(s) from {warm['source']}"
            + (" and its cost model" if warm.get("cost_model") else "")
        )
    if summary["shared_workloads"]:
        con.print(f"reused records of {summary['shared_workloads']} kernel(s) tuned for other models")
    for r in summary.get("repairs") or []:
        con.print(f"[yellow]database repaired:[/] {r}")
    if not summary.get("package"):
        con.print("[yellow]interrupted: database is consistent; rerun with --resume to continue[/]")
        return
    same = len(summary.get("default_records") or [])
    con.print(
        f"tuned kernels applied: {summary['applied']} of {summary['kernels']}"
        + (f" ({same} more searched: no candidate beat the default schedule)" if same else "")
        + (
            f"; default schedules: {', '.join(summary['default_schedules'][:10])}"
            + (f" (+{len(summary['default_schedules']) - 10} more)" if len(summary["default_schedules"]) > 10 else "")
            if summary["default_schedules"]
            else ""
        )
        + (f"; written by hand: {', '.join(summary['hand_written'])}" if summary.get("hand_written") else "")
    )
    _records_words(con, summary)
    lat = summary.get("latency_ms")
    if lat:
        con.print(
            f"latency: untuned {lat['untuned']:.3f} ms → tuned {lat['tuned']:.3f} ms "
            f"(tuned is {summary['vs_untuned']['words']})"
        )
    peers = (
        ("onnxruntime", "ONNX Runtime as shipped"),
        ("onnxruntime_no_spin", "ONNX Runtime without spin-waiting"),
        ("openvino", "OpenVINO f32"),
    )
    for key, label in peers:
        if lat and lat.get(key):
            cmp = summary[f"vs_{key}_verdict"]
            color = "yellow" if cmp["within_noise"] else ("green" if cmp["ratio"] < 1 else "red")
            con.print(f"tuned {lat['tuned']:.3f} ms · {label} {lat[key]:.3f} ms: tuned is [{color}]{cmp['words']}[/]")
    timing = summary.get("timing") or {}
    if lat and timing:
        con.print(f"  (same process and threads; {timing['method']}; OpenVINO: {timing['openvino']})")
        if timing.get("warning"):
            con.print(f"[yellow]warning:[/] {timing['warning']}")
    if summary.get("note"):
        con.print(f"[cyan]note:[/] {summary['note']}")
    v = summary.get("verify")
    if v:
        verdict = "[green]PASS[/]" if v["ok"] else "[red]FAIL[/]"
        con.print(f"verify vs ONNX Runtime: {verdict} max_abs_err={v['max_abs_err']:.3g}")
    for check in summary.get("verify_shapes") or []:
        verdict = "[green]PASS[/]" if check["ok"] else "[red]FAIL[/]"
        shapes = " ".join(f"{n}:{'x'.join(map(str, d))}" for n, d in check["shapes"].items())
        where = "a tune shape" if check["tune_shape"] else "the build over the range"
        con.print(f"verify at {shapes} ({where}): {verdict} max_abs_err={check['max_abs_err']:.3g}")
    con.print(f"[green]wrote[/] {summary['package']}")
