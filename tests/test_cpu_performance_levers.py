"""The CPU performance levers, checked on what they produce (no timing: that is scripts/bench.py's job)."""

import dataclasses
import json
import os
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import conv_relu_task, run_cli

from tuner.build.executable import build_prepared, lower_prepared
from tuner.core.errors import TunerError
from tuner.core.target import resolve_target
from tuner.frontend.onnx_model import prepare_model
from tuner.fusion import get_strategy
from tuner.schedule.default_schedule import heuristic_tiles
from tuner.schedule.recipes import (
    ALIASED_ROWS,
    DIVISOR_ROWS,
    EIGHT_ROWS,
    FOUR_ROW_TILES,
    FOUR_VECTOR_ODD_ROWS,
    RECIPE,
    ROWS_OUTER,
    THREE_VECTORS,
    TWO_VECTORS,
)
from tuner.tuning.knobs import Knobs
from tuner.tuning.rpc import evaluator_config, runner


@pytest.fixture(scope="module")
def cnn_build(cnn):
    return build_prepared(prepare_model(cnn), resolve_target("llvm"), get_strategy("tvm"))


def test_no_kernel_is_left_unscheduled(cnn_build):
    import tvm

    funcs = [f for f in cnn_build.fused_mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    assert funcs and all(f.attrs is not None and "tirx.is_scheduled" in f.attrs for f in funcs)
    assert len(cnn_build.default_scheduled) == len(funcs)  # untuned: every kernel on the default schedule
    scripts = "".join(f.script() for f in funcs)
    assert "T.parallel(" in scripts and "T.vectorized(" in scripts


def test_weights_are_packed_at_build_time(cnn_build, transformer):
    """MatMul weights reach their kernels repacked for the tiled schedule ((K, N) -> (N / 2 lanes, K, 2, lanes)), as
    constants folded at build time; only buffers the matmul or conv itself reads are layout-free (biases and
    BatchNorm vectors read by the epilogue are not)."""
    import tvm
    from tvm import relax

    built = build_prepared(prepare_model(transformer), resolve_target("llvm"), get_strategy("tvm"))
    shapes = []

    def visit(expr):
        if isinstance(expr, tvm.ir.expr.Constant) and hasattr(expr, "value") and hasattr(expr.value, "shape"):
            shapes.append(tuple(int(d) for d in expr.value.shape))

    relax.analysis.post_order_visit(built.fused_mod["main"], visit)
    assert any(len(s) >= 3 for s in shapes), shapes  # the model's weights are all 2-D or 1-D
    lowered = lower_prepared(cnn_build.prepared, cnn_build.target, get_strategy("tvm")).mod
    free = [
        list(f.attrs["layout_free_buffers"])
        for f in lowered.functions.values()
        if isinstance(f, tvm.tirx.PrimFunc) and f.attrs is not None and "layout_free_buffers" in f.attrs
    ]
    assert [1] in free and all(len(x) <= 1 for x in free)


def test_packed_and_default_scheduled_package_matches_onnxruntime(cnn, transformer, tmp_path):
    for model in (cnn, transformer):
        out = str(tmp_path / "m.ftpkg")
        assert run_cli("compile", model, "--target", "llvm", "-o", out).returncode == 0
        r = run_cli("run", out, "--verify", model, "--repeat", "1", "--json")
        assert r.returncode == 0 and json.loads(r.stdout)["verify"]["ok"], r.stdout


def test_heuristic_tiles():
    # matmul (i=128, j=384, k=384) on AVX-512: j gets two 16-lane vectors innermost, i an 8-row block (the largest
    # divisor of 128 within the 14 rows that fit beside two vectors in 32 registers), k runs whole outside
    assert heuristic_tiles([[1, 1, 128, 1], [2, 32, 6, 1], [12, 32]], lanes=16, registers=32) == [
        [16, 1, 8, 1],
        [12, 1, 2, 16],
        [384, 1],
    ]
    # AVX2 has 16 registers: at most 6 rows of 2 vectors; 128 rows take the largest divisor, 4
    assert heuristic_tiles([[1, 1, 128, 1], [2, 32, 6, 1], [12, 32]], lanes=8, registers=16)[:2] == [
        [32, 1, 4, 1],
        [24, 1, 2, 8],
    ]
    # NHWC conv on the 7-wide ResNet stage: 7 rows (a 4-row cap left 1), h has no room left
    nhwc = [[1, 1, 1, 1], [7, 1, 1, 1], [7, 1, 1, 1], [512, 1, 1, 1], [3, 1], [3, 1], [512, 1]]
    assert heuristic_tiles(nhwc, lanes=16, cores=2)[:4] == [[1, 1, 1, 1], [1, 7, 1, 1], [1, 1, 7, 1], [16, 1, 2, 16]]
    assert heuristic_tiles(nhwc, lanes=16, recipe=ROWS_OUTER)[1] == [7, 1, 1, 1]  # rows outermost, as before
    # ... with AVX2's 16 registers, 7 rows fit beside one vector only: 7 x 1, not 1 row x 4 vectors
    assert heuristic_tiles(nhwc, lanes=8, registers=16, cores=2)[2:4] == [[1, 1, 7, 1], [64, 1, 1, 8]]
    assert heuristic_tiles(nhwc, lanes=8, registers=16, cores=2, recipe=FOUR_VECTOR_ODD_ROWS)[2:4] == [
        [1, 7, 1, 1],
        [16, 1, 4, 8],
    ]
    # a 3-wide axis leaves rows to the axis before it: 3 x 4 of the 14-row cap (3 x 2 of the earlier 8)
    narrow = [[1, 1, 1, 1], [12, 1, 1, 1], [3, 1, 1, 1], [32, 1, 1, 1]]
    assert heuristic_tiles(narrow, lanes=16)[1:] == [[3, 1, 4, 1], [1, 1, 3, 1], [1, 1, 2, 16]]
    assert heuristic_tiles(narrow, lanes=16, recipe=EIGHT_ROWS)[1] == [6, 1, 2, 1]
    # 24 channels: an 8-lane vector, not a 12-lane one; no side-by-side vectors of partial width
    assert heuristic_tiles([[1, 1, 80, 1], [24, 1, 1, 1]], lanes=16)[1] == [3, 1, 1, 8]
    # an extent without a power-of-two divisor near the lanes takes the largest divisor that fits
    assert heuristic_tiles([[7, 1, 1, 1], [1, 1, 1, 15]], lanes=8, registers=16) == [[1, 1, 7, 1], [3, 1, 1, 5]]
    # NCHW conv with a unit width (magika's 5x1 convs, (1, 512, 508, 1)): the vector goes to the 512 channels,
    # rows to the 508 (its largest divisor up to 8: 4), not 1-lane "vectors" of the unit axis; with only 4 rows,
    # 4 vectors side by side (16 accumulators)
    nchw = [[1, 1, 1, 1], [512, 1, 1, 1], [508, 1, 1, 1], [1, 1, 1, 1], [256, 1], [5, 1], [1, 1]]
    assert heuristic_tiles(nchw, lanes=16)[:4] == [[1, 1, 1, 1], [8, 1, 4, 16], [1, 127, 4, 1], [1, 1, 1, 1]]
    assert heuristic_tiles(nchw, lanes=16, recipe=TWO_VECTORS)[1] == [16, 1, 2, 16]
    # NHWC 1x1 conv to 12 channels on 80x80 (PP-OCRv4 detector): the 12 contiguous channels are the vector (12
    # lanes), not the width, whose vector made every load a gather (1.22 ms against 0.054 in the model)
    twelve = [[1, 1, 1, 1], [80, 1, 1, 1], [80, 1, 1, 1], [12, 1, 1, 1], [1, 1], [1, 1], [48, 1]]
    assert heuristic_tiles(twelve, lanes=16)[3][3] == 12 and heuristic_tiles(twelve, lanes=16)[2][3] == 1
    # 96 channels on the 27-wide stage (Inception v1): 9 rows of 2 vectors. With 8 rows at most (3 of 27), the
    # vectors grow to 2 side by side, not 3 (48 floats wide: LLVM built them lane by lane, 12x slower)
    inception = [[1, 1, 1, 1], [27, 1, 1, 1], [27, 1, 1, 1], [96, 1, 1, 1], [1, 1], [1, 1], [192, 1]]
    assert heuristic_tiles(inception, lanes=16, cores=2)[2:4] == [[3, 1, 9, 1], [3, 1, 2, 16]]
    assert heuristic_tiles(inception, lanes=16, cores=2, recipe=EIGHT_ROWS)[2:4] == [[9, 1, 3, 1], [3, 1, 2, 16]]
    three = dataclasses.replace(EIGHT_ROWS, pow2_vectors=THREE_VECTORS.pow2_vectors)
    assert heuristic_tiles(inception, lanes=16, cores=2, recipe=three)[3] == [2, 1, 3, 16]
    # 1x1 conv over 1024 channels on the 14-wide stage (ResNet-50): input rows 4 KB apart share one L1 set, so 7
    # rows (of the 8 ways), not 14; a 128-row matmul with K = 1024 takes 4 rows and grows to 4 vectors instead
    alias = [[1, 1, 1, 1], [14, 1, 1, 1], [14, 1, 1, 1], [256, 1, 1, 1], [1, 1], [1, 1], [1024, 1]]
    assert heuristic_tiles(alias, lanes=16, cores=2)[2:4] == [[1, 2, 7, 1], [8, 1, 2, 16]]
    assert heuristic_tiles(alias, lanes=16, cores=2, recipe=ALIASED_ROWS)[2] == [1, 1, 14, 1]
    # ... and a conv writing 1024 channels (its residual read on the same rows) as well; a matmul only by its K
    expand = [[1, 1, 1, 1], [14, 1, 1, 1], [14, 1, 1, 1], [1024, 1, 1, 1], [1, 1], [1, 1], [256, 1]]
    assert heuristic_tiles(expand, lanes=16, cores=2)[2][2] == 7
    assert heuristic_tiles(expand, lanes=16, cores=2, recipe=ALIASED_ROWS)[2][2] == 14
    assert heuristic_tiles([[1, 1, 128, 1], [16, 1, 1, 64], [256, 1]], lanes=16)[0][2] == 8
    assert heuristic_tiles([[1, 1, 128, 1], [16, 1, 1, 16], [1024, 1]], lanes=16)[:2] == [[1, 32, 4, 1], [4, 1, 4, 16]]
    assert [RECIPE.aliasing_rows(n) for n in (4096, 8192, 2048, 3072, 1536)] == [7, 7, 14, 28, 56]
    # weights of 1 MiB or more: the column blocks are the parallel loop and the row blocks run inside it, each
    # block of weight columns staying in cache while every row uses it; as long as the parallel loop keeps 4 jobs
    # per core (a 1536-column matmul, 48 blocks: 16 cores keep the rows outside)
    wide = [[1, 1, 128, 1], [2, 32, 24, 1], [12, 32]]  # 384 x 1536 weights, 2.4 MB
    assert heuristic_tiles(wide, lanes=16, cores=2)[:2] == [[1, 16, 8, 1], [48, 1, 2, 16]]
    assert heuristic_tiles(wide, lanes=16, cores=16)[0] == [16, 1, 8, 1]
    # 64 channels (2 blocks) on the 56-wide stage with 3x3x64x64 weights scaled up: the 56 rows of h stay parallel,
    # only the 4 blocks of 14 rows of w move inside
    stage1 = [[1, 1, 1, 1], [56, 1, 1, 1], [56, 1, 1, 1], [64, 1, 1, 1], [3, 1], [3, 1], [64 * 8, 1]]
    assert heuristic_tiles(stage1, lanes=16, cores=2)[1:4] == [[56, 1, 1, 1], [1, 4, 14, 1], [2, 1, 2, 16]]
    # the 14-wide stage (3x3x256x256): all 14 rows beside 2 vectors, 28 accumulators (8 rows: 7, 14 accumulators)
    stage3 = [[1, 1, 1, 1], [14, 1, 1, 1], [14, 1, 1, 1], [256, 1, 1, 1], [3, 1], [3, 1], [256, 1]]
    assert heuristic_tiles(stage3, lanes=16, cores=2)[2] == [1, 1, 14, 1]
    assert heuristic_tiles(stage3, lanes=16, cores=2, recipe=EIGHT_ROWS)[2] == [1, 2, 7, 1]
    # small weights (a 1x1 conv from 64 to 256 channels, 64 KB) keep the rows outermost: moving them inside read the
    # input and the residual once per column block (ResNet-50's stage 1: 0.45 -> 0.62 ms)
    small = [[1, 1, 1, 1], [56, 1, 1, 1], [56, 1, 1, 1], [256, 1, 1, 1], [1, 1], [1, 1], [64, 1]]
    assert heuristic_tiles(small, lanes=16, cores=2)[1] == [56, 1, 1, 1]
    # one row (a batch-1 dense layer): 4 vectors of AVX2's 16 registers; AVX2 with 4 rows keeps 2 (4 x 3 + 3 > 12)
    assert heuristic_tiles([[1, 1, 1, 1], [64, 1, 1, 1], [512, 1]], lanes=8, registers=16)[1] == [2, 1, 4, 8]
    # a 13-wide stage (SqueezeNet, Inception v1): no divisor of 13 near the 8-row cap but 1, so all 13 rows while
    # the registers hold them (13 x 2 vectors: 26 accumulators; the earlier recipe: 1 row x 4 vectors); the
    # classifier conv's 1000 channels (8-lane vectors): 13 accumulators, not 1. AVX2's 16 registers keep the old tile
    odd = [[1, 1, 1, 1], [13, 1, 1, 1], [13, 1, 1, 1], [192, 1, 1, 1], [1, 1], [1, 1], [480, 1]]
    assert heuristic_tiles(odd, lanes=16, cores=2)[2:4] == [[1, 1, 13, 1], [6, 1, 2, 16]]
    divisor_rows = dataclasses.replace(EIGHT_ROWS, whole_odd_rows=DIVISOR_ROWS.whole_odd_rows)
    assert heuristic_tiles(odd, lanes=16, recipe=divisor_rows)[2:4] == [[13, 1, 1, 1], [3, 1, 4, 16]]
    assert heuristic_tiles(odd, lanes=8, registers=16)[2:4] == [[13, 1, 1, 1], [6, 1, 4, 8]]
    classifier = [[1, 1, 1, 1], [13, 1, 1, 1], [13, 1, 1, 1], [1000, 1, 1, 1], [1, 1], [1, 1], [512, 1]]
    assert heuristic_tiles(classifier, lanes=16, cores=2)[2:4] == [[1, 1, 13, 1], [125, 1, 1, 8]]
    # the recipe used before: 4 rows of one vector
    four = heuristic_tiles([[1, 1, 128, 1], [2, 32, 6, 1], [12, 32]], lanes=16, recipe=FOUR_ROW_TILES)
    assert four[:2] == [[32, 1, 4, 1], [24, 1, 1, 16]]


def test_search_iterations_are_sized_to_the_budget():
    from tuner.tuning.knobs import UNLIMITED, Knobs, per_iteration

    assert per_iteration(Knobs(), UNLIMITED, 5) == 32  # time is the budget: large batches amortise the search
    assert per_iteration(Knobs(), 64, 8) == 8  # a small trial budget still reaches every kernel
    assert per_iteration(Knobs(), 600, 20) == 30
    assert per_iteration(Knobs(), 10_000, 3) == 32
    assert per_iteration(Knobs(num_trials_per_iter=4), UNLIMITED, 5) == 4  # --trials-per-iter wins


def test_deadline_stops_when_the_next_batch_would_end_past_the_budget():
    """Batches predicted at 50 s that take 10 s against a 100 s budget: the first calibrates the prediction, and the
    run ends after the batch that leaves less than one batch of time (at 90 s), not after the one that crosses the
    budget (at 100 s or later)."""
    from tuner.tuning.deadline import Deadline

    now = [0.0]
    d = Deadline(100.0, clock=lambda: now[0])
    assert d.plan([{512: 50.0, 64: 8.0}] * 4) == ([0], 512)  # not calibrated: the first round learns on one task
    d.start_round([50.0])
    ends = []
    while not d.expired():
        now[0] += 10.0
        d.batch_done()
        ends.append(now[0])
    assert ends[-1] == 90.0 and d.scale == 0.2
    # a slow batch raises the estimate, smoothed: one 50 s batch after 10 s ones expects 30 s next
    d2 = Deadline(1000.0, clock=lambda: now[0])
    d2.start_round([10.0])
    for took in (10.0, 10.0, 50.0):
        now[0] += took
        d2.batch_done()
    assert d2.scale == 3.0


def test_deadline_shrinks_the_search_to_fit_and_starts_nothing_that_cannot():
    """A batch whose search at the full population would overrun gets a smaller population; when not even the
    smallest fits, a cheaper task's batch may use the time left, and when none fits no round starts (a Winograd
    conv's first batch at population 512 ran a 40 s budget to 86 s)."""
    from tuner.tuning.deadline import Deadline

    now = [0.0]
    d = Deadline(40.0, clock=lambda: now[0])
    winograd = {512: 82.0, 256: 49.0, 128: 33.0, 64: 24.0}
    direct = {512: 30.0, 256: 22.0, 128: 18.0, 64: 16.0}
    assert d.plan([winograd, direct]) == ([0], 128)
    now[0] = 20.0
    assert d.plan([winograd, direct]) == ([1], 128)  # the time left still fits a cheaper task's batch
    now[0] = 30.0
    assert d.plan([winograd, direct])[0] == []


def test_deadline_reads_a_round_robin_and_sizes_rounds_to_the_time_left():
    """MetaSchedule's gradient scheduler runs one batch of every task in a round before it joins any, so the
    first measure callback of a 4-task round comes after 4 batches and the next three at once."""
    from tuner.tuning.deadline import Deadline

    now = [0.0]
    d = Deadline(200.0, clock=lambda: now[0])
    d.start_round([10.0] * 4)
    now[0] = 80.0
    d.batch_done()  # 4 batches of 20 s, predicted at 10 s
    for _ in range(3):
        now[0] += 0.1
        d.batch_done()  # the burst: batches that already ran
    assert d.scale == 2.0
    now[0] += 20.0
    d.batch_done()  # then one batch per callback
    assert d.scale == 2.0
    assert d.plan([{512: 10.0}] * 4) == ([0, 1, 2, 3], 512)  # 99.7 s left: four batches of 20 s
    now[0] = 150.0
    assert d.plan([{512: 10.0}] * 4) == ([0, 1], 512) and d.plan([{512: 10.0}]) == ([0], 512)
    now[0] = 195.0
    assert d.plan([{512: 10.0}] * 4)[0] == [] and d.expired()


def test_deadline_judges_the_next_batch_by_the_costliest_of_the_round():
    """The task scheduler picks the next task after the check, so the next batch may be the round's costliest: a
    round of a Winograd conv and three direct ones ran a 10-minute budget 32 s over when judged by their mean.
    Each batch is learned against its own task's prediction."""
    from tuner.tuning.deadline import Deadline

    now = [0.0]
    d = Deadline(600.0, clock=lambda: now[0])
    d.start_round([80.0, 10.0, 10.0, 10.0])
    now[0] = 110.0
    for task_id in range(4):  # the round robin's burst
        d.batch_done(task_id)
    assert d.scale == 1.0
    now[0] = 530.0  # 70 s left: the mean batch (27.5 s) fits, the Winograd one (80 s) does not
    assert d.expired()
    d2 = Deadline(1000.0, clock=lambda: now[0])
    now[0] = 0.0
    d2.start_round([80.0, 10.0])
    now[0] = 90.0
    d2.batch_done(0)
    d2.batch_done(1)
    now[0] = 110.0
    d2.batch_done(1)  # the direct conv's batch took 20 s against 10 predicted
    assert d2.scale == 1.5


def test_search_cost_is_probed_per_task(cnn):
    """Each task's search cost per candidate is measured on its own design space (no timing asserted beyond its
    being a real, small duration), and predicts a batch that grows with the population."""
    from tvm.s_tir import meta_schedule as ms

    from tuner.tuning.search_cost import batch_seconds, candidate_seconds
    from tuner.tuning.spaces import design_space

    spec = resolve_target("llvm")
    lowered = lower_prepared(prepare_model(cnn), spec, get_strategy("tvm"))
    task = max(ms.relax_integration.extract_tasks(lowered.mod, spec.tvm_target()), key=lambda t: "conv" in t.task_name)
    cost = candidate_seconds(task, design_space(spec, lowered.mod))
    assert 0 < cost < 5
    assert batch_seconds(cost, 512, 32, 2) > batch_seconds(cost, 64, 32, 2) > 32 * 0.3


def test_time_budget_stops_inside_a_round_and_runner_gets_the_threads(mlp, tmp_path):
    """A 1-second budget: the run stops before any search batch that would overrun it (the default schedules are
    measured first, a record each), long before the round's trial count, and the
    database records the thread count the candidates were measured with, and the cache mode asked for."""
    db = str(tmp_path / "db")
    r = run_cli(
        "tune-model",
        mlp,
        "--input-shape",
        "x:16x32",
        "--target",
        "llvm",
        "--time-budget",
        "1s",
        "--measure-cache",
        "flush",
        "--db",
        db,
        "-o",
        str(tmp_path / "m.ftpkg"),
        "--json",
        "--no-verify",
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    tunable = [t for t in doc["tasks"] if not t["skipped"]]
    round_trials = max(8 * 4 * len(tunable), 16)
    assert doc["stopped"] == "time" and 0 < doc["trials"] < round_trials
    manifest = json.load(open(os.path.join(db, "manifest.json")))
    assert manifest["num_threads"] == resolve_target("llvm").config["num-cores"]
    # every tunable task got its default schedule measured first: a record each
    assert all(t["trials"] >= 1 and t["best_ms"] for t in tunable)
    # timed as a model runs them: one call per cache flush, `measure_repeats` of them per candidate
    assert manifest["measure_cache"] == "flush"
    with open(os.path.join(db, "database_tuning_record.json")) as f:
        timings = [json.loads(line)[1][1] for line in f if line.strip()]
    assert timings and all(len(t) == Knobs().measure_repeats for t in timings)


def test_candidates_can_be_timed_with_cold_caches_on_cpu():
    """With `flush`, CPU candidates are timed one call after each flush of their weights and output (the input stays
    warm, as the kernel before it in the model just wrote it); GPUs and `warm` (the default) keep MetaSchedule's
    back-to-back timing."""
    flushed = evaluator_config(Knobs(measure_cache="flush"), gpu=False)
    assert flushed.enable_cpu_cache_flush and flushed.number == 1 and flushed.min_repeat_ms == 0
    assert flushed.repeat == Knobs().measure_repeats
    assert evaluator_config(Knobs(measure_cache="flush"), gpu=True) is None
    assert evaluator_config(Knobs(), gpu=False) is None
    assert runner(Knobs(measure_cache="flush")).evaluator_config.enable_cpu_cache_flush
    with pytest.raises(TunerError, match="measure cache 'cold'"):
        evaluator_config(Knobs(measure_cache="cold"), gpu=False)


def test_untuned_default_schedule_is_deterministic(cnn):
    a = build_prepared(prepare_model(cnn), resolve_target("llvm"), get_strategy("tvm"))
    b = build_prepared(prepare_model(cnn), resolve_target("llvm"), get_strategy("tvm"))
    import tvm

    tvm.ir.assert_structural_equal(a.fused_mod, b.fused_mod)
    assert np.array_equal(a.prepared.shapes.get("x", ()), b.prepared.shapes.get("x", ()))


def _conv_relu_task():
    """An NHWC 3x3 conv with a bias + ReLU epilogue, as one fused kernel."""
    return conv_relu_task((1, 14, 14, 128), (256, 3, 3, 128), padding=1)


def test_default_schedule_unrolls_to_a_fixed_depth():
    """The default schedule's unroll depth is the recipe's (64), not MetaSchedule's draw from 0/16/64/512: with the
    draw, seeds give this conv different depths, 0 among them for some kernels (loops left to LLVM)."""
    import re

    from tuner.core.target import vector_lanes
    from tuner.schedule.default_schedule import heuristic_schedule
    from tuner.schedule.recipes import DRAWN_UNROLL

    task, spec = _conv_relu_task()
    func, target, lanes = task.dispatched[0]["main"], spec.tvm_target(), vector_lanes(spec)

    def depths(recipe, seed):
        script = heuristic_schedule(func, target, lanes, seed=seed, recipe=recipe).mod.script()
        return set(re.findall(r'"pragma_auto_unroll_max_step": (\d+)', script))

    assert all(depths(RECIPE, seed) == {"64"} for seed in range(4))
    drawn = set().union(*(depths(DRAWN_UNROLL, seed) for seed in range(8)))
    assert len(drawn) > 1, drawn


def test_the_epilogue_runs_on_each_output_tile():
    """A conv's bias + ReLU run on each output tile right after its reduction, as one block inside the tiled loops,
    as in the sketches of TVM's llvm space that the search draws from. With EPILOGUE_APART (tiling before inlining:
    the bias add alone went to the tile, then was inlined into the ReLU at the top level) they are a second pass
    over the whole output. The results are the same either way: the whole-model tests verify every package."""
    from tvm.s_tir import meta_schedule as ms

    from tuner.core.target import vector_lanes
    from tuner.schedule.default_schedule import heuristic_schedule
    from tuner.schedule.recipes import EPILOGUE_APART

    task, spec = _conv_relu_task()
    func, target, lanes = task.dispatched[0]["main"], spec.tvm_target(), vector_lanes(spec)

    def epilogue_loops(sch):
        (name,) = [b for b in ("T_add", "compute") if f'sblock("{b}")' in sch.mod.script()]  # the rest inlined
        return len(sch.get_loops(sch.get_sblock(name)))

    assert epilogue_loops(heuristic_schedule(func, target, lanes, recipe=EPILOGUE_APART)) == 2  # parallel, vector
    assert epilogue_loops(heuristic_schedule(func, target, lanes)) > 2
    tvm_space = ms.space_generator.PostOrderApply(sch_rules="llvm", postprocs="llvm", mutator_probs="llvm")
    ctx = ms.TuneContext(mod=task.dispatched[0], target=target, space_generator=tvm_space, num_threads=1)
    assert max(epilogue_loops(s) for s in ctx.generate_design_space()) > 4  # under the 4 spatial outer loops


def _instructions(trace) -> list[str]:
    """The trace's transformations and draws before its post-processing (a sketch has none), without the queries
    (GetLoops, GetSBlock...) that looking at a schedule appends."""
    kinds = [inst.kind.name for inst in trace.insts]
    kinds = kinds[: kinds.index("EnterPostproc")] if "EnterPostproc" in kinds else kinds
    return [k for k in kinds if not k.startswith("Get")]


def test_the_default_schedule_is_a_point_of_the_tuning_space():
    """Issue 39, lever 3: the search starts at the default schedule and explores around it. The conv's default is
    one of the tuning space's sketches with its draws set (same instructions, in order); its trace, replayed as
    MetaSchedule replays a database record, is the default itself; and the search's tile-size mutator moves it to
    a neighbouring point that schedules the same kernel. In TVM's llvm space, which inlines after tiling, it was no
    sketch at all."""
    import tvm
    import tvm_ffi
    from tvm.s_tir import Schedule
    from tvm.s_tir import meta_schedule as ms

    from tuner.core.target import vector_lanes
    from tuner.schedule.default_schedule import _postprocs, heuristic_schedule
    from tuner.tuning.spaces import bare_context, with_design_space

    task, spec = _conv_relu_task()
    func, target, lanes = task.dispatched[0]["main"], spec.tvm_target(), vector_lanes(spec)
    default = heuristic_schedule(func, target, lanes)
    state = SimpleNamespace(skipped=None, note=None, space=None)
    ((_, chosen),) = with_design_space([(task, state)], spec, None)
    ctx = bare_context(task, chosen.space)
    sketches = ctx.generate_design_space()
    assert _instructions(default.trace) in [_instructions(sk.trace) for sk in sketches]
    tvm_space = ms.space_generator.PostOrderApply(sch_rules="llvm", postprocs="llvm", mutator_probs="llvm")
    llvm_sketches = bare_context(task, tvm_space).generate_design_space()
    assert _instructions(default.trace) not in [_instructions(sk.trace) for sk in llvm_sketches]

    def replay(trace):
        sch = Schedule(task.dispatched[0])
        trace.apply_to_schedule(sch, remove_postproc=True)
        sch.enter_postproc()
        assert all(p.apply(sch) for p in _postprocs(lanes))
        return sch

    tvm.ir.assert_structural_equal(replay(default.trace).mod, default.mod)
    mutator = ms.mutator.MutateTileSize()
    mutator._initialize_with_tune_context(ctx)
    neighbours = [mutator.apply(default.trace) for _ in range(8)]
    moved = [t for t in neighbours if t is not None and str(t) != str(default.trace)]
    assert moved and _instructions(moved[0]) == _instructions(default.trace)
    assert not tvm_ffi.structural_equal(replay(moved[0]).mod, default.mod)


def test_seeding_goes_heaviest_first_and_stops_at_the_time_budget(monkeypatch):
    """The default schedules are measured a chunk at a time, heaviest kernels first; the first chunk always runs,
    and no later one starts once it would end past the budget."""
    import time
    from types import SimpleNamespace

    from tuner.tuning import seed
    from tuner.tuning.deadline import Deadline

    chunks = []

    def measure(chunk, *args):
        chunks.append([st.name for _, st in chunk])
        time.sleep(0.05)
        return len(chunk)

    monkeypatch.setattr(seed, "_seed_chunk", measure)
    states = [
        SimpleNamespace(name=f"k{i}", trials=0, flops=float(i), weight=1, model_ms=None, floor_ms=None)
        for i in range(20)
    ]
    tried = SimpleNamespace(name="tried", trials=3, flops=1e9, weight=1, model_ms=None, floor_ms=None)
    tunable = [(None, st) for st in [*states, tried]]
    assert seed.seed_records(tunable, None, None, None, None) == 20
    assert chunks[0] == [f"k{i}" for i in range(19, 11, -1)] and len(chunks) == 3  # tried tasks are not seeded
    chunks.clear()
    assert seed.seed_records(tunable, None, None, None, None, Deadline(time.time() + 0.07)) == seed.SEED_CHUNK
    assert len(chunks) == 1


def test_a_seed_timed_far_slower_alone_than_in_the_model_is_measured_again(monkeypatch):
    """The seed (the default schedule's record) is the line every candidate must beat; a disturbed measurement
    (2x on a shared machine) made the search keep records slower than the default. A seed whose kernel ran alone
    over 1.5x slower than in the model is timed again; the others are not."""
    from tuner.tuning import seed
    from tuner.tuning.state import TaskState

    measured = []
    monkeypatch.setattr(seed, "_seed_chunk", lambda chunk, *a: measured.extend(st.name for _, st in chunk))
    disturbed = TaskState("conv_disturbed", 1e9, 4, "a", trials=1, best_ms=0.95, default_ms=0.95, model_ms=2.0)
    fine = TaskState("conv_fine", 1e9, 1, "b", trials=1, best_ms=0.5, default_ms=0.5, model_ms=0.6)
    unprofiled = TaskState("conv_unprofiled", 1e9, 1, "c", trials=1, best_ms=0.5, default_ms=0.5)
    again = seed.remeasure_suspect_seeds([(None, st) for st in (disturbed, fine, unprofiled)], None, None, None, None)
    assert measured == ["conv_disturbed"] and [st.name for _, st in again] == measured
    assert disturbed.in_model_factor == pytest.approx(2.0 / 3.8)
