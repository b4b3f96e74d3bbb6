"""Serial loops for kernels too small to pay for a parallel launch (CPU).

Each `T.parallel` loop is a fork/join on TVM's thread pool: about 0.6 us each on average on these 2-vCPU VMs
(derived from the figures below), more when a worker has gone to sleep. MetaSchedule measures every kernel
alone, back to back, with the pool's workers spinning, so a tiny kernel measures faster parallel; inside a model,
between other kernels, it does not. On the synthetic transformer (19 launches of 1-270 kFLOP) a call took 33 us
with two threads and 22 us with one. ONNX Runtime's MLAS makes the same call per operator: it splits work only
above a cost threshold.

The decision is per kernel, from its work (FLOPs plus elements read and written), after the schedules are
applied, so tuned and default schedules alike keep their loop structure with `parallel` turned `serial`.
TVM 0.27 has no Python TIR mutator and no schedule primitive that un-parallelises a loop: the kernel goes
through its printed TVMScript and back (`tvm.script.from_source`), which the tests check round-trips.
"""

from __future__ import annotations

from tuner.core.ir import buffer_shapes, flops, kernel_script, primfuncs, product

# Work (FLOPs + elements touched) below which a kernel runs serial. On the tuned synthetic transformer a call took
# 34/22/21/21 us with thresholds 0/1e5/3e5/1e6; MiniLM, YOLOv8n, magika did not move at 1e5 (within noise).
# The smallest threshold that gets the gain: scripts/bench_levers.py, variant +serial-small.
MIN_PARALLEL_WORK = 100_000


def elements_touched(script: str) -> int | None:
    """Elements of every buffer in a kernel's signature (None when a shape is symbolic)."""
    shapes = buffer_shapes(script)
    return None if any(shape is None for shape in shapes) else sum(product(shape) or 1 for shape in shapes)


def kernel_work(func) -> float | None:
    """FLOPs plus elements touched: the proxy for a kernel's serial run time (None: unknown, e.g. symbolic)."""
    touched = elements_touched(kernel_script(func))
    return None if touched is None else flops(func) + touched


def small_parallel_kernels(mod, min_work: float = MIN_PARALLEL_WORK) -> dict[str, float]:
    """{kernel: work} of the parallel kernels whose work is below `min_work`."""
    small = {}
    for name, func in primfuncs(mod).items():
        script = kernel_script(func)
        # TVM 0.27 miscompiles the serial form of some kernels with if_then_else (a concatenate fused with
        # slices: ONNX test_rotary_embedding_3d_input gave errors up to 1e23, vectorised or not; the parallel
        # form is right): those stay parallel
        if "T.parallel(" not in script or "T.if_then_else(" in script:
            continue
        work = kernel_work(func)
        if work is not None and work < min_work:
            small[name] = work
    return small


def serialize(func):
    """The same kernel with every parallel loop serial."""
    import tvm

    return tvm.script.from_source(kernel_script(func).replace("T.parallel(", "T.serial("))


def SerialSmallKernels(min_work: float = MIN_PARALLEL_WORK):  # noqa: N802  (a pass, named as TVM names its passes)
    """Module pass: kernels whose work is below `min_work` get serial loops (see the module docstring)."""
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="SerialSmallKernels")
    def apply(mod, _ctx):
        small = small_parallel_kernels(mod, min_work)
        if not small:
            return mod
        mod = mod.clone()  # a pass must not change its input
        for gv in mod.get_global_vars():
            if gv.name_hint in small:
                mod.update_func(gv, serialize(mod[gv]))
        return mod

    return apply
