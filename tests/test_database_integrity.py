"""A tuning database is never damaged by reading it, and never applied when its target is unknown
(issue 16, defects 1 and 2). Each test failed on the code before the fix."""

import json
import os
import shutil

import pytest
from conftest import run_cli

from tuner.tuning.database import store as D

SHAPE = ["--input-shape", "x:16x32"]


@pytest.fixture(scope="module")
def small_db(tuned_mlp):
    return tuned_mlp[1]


def _files(db):
    return {n: open(os.path.join(db, n), "rb").read() for n in (D.WORKLOADS, D.RECORDS)}


def test_garbage_workload_line_is_refused_and_nothing_is_rewritten(small_db, mlp, tmp_path):
    db = shutil.copytree(small_db, tmp_path / "db")
    path = os.path.join(db, D.WORKLOADS)
    lines = open(path).read().splitlines()
    lines.insert(0, "this is not json")
    open(path, "w").write("\n".join(lines) + "\n")
    before = _files(db)
    r = run_cli("db", "show", str(db))
    assert r.returncode == 2 and "line 1 is damaged" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("compile", mlp, *SHAPE, "--target", "llvm", "--db", str(db), "-o", str(tmp_path / "o.ftpkg"))
    assert r.returncode == 2 and "line 1 is damaged" in r.stderr
    assert _files(db) == before  # no record lost, none re-pointed


def test_lines_that_are_not_records_are_skipped_by_readers_and_kept_on_disk(small_db, mlp, tmp_path):
    db = shutil.copytree(small_db, tmp_path / "db")
    n = D.show(str(db))["records"]
    with open(os.path.join(db, D.RECORDS), "a") as f:
        f.write(json.dumps({"not": "a record"}) + "\n")
        f.write(json.dumps([-1, [[], [0.001]]]) + "\n")
        f.write(json.dumps([999, [[], [0.001]]]) + "\n")
    before = _files(db)
    r = run_cli("db", "show", str(db), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["records"] == n and any("not shaped like a record" in x for x in doc["repairs"])
    assert any("workload that does not exist" in x for x in doc["repairs"])
    r = run_cli("compile", mlp, *SHAPE, "--target", "llvm", "--db", str(db), "-o", str(tmp_path / "o.ftpkg"), "--json")
    assert r.returncode == 0, r.stderr
    db_info = json.loads(r.stdout)["tuning_db"]
    assert db_info["applied"] + len(db_info["default_records"]) >= 1
    assert _files(db) == before


def test_records_without_a_manifest_are_not_applied(small_db, mlp, tmp_path):
    db = shutil.copytree(small_db, tmp_path / "db")
    os.unlink(os.path.join(db, D.MANIFEST))
    r = run_cli("compile", mlp, *SHAPE, "--target", "cuda:sm_90", "--db", str(db), "-o", str(tmp_path / "o.ftpkg"))
    assert r.returncode == 2 and "no manifest.json" in r.stderr


def test_manifest_is_written_before_any_record(mlp, tmp_path):
    """With a budget of nothing, no record is written, and the manifest (target first) already is."""
    db = str(tmp_path / "db")
    r = run_cli(
        "tune-model",
        mlp,
        *SHAPE,
        "--target",
        "llvm",
        "--trials",
        "0",
        "--db",
        db,
        "-o",
        str(tmp_path / "o.ftpkg"),
        "--json",
        "--no-verify",
    )
    assert r.returncode == 0, r.stderr
    manifest = json.load(open(os.path.join(db, D.MANIFEST)))
    assert manifest["target_key"].startswith("llvm-") and D.show(db)["records"] == 0


def test_db_commands_touch_only_databases(small_db, tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("mine")
    r = run_cli("db", "show", str(plain))
    assert r.returncode == 2 and sorted(os.listdir(plain)) == ["notes.txt"]
    r = run_cli("db", "merge", small_db, "-o", str(plain))
    assert r.returncode == 2 and "not a tuning database" in r.stderr and sorted(os.listdir(plain)) == ["notes.txt"]
    # the folder above the target folders: say where the databases are
    r = run_cli("db", "show", os.path.dirname(small_db))
    assert r.returncode == 2 and small_db in r.stderr
