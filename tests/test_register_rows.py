"""Register-block rows on AVX2 (16 vector registers): rows only along axes an input is shared on
(`block_facts.shared_axes`), and an extent that fits whole only beside one vector as 7 rows x 1 vector. Checked on
the tiles the default schedule picks and on the built kernel's numbers, no timing."""

import numpy as np
import tvm
from test_winograd import _conv_module, _direct
from tvm import relax


def _blocks(mod):
    from tvm.s_tir import Schedule

    out = {}
    for func in (f for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc)):
        sch = Schedule(func)
        for block in sch.get_child_blocks(sch.get_sblock("root")):
            out[sch.get(block).name_hint] = sch.get(block)
    return out


def _legalized(op, *shapes):
    bb = relax.BlockBuilder()
    xs = [relax.Var(f"x{i}", relax.TensorType(s, "float32")) for i, s in enumerate(shapes)]
    with bb.function("main", xs):
        with bb.dataflow():
            y = bb.emit_output(op(*xs))
        bb.emit_func_output(y)
    return relax.transform.LegalizeOps()(bb.get())


def test_shared_axes_name_the_axes_an_input_stays_put_on():
    from tuner.schedule.block_facts import shared_axes

    conv = _legalized(
        lambda x, w: relax.op.nn.conv2d(x, w, padding=[1, 1], data_layout="NHWC", kernel_layout="OHWI"),
        (1, 14, 14, 32),
        (64, 3, 3, 32),
    )
    (block,) = [b for n, b in _blocks(conv).items() if n.startswith("conv2d")]
    # n, h, w: the weights are shared; the output channel: the input is; the window and channels: neither
    assert shared_axes(block) == [True, True, True, True, False, False, False]
    batched = _legalized(relax.op.matmul, (4, 16, 32), (4, 32, 8))
    (block,) = [b for n, b in _blocks(batched).items() if "matmul" in n]
    assert shared_axes(block) == [False, True, True, False]  # the batch: each has its own B


def test_winograd_product_rows_run_along_the_tiles_on_avx2():
    from tuner.core.target import resolve_target
    from tuner.fusion import get_strategy
    from tuner.pipeline import lower, pack_weights
    from tuner.schedule.default_schedule import heuristic_schedule, schedule_untuned
    from tuner.schedule.recipes import UNSHARED_ROWS

    mod, w, b = _conv_module((1, 14, 14, 64), 64)  # m = 2: 7 x 7 = 49 tiles, 4 x 4 (eps, nu) matrices
    spec = resolve_target("llvm:znver3")
    low = lower(mod, spec, get_strategy("tvm"), layout="nchw")
    (gv,) = [gv for gv, f in low.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
    rows = {}
    for recipe in (None, UNSHARED_ROWS):
        sch = heuristic_schedule(low[gv], spec.tvm_target(), lanes=8, **({"recipe": recipe} if recipe else {}))
        tiles = [
            [int(x) for x in sch.trace.decisions[i]] for i in sch.trace.insts if i.kind.name == "SamplePerfectTile"
        ]
        eps, nu, tile, channel = tiles[:4]  # the product's spatial loops, in order
        rows[recipe] = (eps[2] * nu[2], tile[2], channel[2])
    # (rows along eps and nu, rows along the tiles, vectors side by side): 7 rows sharing each weight vector, where
    # rows along (eps, nu) each loaded their own
    assert rows[None] == (1, 7, 1), rows
    assert rows[UNSHARED_ROWS][0] > 1, rows
    scheduled, _ = schedule_untuned(low, spec)
    ex = tvm.compile(pack_weights(scheduled, spec), target=spec.tvm_target())
    x = np.random.default_rng(1).standard_normal((1, 14, 14, 64)).astype("float32")
    got = relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_allclose(got, np.maximum(_direct(x, w) + b, 0), rtol=1e-4, atol=1e-4)
