"""The default schedule's neighbours (tuning/neighbours.py): the template's knobs moved one at a time, each a
whole schedule by the same rules. No timing here: which neighbour wins is measured by tune-model."""

import numpy as np
from conftest import conv_relu_task


def test_neighbours_are_other_programs_that_compute_the_same_and_replay_from_records():
    """A conv with a bias + ReLU epilogue: several knobs make a program other than the default and than each
    other; each computes what the default computes, and its trace read back from JSON (a database record) gives
    the same program again."""
    import tvm
    from tvm.s_tir import Schedule
    from tvm.s_tir.schedule import Trace

    from tuner.core.ir import buffer_shapes, same_program
    from tuner.core.target import vector_lanes
    from tuner.schedule.default_schedule import heuristic_schedule
    from tuner.tuning.neighbours import neighbour_schedules

    task, spec = conv_relu_task((1, 28, 28, 64), (128, 3, 3, 64), padding=1)
    mod, target, lanes = task.dispatched[0], spec.tvm_target(), vector_lanes(spec)
    default = heuristic_schedule(mod["main"], target, lanes)
    found = neighbour_schedules(mod["main"], target, lanes)
    labels = [label for label, _ in found]
    assert len(found) >= 3 and "unroll 16" in labels, labels
    programs = [default.mod["main"]] + [sch.mod["main"] for _, sch in found]
    for i, a in enumerate(programs):
        assert not any(same_program(a, b) for b in programs[i + 1 :])
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(shape).astype("float32") for shape in buffer_shapes(mod["main"].script())]

    def run(m):
        lib = tvm.compile(m, target=target)
        bufs = [tvm.runtime.tensor(a) for a in args[:-1]] + [tvm.runtime.tensor(np.zeros_like(args[-1]))]
        lib["main"](*bufs)
        return bufs[-1].numpy()

    want = run(default.mod)
    for label, sch in found:
        np.testing.assert_allclose(run(sch.mod), want, rtol=1e-4, atol=1e-4, err_msg=label)
        replayed = Schedule(mod)
        Trace.apply_json_to_schedule(sch.trace.as_json(), replayed)
        assert same_program(replayed.mod["main"], sch.mod["main"]), label


def test_neighbours_go_to_the_heaviest_kernels_whose_only_record_is_their_seed():
    """A resumed run does not measure again the neighbours its first run committed: only kernels seeded in this
    run (a seed measured twice, as a disturbed one is, included) get theirs."""
    from types import SimpleNamespace

    from tuner.tuning.neighbours import MAX_TASKS, neighbour_tasks

    def state(name, trials, model_ms, default_ms):
        return SimpleNamespace(
            name=name, trials=trials, flops=1e6, weight=1, model_ms=model_ms, floor_ms=0.0, default_ms=default_ms
        )

    fresh = [(f"t{i}", state(f"t{i}", 1 + i % 2, float(i), 0.1)) for i in range(MAX_TASKS + 3)]
    searched = ("searched", state("searched", 9, 1000.0, None))
    picked = [task for task, _ in neighbour_tasks([searched, *fresh], 0.1)]
    assert picked == [f"t{i}" for i in range(MAX_TASKS + 2, 2, -1)]
