"""`fusion-tuner run model.ftpkg`: latency table; `--verify MODEL.onnx` compares with ONNX Runtime."""

from __future__ import annotations

import argparse

from tuner.cli import common
from tuner.cli import help as H


def build_parser() -> argparse.ArgumentParser:
    p = common.parser("run", epilog=H.TOLERANCE)
    p.add_argument("package", help="a .ftpkg built by compile or tune-model")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--inputs", help="a .npz with one array per input name")
    src.add_argument("--fill", choices=["random", "zeros", "ones"], default="random", help=H.FILL)
    p.add_argument("--seed", type=int, default=0, help="seed for --fill random")
    p.add_argument("--outputs", help="write the outputs to this .npz")
    p.add_argument("--verify", metavar="MODEL.onnx", help=H.VERIFY)
    p.add_argument("--repeat", type=int, default=20, help=H.REPEAT)
    p.add_argument("--duration", metavar="TIME", help=H.DURATION)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--device", choices=["cpu", "cuda"], help="device to run on (default: the package's)")
    p.add_argument("--profile", action="store_true", help=H.PROFILE)
    p.add_argument("--flush-denormals", action="store_true", help=H.FLUSH_DENORMALS)
    p.add_argument("--top", type=int, default=15, help="rows of the --profile tables")
    common.add_output_flags(p)
    return p


def main(argv: list[str]) -> int:
    args = common.parse(build_parser(), argv)
    if args.repeat < 1:
        from tuner.core.errors import TunerError

        raise TunerError("--repeat must be at least 1")
    from tuner.commands.run import run_package
    from tuner.core.units import parse_duration

    duration_s = parse_duration(args.duration, "--duration") if args.duration else None

    result = run_package(
        args.package,
        inputs=args.inputs,
        fill=args.fill,
        seed=args.seed,
        outputs=args.outputs,
        verify=args.verify,
        repeat=args.repeat,
        warmup=args.warmup,
        device=args.device,
        profile=args.profile,
        duration_s=duration_s,
        flush_denormals=args.flush_denormals,
    )
    if args.json:
        common.print_json(result)
    else:
        render(result, args.top, args.verbose)
    return 0 if (result.get("verify") or {}).get("ok", True) else 1


PEER_LABELS = {  # rows of the timing table, in order; the package's own row comes from its timed loop
    "package": "package (beside the peers)",
    "onnxruntime": "ONNX Runtime as shipped",
    "onnxruntime_no_spin": "ONNX Runtime without spin-waiting",
    "openvino": "OpenVINO f32",
}


def render(result, top: int = 15, verbose: bool = False) -> None:
    from rich.table import Table

    con = common.console()
    lat = result["latency_ms"]
    t = Table(
        title=f"{result['package']} ({result['target']}, fusion={result['fusion']}, "
        f"{result['precision']}, {result['kernels']} kernels, "
        f"{lat['runs']} runs{', subnormals flushed to zero' if result.get('flush_denormals') else ''})",
        title_justify="left",
    )
    cols = ("median", "p90", "p99", "mean", "min", "max", "std")
    t.add_column("", justify="left")
    for col in cols:
        t.add_column(col + " ms", justify="right")
    t.add_row("package", *(f"{lat[k]:.3f}" for k in cols))
    peers = result.get("peers_ms") or {}
    for key, label in PEER_LABELS.items():
        if key in peers:
            t.add_row(label, *(f"{peers[key][k]:.3f}" for k in cols))
    con.print(t)
    ort = result.get("onnxruntime_ms")
    if lat.get("throughput_per_s"):
        con.print(f"throughput {lat['throughput_per_s']:.1f} inferences/s (one at a time)")
    if ort:
        cmp = result["vs_onnxruntime"]
        color = "yellow" if cmp["within_noise"] else ("green" if cmp["ratio"] < 1 else "red")
        package = peers["package"]["median"]
        con.print(
            f"package {package:.3f} ms · ONNX Runtime as shipped {ort['median']:.3f} ms: [{color}]{cmp['words']}[/]"
        )
        for key, label in list(PEER_LABELS.items())[2:]:
            verdict = result.get(f"vs_{key}_verdict")
            if verdict:
                con.print(f"  against {label}: {verdict['words']}")
        timing = result["timing"]
        con.print(f"[dim]{timing['method']}, the package's threads for every runtime (the rows above)[/]")
        if timing.get("openvino", "").startswith("could not"):
            con.print(f"[dim]OpenVINO {timing['openvino']}[/]")
        if timing.get("warning"):
            con.print(f"[yellow]warning: {timing['warning']}[/]")
    if result.get("outputs_file"):
        con.print(f"outputs written to {result['outputs_file']}")
    v = result.get("verify")
    if v:
        status = "[green]PASS[/]" if v["ok"] else "[red]FAIL[/]"
        con.print(
            f"verify vs ONNX Runtime: {status}  max_abs_err={v['max_abs_err']:.3g}  "
            f"max_rel_err={v['max_rel_err']:.3g}  (rtol {v['rtol']}, atol {v['atol']})"
        )
        for name, o in v["outputs"].items():
            if not o["ok"]:
                detail = o.get("error") or f"max_abs_err={o['max_abs_err']:.3g}"
                con.print(f"  [red]{name}[/]: {detail}")
    prof = result.get("profile")
    if prof:
        _profile_tables(con, prof, top, verbose)


def _profile_tables(con, prof, top: int, verbose: bool = False) -> None:
    """The package's kernels slowest first; with the ONNX model, each labelled by its ONNX ops and first node,
    beside ONNX Runtime's time for the same nodes."""
    from rich.table import Table

    from tuner.plan.attribution import node_label

    labelled = any("onnx_ops" in r for r in prof["kernels"])
    with_ort = "onnxruntime" in prof
    with_ov = "openvino" in prof
    t = Table(title="where the package's time goes (per run)", title_justify="left")
    columns = ["kernel"] if not labelled else ["ONNX ops", "first ONNX node"] + (["TVM kernel"] if verbose else [])
    with_peak = "peak_gflops" in prof
    columns += ["calls", "ms", "share"] + (["GFLOP/s", "of peak"] if with_peak else [])
    columns += ["ORT ms", "× ORT"] if with_ort else []
    columns += ["OV ms", "× OV"] if with_ov else []
    for col in columns:
        t.add_column(col, justify="left" if col in ("kernel", "ONNX ops", "first ONNX node", "TVM kernel") else "right")
    for r in prof["kernels"][:top]:
        if labelled:
            name = [r.get("onnx_ops", r["name"]), node_label(r.get("onnx_nodes", []))]
            name += [r["name"]] if verbose else []
        else:
            name = [r["name"]]
        row = [*name, str(r["calls"]), f"{r['ms']:.3f}", f"{100 * r['share']:.1f}%"]
        if with_peak:
            row += [f"{r['gflops']:.1f}", f"{r['of_peak']:.0%}"] if "gflops" in r else ["—", "—"]
        if with_ort:
            ort = r.get("onnxruntime_ms")
            row += [f"{ort:.3f}" if ort else "—", f"{r['ms'] / ort:.2f}" if ort else "—"]
        if with_ov:
            ov = r.get("openvino_ms")
            row += [f"{ov:.3f}" if ov else "—", f"{r['ms'] / ov:.2f}" if ov else "—"]
        t.add_row(*row)
    con.print(t)
    if with_peak:
        con.print(
            f"of peak: GFLOP/s over this CPU's float32 peak, {prof['peak_gflops']:.0f} GFLOP/s ({prof['peak_how']})"
        )
    if len(prof["kernels"]) > top:
        con.print(f"(+{len(prof['kernels']) - top} more kernels; --top N shows more)")
    unattributed = prof.get("onnxruntime_unattributed") or []
    if unattributed:
        shown = ", ".join(f"{r['name']} ({r['op']}) {r['ms']:.3f}" for r in unattributed[:4])
        more = f" +{len(unattributed) - 4} more" if len(unattributed) > 4 else ""
        total = sum(r["ms"] for r in unattributed)
        con.print(f"ONNX Runtime nodes of its own (no ONNX node of the model): {total:.3f} ms: {shown}{more}")
    ov_rest = prof.get("openvino_unattributed") or []
    if with_ov:
        total = sum(r["ms"] for r in prof["openvino"])
        rest = sum(r["ms"] for r in ov_rest)
        con.print(
            f"OpenVINO f32 (CPU plugin, PERF_COUNT, same inputs and threads): {total:.3f} ms in its nodes, "
            f"{rest:.3f} ms of it in nodes matching no kernel"
            + (": " + ", ".join(f"{r['name']} ({r['op']}) {r['ms']:.3f}" for r in ov_rest[:3]) if ov_rest else "")
        )
    elif prof.get("openvino_error"):
        con.print(f"OpenVINO could not profile the model: {prof['openvino_error']}")
    if with_ort and not labelled:
        t = Table(title="ONNX Runtime, same inputs and threads (its profiler, per run)", title_justify="left")
        for col in ("node", "op", "ms", "share"):
            t.add_column(col, justify="left" if col in ("node", "op") else "right")
        for r in prof["onnxruntime"][:top]:
            t.add_row(r["name"], r["op"], f"{r['ms']:.3f}", f"{100 * r['share']:.1f}%")
        con.print(t)
