"""ONNX Runtime as the reference, and the comparison rule.

An output passes when every element satisfies |tvm - ort| <= ATOL * max(1, max|ort|) + RTOL * |ort|.
The absolute term scales with the output's magnitude (deep fp32 networks accumulate error in proportion to
their activations). Reported: max_abs_err, and max_rel_err = max_abs_err / max(max|ort|, tiny).
Integer and boolean outputs must match exactly; equal infinities and NaN in both count as equal.
"""

from __future__ import annotations

import os

import numpy as np

from tuner.core.errors import TunerError

RTOL = 1e-3
ATOL = 1e-4


def onnxruntime_session(
    model,
    threads: int | None = None,
    spinning: bool = True,
    profile_prefix: str | None = None,
    denormal_as_zero: bool = False,
):
    """The one way the product opens ONNX Runtime (reference outputs, timing, profiles, benchmarks): a model path
    or ModelProto; the CPU provider with all graph optimisations, `threads` intra-op threads (the package's),
    spin-waiting as shipped unless `spinning=False`, and its logger quiet (warnings only with our -v, which shows
    native output)."""
    import onnxruntime as ort

    opts = timing_options(threads, spinning)
    if denormal_as_zero:  # not as shipped: scripts/bench_subnormal.py's comparison
        opts.add_session_config_entry("session.set_denormal_as_zero", "1")
    if profile_prefix:
        opts.enable_profiling = True
        opts.profile_file_prefix = profile_prefix
    src = model if isinstance(model, (str, bytes)) else model.SerializeToString()
    return ort.InferenceSession(src, opts, providers=["CPUExecutionProvider"])


def openvino_compiled(
    model, threads: int | None = None, precision: str | None = "f32", shapes: dict | None = None, profile: bool = False
):
    """The model compiled by OpenVINO's CPU plugin for latency, or None when OpenVINO is not installed (an
    optional peer: `pip install openvino`; never a dependency). `precision` "f32" is the bar at our precision;
    None keeps OpenVINO's default (bf16 on CPUs with AMX or AVX-512 BF16), as a user who sets nothing gets it."""
    try:
        import openvino as ov
    except ImportError:
        return None
    core = ov.Core()
    config = {"PERFORMANCE_HINT": "LATENCY"}
    if threads:
        config["INFERENCE_NUM_THREADS"] = int(threads)
    if precision:
        config["INFERENCE_PRECISION_HINT"] = precision
    if profile:
        config["PERF_COUNT"] = "YES"
    if isinstance(model, str):
        network = core.read_model(model)
    else:  # bytes or a ModelProto: weights are inside the ONNX bytes
        network = core.read_model(model if isinstance(model, bytes) else model.SerializeToString(), b"")
    if shapes:  # {input name: shape}: compiled for these sizes
        network.reshape({p.get_any_name(): list(shapes[p.get_any_name()]) for p in network.inputs})
    return core.compile_model(network, "CPU", config)


def openvino_runner(model, feed: dict, threads: int | None = None, precision: str | None = "f32"):
    """A callable that runs the model once on `feed` in OpenVINO (openvino_compiled), or None without OpenVINO."""
    compiled = openvino_compiled(model, threads, precision)
    if compiled is None:
        return None
    request = compiled.create_infer_request()
    names = [p.get_any_name() for p in compiled.inputs]
    inputs = {n: feed[n] for n in names}
    return lambda: request.infer(inputs)


def run_onnxruntime(
    model_path_or_proto, inputs: dict[str, np.ndarray], threads: int | None = None
) -> dict[str, np.ndarray]:
    # TVM may have pinned this thread to one core; ORT's threads would inherit that.
    try:
        os.sched_setaffinity(0, range(os.cpu_count() or 1))
    except (AttributeError, OSError):
        pass
    try:
        sess = onnxruntime_session(model_path_or_proto, threads)
    except Exception as err:
        raise TunerError(f"ONNX Runtime cannot load the reference model: {str(err).strip().splitlines()[0]}") from err
    names = [i.name for i in sess.get_inputs()]
    feed = {n: inputs[n] for n in names if n in inputs}
    missing = [n for n in names if n not in inputs]
    if missing:
        raise TunerError(f"reference run: no value for ONNX input(s) {', '.join(missing)}")
    try:
        outs = sess.run(None, feed)
    except Exception as err:  # ONNX Runtime's own refusal (a shape it holds fixed, an index out of range)
        raise TunerError(
            f"ONNX Runtime refused the reference run: {str(err).strip().splitlines()[0][:300]}",
            "check the inputs against the model (fusion-tuner check), or skip the reference with --no-verify",
        ) from err
    return {o.name: v for o, v in zip(sess.get_outputs(), outs)}


def compare_outputs(
    actual: dict[str, np.ndarray], expected: dict[str, np.ndarray], rtol: float = RTOL, atol: float = ATOL
) -> dict:
    per_output = {}
    ok = True
    worst_abs = worst_rel = 0.0
    for name, ref in expected.items():
        if name not in actual:
            per_output[name] = {"ok": False, "error": "missing from the TVM outputs"}
            ok = False
            continue
        got = np.asarray(actual[name])
        ref = np.asarray(ref)
        if got.shape != ref.shape:
            per_output[name] = {"ok": False, "error": f"shape {list(got.shape)} vs reference {list(ref.shape)}"}
            ok = False
            continue
        if ref.size == 0:
            per_output[name] = {"ok": True, "max_abs_err": 0.0, "max_rel_err": 0.0}
            continue
        if ref.dtype.kind in "iub":
            diff = np.abs(got.astype(np.int64) - ref.astype(np.int64))
            out_ok = bool((diff == 0).all())
            scale = float(np.abs(ref).max()) if ref.dtype.kind != "b" else 1.0
        else:
            g, r = got.astype(np.float64), ref.astype(np.float64)
            same = (np.isnan(g) & np.isnan(r)) | (g == r)  # equal infinities are equal, not inf - inf = nan
            with np.errstate(invalid="ignore"):
                diff = np.where(same, 0.0, np.abs(g - r))
            finite = np.abs(r[np.isfinite(r)])
            scale = float(finite.max()) if finite.size else 1.0
            with np.errstate(invalid="ignore"):
                close = same | (diff <= atol * max(1.0, scale) + rtol * np.abs(np.nan_to_num(r)))
            out_ok = bool(close.all())
        max_abs = float(np.nanmax(diff)) if diff.size else 0.0
        max_rel = max_abs / max(scale, 1e-12)
        per_output[name] = {"ok": out_ok, "max_abs_err": max_abs, "max_rel_err": max_rel}
        ok &= out_ok
        worst_abs, worst_rel = max(worst_abs, max_abs), max(worst_rel, max_rel)
    return {
        "ok": bool(ok),
        "max_abs_err": worst_abs,
        "max_rel_err": worst_rel,
        "rtol": rtol,
        "atol": atol,
        "outputs": per_output,
    }


def timing_options(threads: int | None, spinning: bool = False):
    """ONNX Runtime as a timing reference: all graph optimisations, the package's threads, no spin-waiting
    (scripts/bench.py's settings; `spinning` keeps ORT's default, as scripts/retime.py times it too)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    opts.log_severity_level = 3
    return opts


def peer_runners(onnx_path: str, feed: dict, threads: int | None, failures: dict | None = None) -> dict:
    """{name: zero-argument callable} for the runtimes a user would pick instead, on `feed` with `threads`:
    ONNX Runtime as shipped (spin-waiting; the headline), without spin-waiting, and OpenVINO f32 when installed
    and able to read the model (else `failures`, when given, says why)."""
    runners = {}
    for name, spinning in (("onnxruntime", True), ("onnxruntime_no_spin", False)):
        sess = onnxruntime_session(onnx_path, threads, spinning)
        ort_feed = {i.name: feed[i.name] for i in sess.get_inputs()}
        runners[name] = lambda s=sess, f=ort_feed: s.run(None, f)
    try:
        ov = openvino_runner(onnx_path, feed, threads)
    except Exception as err:  # OpenVINO cannot read every model we build (silero-vad's If branches): a missing
        ov = None  # peer, said in the timing notes, never a failed command
        first = str(err).strip().splitlines()
        if failures is not None:
            failures["openvino"] = f"could not load the model ({type(err).__name__}: {first[-1] if first else ''})"
    if ov is not None:
        runners["openvino"] = ov
    return runners


def openvino_profile(model_path: str, inputs: dict[str, np.ndarray], threads: int | None, repeat: int = 5):
    """OpenVINO's per-node times (CPU plugin, f32, `PERF_COUNT`), the last of `repeat` runs after a warm-up, or
    None when OpenVINO is not installed: [{name, op, ms, sources}], slowest first. `sources` are the model's node
    names OpenVINO fused into that node (its runtime model's `originalLayersNames`; names of nodes its own
    transformations made, such as a folded BatchNormalization's `Multiply_13928`, are among them)."""
    shapes = {name: a.shape for name, a in inputs.items()}
    compiled = openvino_compiled(model_path, threads, "f32", shapes=shapes, profile=True)
    if compiled is None:
        return None
    request = compiled.create_infer_request()
    feed = {p.get_any_name(): inputs[p.get_any_name()] for p in compiled.inputs}
    for _ in range(repeat + 1):
        request.infer(feed)
    sources = {}
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        if "originalLayersNames" in info:
            sources[op.get_friendly_name()] = [n for n in info["originalLayersNames"].astype(str).split(",") if n]
    rows = [
        {
            "name": p.node_name,
            "op": p.node_type,
            "ms": p.real_time.total_seconds() * 1e3,
            "sources": sources.get(p.node_name, [p.node_name]),
        }  # fmt: skip
        for p in request.get_profiling_info()
        if p.real_time.total_seconds() > 0
    ]
    return sorted(rows, key=lambda r: -r["ms"])


def onnxruntime_profile(model_path: str, inputs: dict[str, np.ndarray], threads: int | None, repeat: int = 5):
    """ONNX Runtime's own per-node times (its profiler), summed over `repeat` runs after a warm-up:
    [{name, op, ms (per run)}], slowest first. Spinning, as ONNX Runtime runs by default: without it each node's
    time includes waking its worker threads: a 3 ms MobileNetV2 profiled most of its conv nodes 1.1-1.9x slower
    than spinning (one 0.66x), and our kernels read 0.33-0.91x ORT's instead of 0.29-1.54x. Taken after the
    package's own profile: spinning threads would slow a TVM pool sharing the cores."""
    import json
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ft-ortprof-") as tmp:
        sess = onnxruntime_session(model_path, threads, spinning=True, profile_prefix=os.path.join(tmp, "ort"))
        feed = {i.name: inputs[i.name] for i in sess.get_inputs() if i.name in inputs}
        sess.run(None, feed)
        for _ in range(repeat):
            sess.run(None, feed)
        with open(sess.end_profiling()) as f:
            events = json.load(f)
    nodes: dict[str, list] = {}
    runs = 0
    for e in events:
        if e.get("cat") == "Session" and e.get("name") == "model_run":
            runs += 1
        if e.get("cat") != "Node" or not str(e.get("name", "")).endswith("_kernel_time"):
            continue
        name = e["name"][: -len("_kernel_time")]
        entry = nodes.setdefault(name, [e.get("args", {}).get("op_name", "?"), 0.0])
        entry[1] += float(e.get("dur", 0)) / 1e3
    runs = max(runs, 1)
    return sorted(({"name": n, "op": op, "ms": ms / runs} for n, (op, ms) in nodes.items()), key=lambda r: -r["ms"])
