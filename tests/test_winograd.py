"""3x3 stride-1 NHWC convs as Winograd (tuner/winograd.py): the numbers, which convs it takes, the weights folded at
build time, and the transforms' schedule (tuning/winograd_transforms.py) built and run against numpy."""

import numpy as np
import pytest
import tvm
from tvm import relax


def _direct(x, w, pads=(1, 1, 1, 1)):
    """NHWC x, OHWI 3x3 w, stride 1, in float64."""
    p = np.pad(x.astype("float64"), ((0, 0), (pads[0], pads[2]), (pads[1], pads[3]), (0, 0)))
    oh, ow = p.shape[1] - 2, p.shape[2] - 2
    out = np.zeros((x.shape[0], oh, ow, w.shape[0]))
    for ky in range(3):
        for kx in range(3):
            out += p[:, ky : ky + oh, kx : kx + ow, :] @ w[:, ky, kx, :].T.astype("float64")
    return out


@pytest.mark.parametrize("m", [2, 4])
def test_winograd_compute_matches_the_direct_conv(m):
    from tvm import te

    from tuner.legalize.winograd import conv2d_winograd_nhwc, transformed_weights

    rng = np.random.default_rng(m)
    x = rng.standard_normal((1, 13, 10, 8)).astype("float32")  # partial tiles at the bottom and right
    w = rng.standard_normal((16, 3, 3, 8)).astype("float32")
    data, weight = te.placeholder(x.shape, name="x"), te.placeholder(w.shape, name="w")
    u = transformed_weights(weight, m)
    out = conv2d_winograd_nhwc(data, u, m, [1, 1, 1, 1])
    lib = tvm.compile(tvm.IRModule({"main": te.create_prim_func([data, weight, out])}), target="llvm")
    got = tvm.runtime.tensor(np.zeros([int(s) for s in out.shape], "float32"))
    lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w), got)
    want = _direct(x, w)
    # F(4x4, 3x3) loses a few bits more than F(2x2, 3x3); both stay far inside verification's tolerance
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-4 * np.abs(want).max())


def _conv_module(shape, cout, kernel=3, stride=1, groups=1, pads=(1, 1, 1, 1), act=True):
    """main(x) = relu(conv(x) + bias) in NHWC/OHWI, constant weights and bias."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((cout, kernel, kernel, shape[3] // groups)) * 0.2).astype("float32")
    b = rng.standard_normal((1, 1, 1, cout)).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(
                relax.op.nn.conv2d(
                    x, relax.const(w), [stride] * 2, list(pads), groups=groups, data_layout="NHWC", kernel_layout="OHWI"
                )
            )
            y = bb.emit(relax.op.add(y, relax.const(b)))
            z = bb.emit_output(relax.op.nn.relu(y) if act else y)
        bb.emit_func_output(z)
    return bb.get(), w, b


def _tile_of(mod):
    from tuner.legalize.winograd import winograd_tile

    calls = []

    def visit(e):
        if isinstance(e, relax.Call) and getattr(e.op, "name", "") == "relax.nn.conv2d":
            calls.append(e)

    relax.analysis.post_order_visit(mod["main"].body, visit)
    (call,) = calls
    return winograd_tile(call)


def test_winograd_takes_large_maps_and_leaves_other_convs_direct():
    assert _tile_of(_conv_module((1, 56, 56, 64), 64)[0]) == 4
    assert _tile_of(_conv_module((1, 14, 14, 64), 64)[0]) == 2  # 14 is no multiple of 4: 7 x 7 tiles of 2
    assert _tile_of(_conv_module((1, 56, 56, 64), 64, stride=2)[0]) is None
    assert _tile_of(_conv_module((1, 56, 56, 64), 64, kernel=1, pads=(0, 0, 0, 0))[0]) is None
    assert _tile_of(_conv_module((1, 56, 56, 64), 64, groups=64)[0]) is None  # depthwise
    assert _tile_of(_conv_module((1, 55, 55, 64), 64)[0]) == 4  # 14 x 14 tiles cover 56 x 56: 4% computed in vain
    assert _tile_of(_conv_module((1, 13, 13, 64), 64)[0]) == 2  # 14 x 14 at m = 2 (16% more), 16 x 16 at m = 4
    assert _tile_of(_conv_module((1, 7, 7, 512), 512)[0]) is None  # 16 tiles of 2 covering 8 x 8
    assert _tile_of(_conv_module((1, 8, 8, 32), 32)[0]) is None  # 16 tiles: the matmul too small to pay
    assert _tile_of(_conv_module((1, 160, 160, 16), 16)[0]) is None  # 16 channels: the transforms cost more
    assert _tile_of(_conv_module((1, 56, 56, 2048), 2048)[0]) is None  # 604 MB of transformed weights


def _lowered(mod, winograd=True):
    from tuner.core.target import resolve_target
    from tuner.fusion import get_strategy
    from tuner.pipeline import lower

    spec = resolve_target("llvm")
    return lower(mod, spec, get_strategy("tvm"), layout="nchw", winograd=winograd), spec


def test_winograd_weights_fold_at_build_and_the_epilogue_fuses():
    mod, _, _ = _conv_module((1, 28, 28, 24), 32)
    low, _ = _lowered(mod)
    names = [gv.name_hint for gv, f in low.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
    # one kernel: no weight transform left to run per call, the bias and ReLU fused into the conv
    assert len(names) == 1 and names[0].startswith("fused_conv2d_winograd_add_relu"), names
    (kernel,) = [f for f in low.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    assert 'T.sblock("bgemm")' in kernel.script()
    direct, _ = _lowered(mod, winograd=False)
    assert not any("winograd" in gv.name_hint for gv in direct.functions)


def test_winograd_kernel_default_schedule_runs_and_matches_numpy():
    from tuner.pipeline import pack_weights
    from tuner.schedule.default_schedule import schedule_untuned

    mod, w, b = _conv_module((1, 27, 27, 24), 32)  # m = 4: the last row and column of tiles partial
    low, spec = _lowered(mod)
    scheduled, names = schedule_untuned(low, spec)
    (name,) = names
    script = scheduled[name].script()
    # transforms: one parallel job per tile and channel vector, channels in vectors; the epilogue inside the
    # output transform's job
    assert script.count("T.parallel(") == 3, script
    assert 'T.sblock("compute")' in script or 'T.sblock("T_add")' in script
    assert "T.vectorized(T.int64(16))" in script
    ex = tvm.compile(pack_weights(scheduled, spec), target=spec.tvm_target())
    x = np.random.default_rng(1).standard_normal((1, 27, 27, 24)).astype("float32")
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    want = np.maximum(_direct(x, w) + b, 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
