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


def _fpn_concat(channels=(24, 24, 16), side=16):
    """An NHWC feature pyramid's concat (PP-OCR's detector): coarser maps upsampled x2^k by nearest resize, then
    joined along the channels; FuseOps makes one kernel of the resizes and the concat."""
    maps = [
        relax.Var(f"m{k}", relax.TensorType((1, side >> k, side >> k, c), "float32")) for k, c in enumerate(channels)
    ]
    bb = relax.BlockBuilder()
    with bb.function("main", maps):
        with bb.dataflow():
            parts = [maps[0]] + [
                bb.emit(relax.op.image.resize2d(m, (side, side), layout="NHWC", method="nearest_neighbor"))
                for m in maps[1:]
            ]
            out = bb.emit_output(bb.emit(relax.op.concat(parts, axis=3)))
        bb.emit_func_output(out)
    mod = relax.transform.LegalizeOps(legalize_map())(bb.get())
    mod = relax.transform.AnnotateTIROpPattern()(mod)
    return relax.transform.FuseTIR()(relax.transform.FuseOps()(mod))


def test_a_concat_along_channels_reads_each_input_in_vectors():
    """Each input's channels are one partition of the channel loop, in vectors of the parts' common width (8 here:
    24, 24 and 16 channels); before, one scalar select chain per element. Built, it matches numpy."""
    from tuner.core.target import resolve_target
    from tuner.schedule.default_schedule import schedule_untuned

    spec = resolve_target("llvm")
    base = _fpn_concat()
    (name,) = [gv.name_hint for gv, f in base.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert "concatenate" in name and "resize" in name, name
    mod, _ = schedule_untuned(base, spec)
    script = mod[name].script()
    assert re.findall(r"in T\.vectorized\(T\.int64\((\d+)\)\)", script) == ["8", "8", "8"], script
    assert "range(T.int64(3), T.int64(6))" in script and script.count("T.parallel") == 1, script
    rng = np.random.default_rng(2)
    maps = [rng.standard_normal((1, 16 >> k, 16 >> k, c)).astype("float32") for k, c in enumerate((24, 24, 16))]
    ex = tvm.compile(mod, target=spec.tvm_target())
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](*[tvm.runtime.tensor(m) for m in maps]).numpy()
    upsampled = [m.repeat(1 << k, axis=1).repeat(1 << k, axis=2) for k, m in enumerate(maps)]
    np.testing.assert_array_equal(got, np.concatenate(upsampled, axis=3))


def test_the_concat_schedule_replays_from_its_trace():
    """What a tuning record of the default holds (tuning/seed.py): its trace as JSON, replayed, is the schedule."""
    from tuner.core.target import resolve_target
    from tuner.schedule.default_schedule import heuristic_schedule

    (func,) = [f for f in _fpn_concat().functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    sch = heuristic_schedule(func, resolve_target("llvm").tvm_target(), 8)
    assert "LoopPartition" in [inst.kind.name for inst in sch.trace.insts]
    replayed = tvm.s_tir.Schedule(func)
    tvm.s_tir.schedule.Trace.apply_json_to_schedule(sch.trace.as_json(), replayed)
    tvm.ir.assert_structural_equal(replayed.mod, sch.mod)


def test_a_concat_of_parts_no_vector_divides_is_left_to_the_generic_rules():
    from tuner.schedule.data_movement import movement_schedule

    for f in _fpn_concat(channels=(3, 5, 7)).functions.values():
        if isinstance(f, tvm.tirx.PrimFunc):
            assert movement_schedule(f, 8) is None


def test_a_concat_under_an_element_wise_epilogue_reads_each_input_in_vectors():
    """DenseNet: concat -> batch norm (a per-channel multiply-add) -> ReLU, one kernel. The chain sits under the
    epilogue's arithmetic; each input still gets its partition of the channel loop, in vectors (before: one scalar
    select chain per element, 10-24x ONNX Runtime's time)."""
    from tuner.core.target import resolve_target
    from tuner.schedule.data_movement import movement_schedule
    from tuner.schedule.default_schedule import schedule_untuned

    rng = np.random.default_rng(3)
    scale, shift = (rng.standard_normal((1, 1, 1, 96)).astype("float32") for _ in range(2))
    a = relax.Var("a", relax.TensorType((1, 8, 8, 64), "float32"))
    b = relax.Var("b", relax.TensorType((1, 8, 8, 32), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [a, b]):
        with bb.dataflow():
            cat = bb.emit(relax.op.concat([a, b], axis=3))
            y = bb.emit(relax.op.add(relax.op.multiply(cat, relax.const(scale)), relax.const(shift)))
            out = bb.emit_output(bb.emit(relax.op.nn.relu(y)))
        bb.emit_func_output(out)
    mod = relax.transform.AnnotateTIROpPattern()(relax.transform.LegalizeOps(legalize_map())(bb.get()))
    mod = relax.transform.FuseTIR()(relax.transform.FuseOps()(mod))
    ((name, func),) = [(gv.name_hint, f) for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert movement_schedule(func, 8) is not None, name
    spec = resolve_target("llvm")
    scheduled, _ = schedule_untuned(mod, spec)
    script = scheduled[name].script()
    assert re.findall(r"in T\.vectorized\(T\.int64\((\d+)\)\)", script) == ["8", "8"], script
    xa, xb = rng.standard_normal((1, 8, 8, 64)).astype("float32"), rng.standard_normal((1, 8, 8, 32)).astype("float32")
    ex = tvm.compile(scheduled, target=spec.tvm_target())
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(xa), tvm.runtime.tensor(xb)).numpy()
    np.testing.assert_allclose(
        got, np.maximum(np.concatenate([xa, xb], axis=3) * scale + shift, 0), rtol=1e-5, atol=1e-6
    )


def test_a_scaled_transpose_with_padded_keys_is_tiled():
    """A torch attention's K: heads split from a (tokens, width) projection, scaled by a scalar, transposed so the
    tokens are innermost, and padded with zero keys to whole vectors (transform/padded_attention.py): tiled 8 x 8
    (197 -> 200 keys: no 16-wide tile), and the numbers are numpy's."""
    from tuner.core.target import resolve_target
    from tuner.schedule.data_movement import movement_schedule

    tokens, heads, depth = 197, 2, 8

    def k_transposed(y):
        scaled = relax.op.multiply(relax.op.permute_dims(y, [0, 2, 3, 1]), relax.const(0.5, "float32"))
        return relax.op.nn.pad(scaled, [0, 0, 0, 0, 0, 0, 0, 3], "constant", 0.0)

    mod = _module((tokens, heads * depth), (1, tokens, heads, depth), then=k_transposed)
    (func,) = [f for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    sch = movement_schedule(func, 8)
    assert sch is not None
    script = sch.mod.script()
    assert "T.vectorized(T.int64(8))" in script and script.count("in range(T.int64(8))") == 1, script
    spec = resolve_target("llvm")
    mod[_kernel(mod)] = sch.mod["main"].with_attr("tirx.is_scheduled", True)
    x = np.random.default_rng(2).standard_normal((tokens, heads * depth)).astype("float32")
    got = relax.VirtualMachine(tvm.compile(mod, target=spec.tvm_target()), tvm.cpu())["main"](tvm.runtime.tensor(x))
    want = np.zeros((1, heads, depth, 200), "float32")
    want[..., :tokens] = x.reshape(1, tokens, heads, depth).transpose(0, 2, 3, 1) * 0.5
    np.testing.assert_array_equal(got.numpy(), want)
