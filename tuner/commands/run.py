"""The `run` command's work: load a package, feed inputs, time it, optionally verify against ONNX Runtime."""

from __future__ import annotations

import os

import numpy as np

from tuner.core.errors import TunerError
from tuner.core.stats import latency_stats


def load_npz_inputs(path: str, input_names: list[str]) -> dict[str, np.ndarray]:
    """Arrays by input name from a .npz (one array per input) or a .npy (a model with one input)."""
    import stat

    if not os.path.exists(path):
        raise TunerError(f"--inputs {path}: no such file")
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise TunerError(f"--inputs {path}: not a regular file", "give a .npz file with one array per input name")
    try:
        loaded = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:  # numpy calls any non-numpy file "pickled data"
        raise TunerError(
            f"--inputs {path}: not a .npz or .npy file numpy can read",
            "save inputs with numpy.savez(path, input_name=array, ...)",
        ) from err
    if isinstance(loaded, np.ndarray):
        if len(input_names) != 1:
            raise TunerError(
                f"--inputs {path}: a .npy holds one array; this model has {len(input_names)} inputs "
                f"({', '.join(input_names)})",
                "save them in one .npz: numpy.savez(path, input_name=array, ...)",
            )
        return {input_names[0]: loaded}
    try:
        with loaded as z:
            return {k: z[k] for k in z.files}
    except Exception as err:  # a damaged member
        raise TunerError(f"--inputs {path}: damaged .npz ({type(err).__name__}: {err})") from err


def save_npz_atomic(path: str, arrays: dict[str, np.ndarray]) -> None:
    from tuner.core.fsio import atomic_write

    def write(tmp):
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)

    atomic_write(path, write, flag="--outputs", example="outputs.npz")


def run_package(
    package: str,
    inputs: str | None = None,
    fill: str = "random",
    seed: int = 0,
    outputs: str | None = None,
    verify: str | None = None,
    repeat: int = 20,
    warmup: int = 3,
    device: str | None = None,
    profile: bool = False,
    duration_s: float | None = None,
    flush_denormals: bool = False,
) -> dict:
    """Load, run once (outputs, --verify), then time: `repeat` runs, or as many as fit in `duration_s` (as trtexec
    does). With `verify` on a CPU package, the peers (ONNX Runtime as shipped and without spin-waiting, OpenVINO
    f32 when installed) are then timed beside the package in alternating blocks of back-to-back calls, as
    tune-model and scripts/bench.py time them, and compared. `flush_denormals`: the package loaded with subnormal
    floats flushed to zero (the peers run as they are)."""
    from tuner.runtime import load
    from tuner.runtime.package import check_writable

    if outputs is not None:
        check_writable(outputs, "--outputs", "outputs.npz")  # before the model runs, not after
    model = load(package, device, flush_denormals)
    feed = load_npz_inputs(inputs, model.input_names) if inputs else model.random_inputs(seed=seed, fill=fill)
    if inputs:
        extra = [k for k in feed if k not in model.input_names]
        if extra:
            raise TunerError(
                f"--inputs {inputs}: arrays {', '.join(extra)} match no input",
                f"inputs are: {', '.join(model.input_names)}",
            )
    result_outputs = model(**feed)
    verification = verify_against_onnx(model, feed, result_outputs, verify) if verify else None  # the right model?
    times, wall = _timed_loop(model, feed, repeat, warmup, duration_s)
    result = {
        "package": package,
        "target": model.manifest["target"]["key"],
        "fusion": model.manifest["fusion"],
        "precision": model.manifest.get("precision", "float32"),
        "kernels": model.manifest["kernels"],
        "num_threads": os.environ.get("TVM_NUM_THREADS"),
        "flush_denormals": flush_denormals,
        "latency_ms": latency_stats(times, wall),
    }
    if verify and model.manifest["target"]["kind"] == "llvm":
        result.update(time_against_peers(model, feed, verify))
    if outputs:
        save_npz_atomic(outputs, result_outputs)
        result["outputs_file"] = outputs
    if verification:
        result["verify"] = verification
    if profile:
        result["profile"] = profile_package(model, feed, verify)
    return result


def _timed_loop(model, feed, repeat, warmup, duration_s):
    """(package ms per run, wall seconds of the runs)."""
    import time

    model.benchmark(**feed, repeat=max(warmup, 1), warmup=0)
    times = []
    end = time.perf_counter() + duration_s if duration_s else None
    while (time.perf_counter() < end) if end else len(times) < repeat:
        times += model.benchmark(**feed, repeat=1, warmup=0)
    return times, sum(times) / 1e3


def time_against_peers(model, feed: dict, onnx_path: str) -> dict:
    """The package beside ONNX Runtime (as shipped: the headline; without spin-waiting) and OpenVINO f32, each
    called as users call it, in alternating blocks in this process (report.timing.alternating_blocks): run for
    run interleaving timed ONNX Runtime right after TVM's pool was busy, 2.5x slower than in its own blocks."""
    from tuner.report.reference import peer_runners
    from tuner.report.timing import alternating_blocks, timing_method, versus_peers

    failures = {}
    runners = {"package": lambda: model(**feed)}
    threads = model.manifest.get("num_threads")
    runners.update(peer_runners(onnx_path, _reference_feed(model, feed, onnx_path), threads, failures))
    samples = alternating_blocks(runners)
    out = {"peers_ms": {k: latency_stats(v) for k, v in samples.items()}}
    out["onnxruntime_ms"] = out["peers_ms"]["onnxruntime"]
    out.update(versus_peers(samples, "package"))
    out["vs_onnxruntime"] = out.pop("vs_onnxruntime_verdict")  # the headline: ratio and words
    out["timing"] = timing_method(samples, failures)
    return out


def profile_package(model, feed: dict, onnx_path: str | None) -> dict:
    """Where the time goes: the package's kernels (VM runtime built-ins summed as one row), and, given the ONNX
    model, ONNX Runtime's nodes with the same inputs and thread count."""
    order: list[str] = []
    rows = model.profile(**feed, order=order)
    kernels = [r for r in rows if not r["name"].startswith("vm.builtin.")]
    builtins = [r for r in rows if r["name"].startswith("vm.builtin.")]
    if builtins:
        kernels.append(
            {
                "name": "VM runtime (vm.builtin.*)",
                "calls": sum(r["calls"] for r in builtins),
                "ms": sum(r["ms"] for r in builtins),
                "share": sum(r["share"] for r in builtins),
            }
        )
    out = {"kernels": sorted(kernels, key=lambda r: -r["ms"])}
    out.update(_against_peak(out["kernels"], model.manifest))
    if not onnx_path:
        return out
    from tuner.plan.attribution import (
        in_ownership_order,
        kernel_groups,
        nodes_of,
        onnxruntime_by_kernel,
        ops_label,
    )

    groups = kernel_groups(order, plan_of_package(model.manifest, onnx_path))
    for r in out["kernels"]:
        if r["name"] in groups:
            r["onnx_nodes"], r["onnx_ops"] = nodes_of(groups[r["name"]]), ops_label(groups[r["name"]])
    if model.manifest["target"]["kind"] == "llvm":
        from tuner.report.reference import onnxruntime_profile

        nodes = onnxruntime_profile(
            onnx_path, _reference_feed(model, feed, onnx_path), model.manifest.get("num_threads")
        )
        whole = sum(n["ms"] for n in nodes) or 1.0
        out["onnxruntime"] = [{**n, "share": n["ms"] / whole} for n in nodes]
        ordered = in_ownership_order(groups, {r["name"]: r["ms"] for r in out["kernels"]})
        from tuner.frontend.node_names import source_names

        # a node onnxsim made stands for the model's nodes it replaced, as both peers name them
        by_kernel = {k: [s for n in nodes_of(g) for s in source_names(n)] for k, g in ordered}
        per_kernel, unmatched = onnxruntime_by_kernel(by_kernel, nodes, _producers(onnx_path))
        for r in out["kernels"]:
            r["onnxruntime_ms"] = per_kernel.get(r["name"])
        out["onnxruntime_unattributed"] = unmatched
        out.update(_openvino_by_kernel(out["kernels"], by_kernel, model, feed, onnx_path))
    return out


def _against_peak(kernels: list[dict], manifest: dict) -> dict:
    """Each CPU kernel's GFLOP/s (its FLOPs from the manifest x calls over its time) and its share of this CPU's
    float32 peak on the package's threads (report/peak.py): near 1, no schedule can do much better; far below, a
    kernel bound by memory or one with room for tuning. Packages built before the manifest had FLOPs: nothing."""
    counted = manifest.get("kernel_flops")
    if not counted or manifest["target"]["kind"] != "llvm":
        return {}
    from tuner.core.ir import PACKED
    from tuner.core.target import TargetSpec
    from tuner.report.peak import cpu_peak

    t = manifest["target"]
    peak, how = cpu_peak(TargetSpec(t["kind"], t["config"], t["key"]), int(manifest.get("num_threads") or 1))
    for r in kernels:
        n = counted.get(r["name"]) or counted.get(r["name"].removesuffix(PACKED))
        if n and r["ms"] > 0:
            r["gflops"] = n * r["calls"] / (r["ms"] * 1e6)
            r["of_peak"] = r["gflops"] / peak
    return {"peak_gflops": peak, "peak_how": how}


def _openvino_by_kernel(kernels: list[dict], by_kernel: dict, model, feed, onnx_path: str) -> dict:
    """OpenVINO's per-node profile (when installed) beside the kernels: each OpenVINO node goes to the kernel that
    holds the first of the model's nodes it fused, as ONNX Runtime's nodes do."""
    from tuner.plan.attribution import fused_nodes_by_kernel
    from tuner.report.reference import openvino_profile

    try:
        rows = openvino_profile(onnx_path, _reference_feed(model, feed, onnx_path), model.manifest.get("num_threads"))
    except Exception as err:  # a peer that cannot profile this model leaves the package's profile as it is
        return {
            "openvino_error": f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
        }
    if rows is None:
        return {}
    per_kernel, unmatched = fused_nodes_by_kernel(by_kernel, rows)
    for r in kernels:
        r["openvino_ms"] = per_kernel.get(r["name"])
    return {"openvino": rows, "openvino_unattributed": unmatched}


def _producers(onnx_path: str) -> dict[str, list[str]]:
    """{tensor name: [the ONNX node that outputs it, the node before]} (ONNX Runtime names rewritten nodes after
    their output)."""
    import onnx

    graph = onnx.load(onnx_path, load_external_data=False).graph
    direct = {out: node for node in graph.node if node.name for out in node.output}
    # then the node that fed it: a batch-norm folded into its conv leaves the conv with the batch-norm's output
    return {
        out: [node.name] + ([direct[node.input[0]].name] if node.input and node.input[0] in direct else [])
        for out, node in direct.items()
    }


def plan_of_package(manifest: dict, onnx_path: str):
    """The fusion plan of the model with the package's own settings (shapes, consts, fusion, layout, precision),
    for the ONNX nodes behind each kernel."""
    from tuner.core.target import TargetSpec
    from tuner.plan import build_plan

    t = manifest["target"]
    return build_plan(
        onnx_path,
        target=TargetSpec(t["kind"], t["config"], t["key"]),
        fusion=manifest["fusion"],
        shapes={i["name"]: tuple(i["shape"]) for i in manifest["inputs"]},
        consts=manifest.get("consts") or None,
        precision=manifest.get("precision"),
        layout=manifest.get("layout") or "nchw",
    )


def verify_against_onnx(model, feed: dict, actual: dict, onnx_path: str) -> dict:
    from tuner.frontend.onnx_model import sha256_file
    from tuner.report.reference import compare_outputs, run_onnxruntime

    if not os.path.exists(onnx_path):
        raise TunerError(f"--verify {onnx_path}: no such file")
    built_for = model.manifest["model"]
    if sha256_file(onnx_path) != built_for["sha256"]:
        raise TunerError(
            f"--verify {onnx_path}: not the model this package was built from "
            f"({built_for['file']}, sha256 {built_for['sha256'][:12]}…)",
            "verify against the ONNX file given to compile",
        )
    ref_feed = _reference_feed(model, feed, onnx_path)
    expected = run_onnxruntime(onnx_path, ref_feed, threads=model.manifest.get("num_threads"))
    from tuner.core.precision import get_precision

    precision = get_precision(model.manifest.get("precision"))
    return compare_outputs(actual, expected, rtol=precision.rtol, atol=precision.atol)


def _reference_feed(model, feed: dict, onnx_path: str) -> dict:
    """The package's inputs plus the inputs pinned with --const at build time, as ONNX Runtime needs them."""
    ref_feed = dict(feed)
    for name, value in (model.manifest.get("consts") or {}).items():
        ref_feed[name] = np.asarray(value, dtype=_const_dtype(onnx_path, name))
    return ref_feed


def _const_dtype(onnx_path: str, name: str):
    import onnx

    m = onnx.load(onnx_path, load_external_data=False)
    for vi in m.graph.input:
        if vi.name == name:
            return onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
    return np.float32
