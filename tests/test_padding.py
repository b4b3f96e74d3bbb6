"""Depthwise convs read their padding in place (`tuning.padding`); convs that reduce over channels keep the pass."""

import numpy as np
import pytest
import tvm
from tvm import relax


def _convs(stride: int):
    """NHWC: a padded 3x3 depthwise conv (24 channels) then a padded 3x3 conv 24 -> 16 channels, each with a bias."""
    rng = np.random.default_rng(0)
    dw = rng.standard_normal((24, 3, 3, 1)).astype("float32")
    full = rng.standard_normal((16, 3, 3, 24)).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 13, 13, 24), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(
                relax.op.nn.conv2d(
                    x,
                    relax.const(dw),
                    [stride, stride],
                    [1, 1, 1, 1],
                    groups=24,
                    data_layout="NHWC",
                    kernel_layout="OHWI",
                )
            )
            y = bb.emit(relax.op.nn.relu(y))
            z = bb.emit_output(
                relax.op.nn.conv2d(y, relax.const(full), [1, 1], [1, 1, 1, 1], data_layout="NHWC", kernel_layout="OHWI")
            )
        bb.emit_func_output(z)
    mod = relax.transform.FuseTIR()(relax.transform.FuseOps()(relax.transform.LegalizeOps()(bb.get())))
    return mod, dw, full


def _reference(x, dw, full, stride):
    def conv(a, w, s, groups):
        p = np.pad(a, ((0, 0), (1, 1), (1, 1), (0, 0)))
        h, wd = (a.shape[1] - 1) // s + 1, (a.shape[2] - 1) // s + 1
        out = np.zeros((1, h, wd, w.shape[0]), "float32")
        for ky in range(3):
            for kx in range(3):
                win = p[:, ky : ky + s * (h - 1) + 1 : s, kx : kx + s * (wd - 1) + 1 : s, :]
                out += win * w[:, ky, kx, 0] if groups > 1 else win @ w[:, ky, kx, :].T
        return out

    return conv(np.maximum(conv(x, dw, stride, 24), 0), full, 1, 1)


@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_padding_inlined_regular_conv_keeps_its_pass(stride):
    from tuner.core.target import resolve_target
    from tuner.schedule.default_schedule import schedule_untuned
    from tuner.schedule.recipes import PADDING_PASS

    spec = resolve_target("llvm")
    base, dw, full = _convs(stride)
    x = np.random.default_rng(1).standard_normal((1, 13, 13, 24)).astype("float32")
    want = _reference(x, dw, full, stride)
    for recipe, depthwise_padded in [(None, False), (PADDING_PASS, True)]:
        mod, names = schedule_untuned(base, spec, **({"recipe": recipe} if recipe else {}))
        scripts = {n: mod[n].script() for n in names}
        depthwise = [s for s in scripts.values() if "groups" in s or "depthwise" in s or "group_conv" in s]
        regular = [s for s in scripts.values() if s not in depthwise and "conv2d" in s]
        assert len(depthwise) == 1 and len(regular) == 1, list(scripts)
        assert ('T.sblock("pad_temp")' in depthwise[0]) == depthwise_padded, (recipe, depthwise[0])
        assert 'T.sblock("pad_temp")' in regular[0]  # reduces over its 24 input channels: keeps the pass
        ex = tvm.compile(mod, target=spec.tvm_target())
        got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
