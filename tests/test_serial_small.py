"""Serial loops for small CPU kernels (tuner/tuning/serial_small.py): before/after structure, no hardware."""

import tvm
from tvm.script import tirx as T

from tuner.core.ir import primfuncs
from tuner.schedule.serial_small import MIN_PARALLEL_WORK, SerialSmallKernels, elements_touched, small_parallel_kernels


def _add(n: int, parallel: bool):
    loop = T.parallel if parallel else T.serial

    @T.prim_func(private=True, s_tir=True)
    def add(a: T.Buffer((T.int64(n), T.int64(64)), "float32"), b: T.Buffer((T.int64(n), T.int64(64)), "float32")):
        T.func_attr({"op_pattern": 0, "tirx.is_scheduled": True, "tirx.noalias": True})
        for i in loop(T.int64(n)):
            for j in T.vectorized(T.int64(64)):
                with T.sblock("add"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    b[vi, vj] = a[vi, vj] + T.float32(1)

    return add


def _module(n: int, parallel: bool = True):
    return tvm.IRModule({"add": _add(n, parallel)})


def test_small_kernel_becomes_serial():
    before = _module(16)  # 16 x 64: 2,048 elements touched, 1,024 FLOPs
    after = SerialSmallKernels()(before)
    tvm.ir.assert_structural_equal(after["add"], _add(16, parallel=False))
    assert "T.parallel(" in before["add"].script()  # the input module is not modified


def test_large_kernel_stays_parallel():
    before = _module(4096)  # 4096 x 64 x 2 elements: above the threshold
    assert small_parallel_kernels(before) == {}
    tvm.ir.assert_structural_equal(SerialSmallKernels()(before), before)
    assert small_parallel_kernels(before, min_work=10**7) == {"add": 4096 * 64 * 3}


def test_elements_touched_reads_the_signature():
    script = _add(16, True).script()
    assert elements_touched(script) == 2 * 16 * 64
    symbolic = script.replace("(T.int64(16), T.int64(64))", "(n, T.int64(64))", 1)
    assert elements_touched(symbolic) is None  # unknown size: left parallel


def test_transformer_package_has_no_small_parallel_kernel(transformer):
    from tuner.build.executable import build_prepared
    from tuner.core.target import resolve_target
    from tuner.frontend.onnx_model import prepare_model
    from tuner.fusion import get_strategy

    built = build_prepared(prepare_model(transformer), resolve_target("llvm"), get_strategy("tvm"))
    kernels = primfuncs(built.fused_mod)
    assert small_parallel_kernels(built.fused_mod) == {}
    serial = [k for k, f in kernels.items() if "T.parallel(" not in f.script()]
    assert serial and len(serial) < len(kernels), (serial, MIN_PARALLEL_WORK)  # the large matmuls stay parallel


def test_kernel_with_if_then_else_stays_parallel():
    """TVM 0.27 miscompiles the serial form of some if_then_else kernels (see serial_small): they are skipped."""

    @T.prim_func(private=True, s_tir=True)
    def pad(a: T.Buffer((T.int64(4), T.int64(8)), "float32"), b: T.Buffer((T.int64(4), T.int64(16)), "float32")):
        T.func_attr({"tirx.is_scheduled": True, "tirx.noalias": True})
        for i in T.parallel(T.int64(4)):
            for j in T.vectorized(T.int64(16)):
                with T.sblock("pad"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    b[vi, vj] = T.if_then_else(vj < T.int64(8), a[vi, T.min(vj, T.int64(7))], T.float32(0))

    assert small_parallel_kernels(tvm.IRModule({"pad": pad})) == {}
