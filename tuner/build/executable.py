"""compile: ONNX file -> prepared graph -> Relax -> fused kernels -> (tuning records) -> VM executable -> package."""

from __future__ import annotations

import datetime
import os
import tempfile
import time
from dataclasses import dataclass, field

from tuner.core.errors import TunerError
from tuner.core.ir import kernel_scripts, kernel_sites, memory_footprint
from tuner.core.target import TargetSpec, host_cpu_name, vector_lanes
from tuner.frontend.onnx_model import PreparedModel
from tuner.fusion import FusionStrategy
from tuner.pipeline import lower


@dataclass
class BuildResult:
    prepared: PreparedModel
    target: TargetSpec
    strategy: FusionStrategy
    fused_mod: object  # IRModule after fusion and scheduling
    executable: object
    kernels: list  # KernelSite per launch
    provenance: object
    db_info: dict | None = None
    timings: dict = field(default_factory=dict)
    default_scheduled: list = field(default_factory=list)  # CPU kernels without a record: cheap default schedule
    layout: str = "nchw"  # of the convolutions (tuner/layout.py)

    @property
    def num_kernels(self) -> int:
        return len(self.kernels)


def thread_unbound_kernels(mod) -> list[str]:
    """PrimFuncs that would run as host code on a GPU target: no loop bound to a GPU thread.

    TVM 0.27 exposes no TIR visitor to Python, so read the printed TIR: a bound loop prints as
    `T.thread_binding(..., thread="threadIdx.x")` or a `T.launch_thread("blockIdx.x", ...)`.
    """
    return [
        name
        for name, script in kernel_scripts(mod).items()
        if not any(tag in script for tag in ('"threadIdx.', '"blockIdx.'))
    ]


GPU_RULES_ATTR = "fusion_tuner.gpu_rules"  # module attribute: {kernel: rule} and {kernel: why it fell back}


def schedule_for_gpu(mod, target_spec: TargetSpec):
    """dlight's default rules for every kernel without a tuned schedule, kernel by kernel (gpu_rules.py: a rule
    that fails on one kernel hands it to the next, then to a generic thread binding), then insist each is
    thread-bound. Which rule took each kernel, and why any fell back, ride on the module (GPU_RULES_ATTR)."""
    from tuner.build.gpu_rules import schedule_kernels

    mod, used, fell_back = schedule_kernels(mod, target_spec.tvm_target())
    mod = mod.with_attr(GPU_RULES_ATTR, {"rules": used, "fell_back": fell_back})
    unbound = thread_unbound_kernels(mod)
    if unbound:
        raise TunerError(
            f"CUDA build: {len(unbound)} kernel(s) have no GPU thread binding and would silently run "
            f"as host code: {', '.join(unbound[:8])}",
            "this is a bug in scheduling; please report it",
        )
    return mod


@dataclass
class Lowered:
    """A model imported and fused once; every build and tuning run of one command starts from this."""

    prepared: PreparedModel
    target: TargetSpec
    strategy: FusionStrategy
    mod: object  # fused IRModule, unscheduled
    provenance: object
    timings: dict = field(default_factory=dict)
    layout: str = "nchw"
    dim_values: dict = field(default_factory=dict)  # ranged builds: the sizes symbolic kernels are scheduled at


def lower_prepared(
    prepared: PreparedModel,
    target_spec: TargetSpec,
    strategy: FusionStrategy,
    algebra: bool = True,
    fast_math: bool = True,
    layout: str = "auto",
    sink_transposes: bool = True,
    pad_channels: bool = True,
    winograd: bool = True,
    pad_blocks: bool = True,
    flatten_pointwise: bool = True,
    pad_attention: bool = True,
) -> Lowered:
    from tuner.pipeline import import_for, rewrite_notes
    from tuner.schedule.padded_blocks import PadRegisterBlocks, padded_kernels, padding_note
    from tuner.schedule.tiles import registers_for
    from tuner.transform.layout import layout_after_fallback, layout_fallback, resolve_layout

    layout = resolve_layout(layout, target_spec)
    t0 = time.perf_counter()
    mod, params, provenance = import_for(prepared, strategy, target_spec)
    t1 = time.perf_counter()
    levers = {"algebra": algebra, "fast_math": fast_math, "sink_transposes": sink_transposes}
    levers.update(pad_channels=pad_channels, winograd=winograd, flatten_pointwise=flatten_pointwise)
    levers.update(pad_attention=pad_attention)
    fused = lower(mod, target_spec, strategy, params=params, layout=layout, **levers)
    if pad_blocks and not target_spec.is_gpu:  # matmul rows and columns in whole register blocks (197: 198, 200)
        lanes = vector_lanes(target_spec)
        fused = PadRegisterBlocks(lanes, registers_for(lanes))(fused)
    timings = {"import_s": t1 - t0, "fuse_s": time.perf_counter() - t1}
    prepared.notes.extend(rewrite_notes(fused))  # said in the compile output and the manifest, as the padding is
    if padded := padded_kernels(fused):
        prepared.notes.append(padding_note(padded))
    fallback = layout_fallback(fused)
    if fallback:  # TVM could not convert this graph: the package says why, and what its convs are
        prepared.notes.append(f"layout: {fallback}")
        layout = layout_after_fallback(fused, layout)
    return Lowered(prepared, target_spec, strategy, fused, provenance, timings, layout)


def schedule(
    lowered: Lowered, db_dir: str | None = None, skip=frozenset(), drop_records=frozenset()
) -> tuple[object, dict | None, list[str]]:
    """(scheduled module, database info, kernels on default schedules): tuned records first (except for the kernels
    in `drop_records`); then dlight on CUDA, or on llvm the cheap CPU default schedule, weight packing, and serial
    loops in small kernels. The lowered module is not modified."""
    fused, db_info, defaulted = lowered.mod, None, []
    if db_dir:
        from tuner.tuning.database.store import apply_database

        fused, db_info = apply_database(fused, lowered.target, db_dir)
        if drop_records:
            fused = fused.clone()
            dropped = [gv for gv in fused.functions if gv.name_hint in drop_records]
            for gv in dropped:
                fused[gv] = lowered.mod[gv.name_hint]  # unscheduled again: the default schedule takes it
            names = {gv.name_hint for gv in dropped}
            db_info["applied"] -= len(names - set(db_info.get("default_records", ())))
            db_info["default_records"] = sorted(set(db_info.get("default_records", ())) - names)
            db_info["untuned"] = sorted({*db_info["untuned"], *names})
    if lowered.target.is_gpu:
        return schedule_for_gpu(fused, lowered.target), db_info, defaulted
    from tuner.pipeline import pack_weights
    from tuner.schedule.default_schedule import schedule_untuned
    from tuner.schedule.serial_small import SerialSmallKernels

    symbolic = {}
    if lowered.prepared.ranged:  # kernels over symbolic extents: the schedule of their twin at a size in the range
        from tuner.schedule.symbolic import schedule_symbolic
        from tuner.tuning.database.store import open_database

        db = open_database(db_dir, lowered.target)[0] if db_dir else None
        values = lowered.dim_values or {k: (lo + hi) // 2 for k, (lo, hi) in lowered.prepared.dim_bounds().items()}
        fused, symbolic = schedule_symbolic(fused, lowered.target, values, db, skip)
        skip = set(skip) | set(symbolic)
    scheduled, defaulted = schedule_untuned(fused, lowered.target, skip)  # no naive loop nests in a package
    defaulted = sorted({*defaulted, *symbolic})
    try:
        return SerialSmallKernels()(pack_weights(scheduled, lowered.target)), db_info, defaulted
    except Exception:  # FoldConstant builds kernels with constant inputs: a default schedule may not lower
        bad = _unbuildable(scheduled, defaulted, lowered.target)
        if not bad:
            raise
        return schedule(lowered, db_dir, skip=set(skip) | bad, drop_records=drop_records)


def build_lowered(
    lowered: Lowered, db_dir: str | None = None, cuda_graph: bool = True, drop_records=frozenset()
) -> BuildResult:
    """Schedule and compile; on CUDA the kernel sequence runs as CUDA graphs unless `cuda_graph=False` (the
    A/B switch of scripts/gpu_check.py). Kernels in `drop_records` keep their default schedule."""
    import tvm

    spec = lowered.target
    fused, db_info, defaulted = schedule(lowered, db_dir, drop_records=drop_records)
    if lowered.prepared.ranged:
        from tuner.build.range_check import with_range_check

        fused = with_range_check(fused, lowered.prepared.dim_bounds())
    config = {}
    if spec.is_gpu:
        from tuner.tuning import TENSOR_CORE_BUILD_CONFIG, uses_tensor_cores

        config = dict(TENSOR_CORE_BUILD_CONFIG) if uses_tensor_cores(fused) else {}  # tuned or dlight WMMA kernels
        # replay the static kernel sequence as CUDA graphs: one launch per captured region, not per kernel
        config["relax.backend.use_cuda_graph"] = cuda_graph
    t0 = time.perf_counter()
    try:
        try:
            with tvm.transform.PassContext(opt_level=3, config=config):
                executable = tvm.compile(fused, target=spec.tvm_target(), relax_pipeline="default_build")
        except Exception:
            if not defaulted:
                raise
            fused, defaulted = _without_unbuildable_defaults(lowered, fused, defaulted, db_dir, drop_records)
            with tvm.transform.PassContext(opt_level=3, config=config):
                executable = tvm.compile(fused, target=spec.tvm_target(), relax_pipeline="default_build")
    except Exception as err:
        raise TunerError(
            f"TVM build failed for {lowered.prepared.path} on {spec.key}: {str(err).strip().splitlines()[-1]}",
            "run with --debug for the full trace",
        ) from err
    timings = {**lowered.timings, "build_s": time.perf_counter() - t0}
    return BuildResult(
        lowered.prepared,
        spec,
        lowered.strategy,
        fused,
        executable,
        kernel_sites(fused),
        lowered.provenance,
        db_info,
        timings,
        defaulted,
        lowered.layout,
    )


def gpu_rules(mod) -> dict | None:
    """{"kernels": {rule: count}, "fell_back": {kernel: why}} of a CUDA build (None for a CPU one)."""
    attrs = mod.attrs or {}
    if GPU_RULES_ATTR not in attrs:
        return None
    report = attrs[GPU_RULES_ATTR]
    counts: dict[str, int] = {}
    for rule in report["rules"].values():
        counts[str(rule)] = counts.get(str(rule), 0) + 1
    return {
        "kernels": dict(sorted(counts.items())),
        "fell_back": {str(k): str(v) for k, v in report["fell_back"].items()},
    }


def cuda_graph_calls(executable) -> int:
    """How many CUDA graph capture/replay calls the VM executable makes (0: kernels launch one by one)."""
    return sum("vm.builtin.cuda_graph.run_or_capture" in line for line in executable.as_text().splitlines())


def _unbuildable(fused, names: list[str], target_spec) -> set[str]:
    """Which of these kernels TVM cannot lower on their own (build each alone: only on a failure path)."""
    import tvm

    bad = set()
    for name in names:
        try:
            tvm.compile(tvm.IRModule({"main": fused[name]}), target=target_spec.tvm_target())
        except Exception:
            bad.add(name)
    return bad


def _without_unbuildable_defaults(lowered: Lowered, fused, defaulted: list[str], db_dir, drop_records=frozenset()):
    """A default schedule TVM cannot lower (seen on one ONNX Slice case): rebuild with those kernels as they were
    lowered."""
    bad = _unbuildable(fused, defaulted, lowered.target)
    if not bad:
        raise RuntimeError("the build failed, and not in a default-scheduled kernel")
    fallback, _, kept = schedule(lowered, db_dir, skip=set(bad), drop_records=drop_records)
    return fallback, kept


def build_prepared(
    prepared: PreparedModel,
    target_spec: TargetSpec,
    strategy: FusionStrategy,
    db_dir: str | None = None,
    cuda_graph: bool = True,
    layout: str = "auto",
) -> BuildResult:
    """Lower and build in one go (commands that build once)."""
    return build_lowered(lower_prepared(prepared, target_spec, strategy, layout=layout), db_dir, cuda_graph)


def export_library_bytes(executable, target_spec: TargetSpec) -> bytes:
    import contextlib
    import io

    from tuner.core.native_log import quiet_native_stderr

    with tempfile.TemporaryDirectory(prefix="ftbuild-") as tmp:
        path = os.path.join(tmp, "model.so")
        # export_library prints harmless "Scope Saving" chatter, in Python on stdout and in C++ on fd 2 (a line
        # per function: 191 lines for a ranged package through the Python API, which has no command's log file)
        with contextlib.redirect_stdout(io.StringIO()), quiet_native_stderr():
            executable.export_library(path)
        with open(path, "rb") as f:
            return f.read()


def manifest_for(result: BuildResult, build_seconds: float) -> dict:
    import tvm
    import tvm_ffi

    p = result.prepared
    return {
        "model": {"file": os.path.basename(p.path), "sha256": p.sha256, "name": p.name},
        "inputs": p.input_specs(),
        "outputs": output_specs(result),
        "consts": p.consts,
        "preparation": p.notes,
        "target": result.target.to_json(),
        "host": host_cpu_name() if not result.target.is_gpu else None,
        "num_threads": result.target.config.get("num-cores"),
        "tvm_version": tvm.__version__,
        "tvm_ffi_version": tvm_ffi.__version__,
        "fusion": result.strategy.name,
        "layout": result.layout,
        "precision": p.precision,
        "kernels": result.num_kernels,
        "kernel_names": [k.kernel for k in result.kernels],
        "kernel_flops": kernel_flops(result.fused_mod),
        "memory": memory_footprint(result.fused_mod, result.target.tvm_target()),
        "tuning_db": result.db_info,
        "cuda_graph_regions": cuda_graph_calls(result.executable) if result.target.is_gpu else None,
        "default_scheduled": result.default_scheduled,
        "gpu_rules": gpu_rules(result.fused_mod) if result.target.is_gpu else None,
        "build_seconds": round(build_seconds, 3),
        "built_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def kernel_flops(fused_mod) -> dict[str, float]:
    """{kernel: FLOPs of one call} by TVM's estimator, for the kernels it can count: `run --profile` turns them
    into GFLOP/s against the CPU's peak."""
    from tuner.core.ir import flops, primfuncs

    counted = {name: flops(f) for name, f in primfuncs(fused_mod).items()}
    return {name: n for name, n in sorted(counted.items()) if n > 0}


def write_build(result: BuildResult, output: str, build_seconds: float) -> dict:
    from tuner.runtime.package import LIBRARY, write_package

    lib = export_library_bytes(result.executable, result.target)
    members, manifest = {LIBRARY: lib}, manifest_for(result, build_seconds)
    if result.target.is_gpu:
        from tuner.runtime.device_code import package_members

        device, manifest["device_code"] = package_members(result.executable, result.target)
        members.update(device)
    return write_package(output, members, manifest)


def output_specs(result: BuildResult) -> list[dict]:
    """Name, shape and dtype of each output; shapes the ONNX graph left symbolic come from what Relax inferred."""
    from tvm import relax

    specs = [{"name": o.name, "shape": o.shape, "dtype": o.dtype} for o in result.prepared.outputs]
    ret = getattr(result.fused_mod["main"], "ret_ty", None)
    if ret is None:
        return specs
    fields = list(ret.fields) if isinstance(ret, relax.TupleType) else [ret]
    for spec, ty in zip(specs, fields):
        if isinstance(ty, relax.TensorType) and ty.shape is not None:
            try:
                spec["shape"] = [int(d) for d in ty.shape.values]
            except (TypeError, ValueError):
                pass
            spec["dtype"] = str(ty.dtype)
    return specs
