"""Kernels that only rearrange their input (attention heads' split and merge, K's transpose, a layout transpose) are
scheduled as vector copies or 16 x 16 tiled transposes (`schedule/data_movement.py`); the built kernels match numpy,
and kernels that compute are left to the generic rules."""

import re

import numpy as np
import pytest
import tvm
from tvm import relax

from tuner.legalize.conv_maps import legalize_map


def _module(in_shape, out_shape, transpose=None, then=None):
    x = relax.Var("x", relax.TensorType(in_shape, "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.reshape(x, out_shape))
            if transpose:
                y = bb.emit(relax.op.permute_dims(y, transpose))
            if then:
                y = bb.emit(then(y))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    mod = relax.transform.LegalizeOps(legalize_map())(bb.get())
    mod = relax.transform.AnnotateTIROpPattern()(mod)
    return relax.transform.FuseTIR()(relax.transform.FuseOps()(mod))


def _kernel(mod):
    (name,) = [gv.name_hint for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
    return name


CASES = [  # (input, reshape, permutation, what the schedule does, numpy)
    ((128, 256), (1, 128, 4, 64), [0, 2, 3, 1], "transpose", lambda a: a.reshape(1, 128, 4, 64).transpose(0, 2, 3, 1)),
    ((128, 256), (1, 128, 4, 64), [0, 2, 1, 3], "copy", lambda a: a.reshape(1, 128, 4, 64).transpose(0, 2, 1, 3)),
    ((1, 4, 128, 64), (1, 4, 128, 64), [0, 2, 1, 3], "copy", lambda a: a.transpose(0, 2, 1, 3)),
    ((1, 32, 24, 48), (1, 32, 24, 48), [0, 2, 3, 1], "transpose", lambda a: a.transpose(0, 2, 3, 1)),  # NCHW -> NHWC
]


@pytest.mark.parametrize("in_shape, out_shape, perm, kind, reference", CASES)
def test_moves_are_copies_or_tiled_transposes(in_shape, out_shape, perm, kind, reference):
    from tuner.core.target import resolve_target
    from tuner.schedule.default_schedule import schedule_untuned
    from tuner.schedule.recipes import GATHERED_MOVES

    spec = resolve_target("llvm")
    x = np.random.default_rng(1).standard_normal(in_shape).astype("float32")
    base = _module(in_shape, out_shape, perm)
    for recipe, ours in [(None, True), (GATHERED_MOVES, False)]:
        mod, names = schedule_untuned(base, spec, **({"recipe": recipe} if recipe else {}))
        script = mod[_kernel(base)].script()
        tiles = re.findall(r"in T\.vectorized\(T\.int64\((\d+)\)\)", script)
        tiled = bool(re.search(r"_0_\w* in T\.parallel", script)) and "// T.int64(16)" not in script
        if ours and kind == "transpose":  # two axes split by 16, the output's last one in vectors of 16
            assert tiles == ["16"] and script.count("_1 in range(T.int64(16))") == 1 and tiled, script
        elif ours:  # one parallel loop over rows, the last axis in vectors
            assert len(tiles) == 1 and script.count("T.parallel") == 1, script
        ex = tvm.compile(mod, target=spec.tvm_target())
        got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
        np.testing.assert_array_equal(got, reference(x))


def test_kernels_that_compute_are_not_moves():
    from tuner.schedule.data_movement import movement_schedule

    relu = _module((128, 256), (1, 128, 4, 64), [0, 2, 3, 1], then=relax.op.nn.relu)
    for f in relu.functions.values():
        if isinstance(f, tvm.tirx.PrimFunc):
            assert movement_schedule(f, 16) is None
