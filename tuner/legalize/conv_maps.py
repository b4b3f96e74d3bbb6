"""Which TIR compute each conv becomes at LegalizeOps: TOPI's blocked conv for NCHWc layouts, Winograd for the
3x3 stride-1 NHWC convs it measured faster on, TVM's own legalization otherwise."""

from __future__ import annotations

from tuner.transform.dataflow_facts import out_dtype


def legalize_map(winograd: bool = True) -> dict:
    """LegalizeOps overrides: TVM 0.27 legalizes conv2d only in 4-D layouts; a blocked one becomes TOPI's
    `conv2d_NCHWc` (the compute its x86 schedules were written for). With `winograd`, the 3x3 stride-1 NHWC convs
    that `winograd.winograd_tile` takes become Winograd kernels (tuner/winograd.py). (Grouped NHWC convs are
    kernels of their own before this: tuner/grouped_conv.py.)"""
    import functools

    return {"relax.nn.conv2d": functools.partial(_legalize_conv2d, winograd=winograd)}


def _legalize_conv2d(bb, call, winograd: bool = True):
    from tvm import topi
    from tvm.relax.transform.legalize_ops.nn import _nn_conv2d

    from tuner.legalize import winograd as wino

    attrs = call.attrs
    if winograd and (m := wino.winograd_tile(call)) is not None:
        return wino.legalize(bb, call, m)
    if len(attrs.data_layout) == 4 or int(attrs.groups) != 1 or attrs.data_layout != attrs.out_layout:
        return _nn_conv2d(bb, call)
    return bb.call_te(
        topi.nn.conv2d_NCHWc,
        call.args[0],
        call.args[1],
        stride=[int(s) for s in attrs.strides],
        padding=[int(p) for p in attrs.padding],
        dilation=[int(d) for d in attrs.dilation],
        layout=attrs.data_layout,
        out_layout=attrs.out_layout,
        out_dtype=out_dtype(call),
        primfunc_name_hint="conv2d_NCHWc",
    )
