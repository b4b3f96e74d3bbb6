"""Data layout of convolutions on CPU, chosen before fusion.

    nchw    ONNX's own layout; the spatial width is the only contiguous axis a vector can run along
    nhwc    channels innermost: a conv is a matmul over channels, vectorised along output channels
    nchwc   NCHW{b}c, channel blocks of one vector (b = 16 fp32 lanes with AVX-512, else 8), the layout ONNX
            Runtime's MLAS convolutions use on x86: every load and store is a full vector

`ConvertLayout` rewrites each 2-D convolution whose channels divide into blocks, and carries the layout through the
element-wise ops, pools and reductions that follow, so a chain of convs pays for one layout transform at its
entry and one at its exit; convs it cannot convert (3 input channels, depthwise) stay NCHW. Where ConvertLayout
has no rule for an op, or fails and each conv is converted on its own, the transposes it leaves are moved down
the graph until they cancel (tuner/transpose_sinking.py). The rest are kernels of their own in the plan
(`layout_transform`, `permute_dims`).
"""

from __future__ import annotations

from tuner.transform.dataflow_facts import out_dtype

LAYOUTS = ("nchw", "nhwc", "nchwc")


def resolve_layout(layout: str, target_spec) -> str:
    """`auto`: NHWC on CPU, where it measured fastest both untuned and tuned (scripts/bench_levers.py; README);
    NCHW on CUDA, whose dlight and MetaSchedule GPU rules are written for it."""
    from tuner.core.errors import TunerError

    if layout == "auto":
        return "nchw" if target_spec.is_gpu else "nhwc"
    if layout not in LAYOUTS:
        raise TunerError(f"unknown layout {layout!r}", f"choose auto or one of {', '.join(LAYOUTS)}")
    if target_spec.is_gpu and layout != "nchw":
        raise TunerError(f"--layout {layout} is for CPU targets", "CUDA kernels are built in NCHW: use auto or nchw")
    return layout


def conv_layouts(layout: str, lanes: int) -> dict | None:
    """ConvertLayout's desired layouts for `layout`, or None where nothing is to be converted."""
    if layout == "nchw":
        return None
    # a transposed conv would follow its producer's layout, and TVM 0.27 legalizes it only in NCHW: pin it there
    keep = {"relax.nn.conv2d_transpose": ["NCHW", "IOHW"]}
    if layout == "nhwc":
        return {"relax.nn.conv2d": ["NHWC", "OHWI"], **keep}
    if layout == "nchwc":
        return {"relax.nn.conv2d": [f"NCHW{lanes}c", f"OIHW{lanes}i{lanes}o"], **keep}
    raise ValueError(f"unknown layout {layout!r}: choose one of {', '.join(LAYOUTS)}")


LAYOUT_FALLBACK = "fusion_tuner.layout_fallback"  # module attribute: why ConvertLayout's result was not used
ONE_BY_ONE = "each convolution converted on its own, between two transposes"
STAY_NCHW = "convolutions stay NCHW"


def layout_after_fallback(mod, layout: str) -> str:
    """The convs' layout once ConvertConvLayout ran: `layout`, or NCHW where it fell back to leaving them."""
    reason = layout_fallback(mod)
    return "nchw" if reason is not None and reason.endswith(STAY_NCHW) else layout


def layout_fallback(mod) -> str | None:
    """Why ConvertConvLayout left the module's convs in NCHW, or None."""
    return str(mod.attrs[LAYOUT_FALLBACK]) if mod.attrs is not None and LAYOUT_FALLBACK in mod.attrs else None


def ConvertConvLayout(layout: str, lanes: int, sink: bool = True):  # noqa: N802  (named as TVM names its passes)
    """Convolutions to `layout` (a no-op for `nchw` and for modules without a conv2d); `sink=False` leaves the
    transposes where the conversion put them (for the lever's ablation in scripts/bench_levers.py)."""
    import tvm
    from tvm import relax

    from tuner.transform.transpose_sinking import sink_transposes

    finish = sink_transposes if sink else (lambda converted: converted)
    desired = conv_layouts(layout, lanes)

    def transform(mod, _ctx):
        if desired is None:
            return mod
        from tuner.core.native_log import quiet_native_stderr

        # TVM 0.27's ConvertLayout fails on some graphs (channel splits into blocks; magika's squeezed 3-D conv
        # output): keep NCHW, and keep the "BlockBuilder destroyed" warning of the unwound pass off the terminal
        with quiet_native_stderr():
            try:
                return finish(relax.transform.ConvertLayout(desired)(clip_to_min_max(mod)))
            except Exception as err:  # said in the manifest and the plan
                from tuner.core.errors import summarize_native_error

                reason = f"{layout} conversion failed in TVM's ConvertLayout: {summarize_native_error(err)}"
        if layout == "nhwc":  # each conv on its own, between two transposes
            converted = convs_to_nhwc_one_by_one(mod)
            if not converted.same_as(mod):
                return finish(converted).with_attr(LAYOUT_FALLBACK, f"{reason}; {ONE_BY_ONE}")
        return mod.with_attr(LAYOUT_FALLBACK, f"{reason}; {STAY_NCHW}")

    return tvm.transform.module_pass(transform, opt_level=0, name="ConvertConvLayout")


def convs_to_nhwc_one_by_one(mod):
    """Each plain NCHW conv2d -> transpose to NHWC, conv2d in NHWC/OHWI, transpose back: the conv itself becomes a
    matmul over channels, vectorised along output channels, where ConvertLayout cannot carry a layout through
    the graph. The transposes are kernels of their own (one pass over the conv's input and output each); the
    weight's transpose is a constant, folded at build time. Grouped convs keep NCHW."""
    from tvm import relax
    from tvm.relax.dpl import is_op, wildcard

    from tuner.core.ir import rewrite_relax_functions

    def rewrite(expr, _matches):
        a = expr.attrs
        if int(a.groups) != 1 or (a.data_layout, a.kernel_layout, a.out_layout) != ("NCHW", "OIHW", "NCHW"):
            return expr
        x, w = expr.args
        y = relax.op.nn.conv2d(
            relax.op.permute_dims(x, [0, 2, 3, 1]),
            relax.op.permute_dims(w, [0, 2, 3, 1]),
            strides=a.strides,
            padding=a.padding,
            dilation=a.dilation,
            data_layout="NHWC",
            kernel_layout="OHWI",
            out_dtype=out_dtype(expr),
        )
        return relax.op.permute_dims(y, [0, 3, 1, 2])

    return rewrite_relax_functions(mod, is_op("relax.nn.conv2d")(wildcard(), wildcard()), rewrite)


def clip_to_min_max(mod):
    """`clip(x, lo, hi)` -> `minimum(maximum(x, lo), hi)`. TVM 0.27 gives `clip` (ONNX HardSwish, HardSigmoid)
    no layout rule, so ConvertLayout wraps every one in a transpose back to NCHW and out again, which also cuts
    the conv's activation out of its kernel; binary element-wise ops with a scalar follow any layout."""
    from tvm import relax
    from tvm.relax.dpl import is_op, wildcard

    pattern = is_op("relax.clip")(wildcard(), wildcard(), wildcard())

    def rewrite(expr, _matches):
        x, lo, hi = expr.args
        dtype = str(x.ty.dtype)
        low = relax.op.maximum(x, relax.const(_bound(lo), dtype))
        return relax.op.minimum(low, relax.const(_bound(hi), dtype))

    from tuner.core.ir import rewrite_relax_functions

    return rewrite_relax_functions(mod, pattern, rewrite)


def _bound(arg) -> float:
    value = getattr(arg, "value", arg)  # a PrimValue around an IntImm/FloatImm
    return float(getattr(value, "value", value))
