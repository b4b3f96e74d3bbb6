"""Compute precision: `--dtype`. What a precision does to the graph, and how close to ONNX Runtime it must stay.

    float32   the model as exported (the default): nothing changes.
    float16   Relax's ToMixedPrecision: matmul and conv read fp16 and accumulate in fp32, elementwise ops run in
              fp16; inputs and outputs keep the model's dtypes. On CUDA this is what lets MetaSchedule's
              tensor-core (WMMA) rules apply.

bfloat16 is refused with a reason: TVM 0.27's ToMixedPrecision emits float16 only. A model exported in
fp16/bf16 needs no flag: its kernels compute in half precision, except that matmuls and convs accumulate in
float32 (`AccumulateHalfInFloat32`), as ONNX Runtime's do; TVM's converters would sum hundreds of products in
fp16 (3 significant digits), which put whole attention blocks 1e-3 off.
"""

from __future__ import annotations

from tuner.core.errors import TunerError
from tuner.core.precision import PRECISIONS, Precision, get_precision  # noqa: F401  (re-exported)


def precision_pass(precision: Precision):
    """The graph pass for a precision. Runs on the imported graph, before any grouping."""
    if precision.name == "float32":
        return AccumulateHalfInFloat32()
    import tvm
    from tvm import relax

    # out_dtype is the accumulator of matmul/conv; fp32 keeps long reductions accurate. The pass casts a tensor
    # once per consumer (q, k and v each cast the same input): CSE keeps one cast kernel per tensor.
    return tvm.transform.Sequential(
        [relax.transform.ToMixedPrecision(out_dtype="float32"), relax.transform.EliminateCommonSubexpr()],
        name="Precision" + precision.name,
    )


_HALF = ("float16", "bfloat16")


def AccumulateHalfInFloat32():  # noqa: N802  (a pass, named as TVM names its passes)
    """matmul / conv1d / conv2d on half-precision inputs accumulate in float32 and cast their result back: the
    same output type, each sum rounded once. A no-op on float32 graphs."""
    import tvm

    return tvm.transform.module_pass(lambda mod, _ctx: accumulate_half_in_float32(mod), 0, "AccumulateHalfInFloat32")


def accumulate_half_in_float32(mod):
    from tvm import relax
    from tvm.relax.dpl import is_op, wildcard

    op = relax.op
    pattern = is_op("relax.matmul")(wildcard(), wildcard()) | is_op("relax.nn.conv2d")(wildcard(), wildcard())
    pattern |= is_op("relax.nn.conv1d")(wildcard(), wildcard())

    def rewrite(call, _matches):
        dtype = str(call.ty.dtype)
        if dtype not in _HALF:
            return call
        a, b = call.args
        if call.op.name == "relax.matmul":
            wide = op.matmul(a, b, out_dtype="float32")
        else:
            at = call.attrs
            conv = op.nn.conv2d if call.op.name == "relax.nn.conv2d" else op.nn.conv1d
            wide = conv(a, b, [int(x) for x in at.strides], [int(x) for x in at.padding],
                        [int(x) for x in at.dilation], int(at.groups), str(at.data_layout), str(at.kernel_layout),
                        str(at.out_layout), "float32")  # fmt: skip
        return op.astype(wide, dtype)

    from tuner.core.ir import rewrite_relax_functions

    return rewrite_relax_functions(mod, pattern, rewrite)


def apply_precision(mod, precision: str, source: str):
    """--dtype: rewrite the graph to the requested precision. The casts it adds get pass-made names, which the
    plan attributes to the ONNX node that follows them (the matmul or conv they feed)."""
    rewrite = precision_pass(get_precision(precision))
    if rewrite is None:
        return mod
    try:
        return rewrite(mod)
    except Exception as err:
        raise TunerError(
            f"{source}: --dtype {precision} failed in TVM's mixed-precision pass: "
            f"{str(err).strip().splitlines()[-1][:300]}",
            "build in float32 (drop --dtype)",
        ) from err
