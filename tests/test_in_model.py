"""Tuned records checked in the model (tuner/tuning/in_model.py): a record that is slower in the model than the
kernel's default schedule stays in the database and out of the package."""

import numpy as np
import pytest

from tuner.build.executable import build_lowered, lower_prepared
from tuner.build.in_model import _kernels_with_records, slower_in_model
from tuner.core.ir import flops
from tuner.core.target import resolve_target
from tuner.frontend.onnx_model import prepare_model
from tuner.fusion import get_strategy
from tuner.tuning import Knobs


@pytest.fixture()
def lucky_naive_record(cnn, tmp_path):
    """A database whose only record gives the heaviest kernel of the CNN its unscheduled loop nest (serial, scalar),
    as if a lucky measurement had timed it at 1 ns: (lowered model, database folder)."""
    from tvm.s_tir import Schedule
    from tvm.s_tir import meta_schedule as ms

    from tuner.tuning.database.store import new_manifest, open_database, write_manifest

    spec = resolve_target("llvm")
    lowered = lower_prepared(prepare_model(cnn), spec, get_strategy("tvm"))
    tasks = ms.relax_integration.extract_tasks(lowered.mod, spec.tvm_target())
    task = max(tasks, key=lambda t: flops(t.dispatched[0]["main"]))
    db_dir = str(tmp_path / "db")
    db, _, _ = open_database(db_dir, spec, create=True, writer=True)
    write_manifest(db_dir, new_manifest(spec, "tvm"))
    naive = Schedule(task.dispatched[0]["main"])
    naive.get_child_blocks(naive.get_sblock("root"))  # the database skips a record whose trace is empty
    workload = db.commit_workload(task.dispatched[0])
    db.commit_tuning_record(ms.database.TuningRecord(naive.trace, workload, run_secs=[1e-9], target=spec.tvm_target()))
    return lowered, db_dir


def test_a_record_slower_in_the_model_is_found_and_left_out(lucky_naive_record):
    lowered, db_dir = lucky_naive_record
    tuned, default = build_lowered(lowered, db_dir), build_lowered(lowered)
    [kernel] = _kernels_with_records(tuned)
    feed = [np.random.default_rng(0).standard_normal(lowered.prepared.shapes[i.name]).astype("float32")
            for i in lowered.prepared.inputs]  # fmt: skip
    slower = slower_in_model(tuned, default, feed)
    assert list(slower) == [kernel] and slower[kernel][0] > slower[kernel][1], slower
    rebuilt = build_lowered(lowered, db_dir, drop_records={kernel})
    assert kernel in rebuilt.default_scheduled and kernel in rebuilt.db_info["untuned"]
    assert rebuilt.db_info["applied"] == tuned.db_info["applied"] - 1
    # the default build has no record to check
    assert slower_in_model(default, default, feed) == {}


def test_tune_model_packages_the_default_where_a_record_loses_in_the_model(cnn, lucky_naive_record, tmp_path):
    from tuner.commands.tune_model import tune_model

    _, db_dir = lucky_naive_record
    out = str(tmp_path / "cnn.ftpkg")
    summary = tune_model(cnn, out, target="llvm", knobs=Knobs(trials=0), db=db_dir, schedules="none")
    [times] = summary["records_left_out"].values()
    assert times["tuned_us"] > times["default_us"], summary
    assert summary["applied"] == 0 and summary["verify"]["ok"], summary
    assert set(summary["records_left_out"]) <= set(summary["default_schedules"])


def test_a_record_that_is_the_default_schedule_counts_as_default(cnn, tmp_path):
    """The seed record (the default schedule, measured) that no candidate beat runs the same program as the
    default: not counted as a tuned kernel (a 2-minute run said "tuned kernels applied: 57 of 79" when every
    kernel had only its seed) and not checked in the model against itself (profile noise left such kernels out
    as "slower than the default")."""
    from tvm.s_tir import meta_schedule as ms

    from tuner.core.target import vector_lanes
    from tuner.schedule.default_schedule import heuristic_schedule
    from tuner.tuning.database.store import new_manifest, open_database, write_manifest

    spec = resolve_target("llvm")
    lowered = lower_prepared(prepare_model(cnn), spec, get_strategy("tvm"))
    task = max(ms.relax_integration.extract_tasks(lowered.mod, spec.tvm_target()), key=lambda t: t.weight)
    db_dir = str(tmp_path / "db")
    db, _, _ = open_database(db_dir, spec, create=True, writer=True)
    write_manifest(db_dir, new_manifest(spec, "tvm"))
    seed = heuristic_schedule(task.dispatched[0]["main"], spec.tvm_target(), vector_lanes(spec))
    workload = db.commit_workload(task.dispatched[0])
    db.commit_tuning_record(ms.database.TuningRecord(seed.trace, workload, run_secs=[1e-4], target=spec.tvm_target()))
    build = build_lowered(lowered, db_dir)
    assert build.db_info["applied"] == 0 and len(build.db_info["default_records"]) == 1
    assert _kernels_with_records(build) == set()
