"""Warm start from a curated schedules/ library: curate, then tune-model starts from its records and cost model."""

import json
import os

import pytest
from conftest import run_cli

from tuner.core.errors import TunerError
from tuner.core.target import resolve_target
from tuner.tuning.database import store as D
from tuner.tuning.database.warm_start import resolve_schedules


def _best(db_dir):
    """{workload hash: best mean seconds} of a database."""
    import tvm_ffi

    db, _, _ = D.open_database(db_dir)
    best = {}
    for rec in db.get_all_tuning_records():
        if rec.run_secs and min(float(x) for x in rec.run_secs) < 1e9:  # 1e10: a failed measurement
            h = str(tvm_ffi.structural_hash(rec.workload.mod))
            s = sum(float(x) for x in rec.run_secs) / len(rec.run_secs)
            best[h] = min(best.get(h, s), s)
    return best


def test_curate_then_tune_starts_from_the_library(tuned_mlp, mlp, tmp_path):
    summary, db, _ = tuned_mlp
    key = summary["target"]
    lib = tmp_path / "schedules"
    r = run_cli("db", "curate", db, "-o", str(lib / key), "--top-k", "1", "--json")
    assert r.returncode == 0, r.stderr
    curated = json.loads(r.stdout)
    assert curated["target_key"] == key and curated["workloads"] > 0
    assert curated["records"] == curated["workloads"]  # top-1 each
    assert curated["bytes"] < 200_000  # xz-compressed: small enough to commit
    import tempfile

    from tuner.tuning.database.warm_start import _opened

    with tempfile.TemporaryDirectory() as tmp:
        assert _best(_opened(str(lib / key), tmp)) == _best(db)  # the best of each kernel, nothing else

    # re-curating a library with new databases keeps its records, and leaves the library's files as they were
    before = sorted(os.listdir(lib / key))
    r = run_cli("db", "curate", str(lib / key), db, "-o", str(tmp_path / "again"), "--top-k", "1", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["records"] == curated["records"] and sorted(os.listdir(lib / key)) == before
    # the manifest names the sources as given, not the temporary copies the library was expanded into
    assert D.read_manifest(str(tmp_path / "again"))["curated_from"] == sorted([str(lib / key), db])

    # auto finds the library through FUSION_TUNER_SCHEDULES; 2 trials cannot re-find what 16 found
    out = tmp_path / "warm"
    out.mkdir()
    r = run_cli(
        "tune-model",
        mlp,
        "--input-shape",
        "x:16x32",
        "--target",
        "llvm",
        "--trials",
        "2",
        "--db",
        str(out / "db"),
        "-o",
        str(out / "m.ftpkg"),
        "--json",
        env={"FUSION_TUNER_SCHEDULES": str(lib)},
    )
    assert r.returncode == 0, r.stderr
    summary_warm = json.loads(r.stdout)
    warm = summary_warm["warm_start"]
    assert summary_warm["shared_workloads"] == 0  # the library's kernels are the warm start, not "other models"
    assert warm["source"] == str(lib / key)
    tuned_tasks = {t["workload_hash"] for t in summary["tasks"] if t["trials"]}
    assert warm["workloads"] == len(tuned_tasks) == curated["workloads"]
    assert warm["cost_model"] == os.path.exists(os.path.join(db, D.COST_MODEL))
    best_warm = _best(str(out / "db"))
    for h, s in _best(db).items():
        assert best_warm[h] <= s  # started from the library's best: never worse


def test_schedules_none_a_database_and_other_targets(tuned_mlp, tmp_path):
    _, db, _ = tuned_mlp
    spec = resolve_target("llvm")
    assert resolve_schedules("none", spec) is None
    assert resolve_schedules("auto", spec) is None  # conftest points auto at a folder that does not exist
    assert resolve_schedules(db, spec) == db  # a database folder itself
    # a library holds one subfolder per target key: another machine's key is never used
    os.makedirs(tmp_path / "lib" / "llvm-some-other-cpu-2c")
    with pytest.raises(TunerError, match=spec.key):
        resolve_schedules(str(tmp_path / "lib"), spec)


def test_the_repository_library_is_found_and_a_same_isa_key_stands_in(monkeypatch):
    """`auto` finds schedules/ beside the package (not inside it), and a CPU without a library of its own takes
    the library of a CPU with the same vector features (an AVX2 Intel core Zen 3's)."""
    from tuner.core.target import required_cpu_features
    from tuner.tuning.database.warm_start import LIBRARY

    monkeypatch.delenv("FUSION_TUNER_SCHEDULES", raising=False)
    assert os.path.isdir(os.path.join(LIBRARY, "llvm-rocketlake-2c")), LIBRARY
    from tuner.core.target import host_cpu_flags

    runs_avx512 = set(required_cpu_features("rocketlake")) <= set(host_cpu_flags())
    found = resolve_schedules("auto", resolve_target("llvm:emeraldrapids"))
    if runs_avx512:
        assert found is not None and os.path.basename(found) in ("llvm-rocketlake-2c", "llvm-znver4-2c")
    else:  # an AVX-512 library is no use to a host that cannot run its schedules
        assert found is None
    avx2 = resolve_schedules("auto", resolve_target("llvm:znver3"))  # its own library (2026-12-07)
    assert avx2 is not None and os.path.basename(avx2) == "llvm-znver3-2c"
    if set(required_cpu_features("haswell")) <= set(host_cpu_flags()):  # another AVX2 CPU stands in for it
        assert resolve_schedules("auto", resolve_target("llvm:haswell")) == avx2
