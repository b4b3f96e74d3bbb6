"""A package behind a service: many threads at once, inputs nobody checked, a text model end to end."""

import json
import subprocess
import sys
import threading

import numpy as np
import pytest
from conftest import ROOT, run_cli

import tuner
from tuner.core.errors import TunerError


def test_one_model_called_from_many_threads_gives_each_caller_its_own_answer(cnn_package):
    """4 threads x 25 calls with distinct inputs on one Model: every output equals the single-threaded one (this
    crashed in the VM's allocator before calls were serialised)."""
    m = tuner.load(cnn_package)
    spec = m.inputs[0]
    feeds = [np.random.default_rng(k).standard_normal(spec["shape"]).astype("float32") for k in range(8)]
    expected = [m(f)[m.output_names[0]] for f in feeds]
    errors, wrong = [], []

    def caller(t):
        for i in range(25):
            k = (t * 25 + i) % len(feeds)
            try:
                got = m(feeds[k])[m.output_names[0]]
            except Exception as err:  # noqa: BLE001  (any failure counts)
                errors.append(repr(err))
                continue
            if not np.array_equal(got, expected[k]):
                wrong.append(k)

    threads = [threading.Thread(target=caller, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and not wrong, (errors[:3], wrong[:10])


def test_out_of_range_ids_are_refused_by_name(bert_package):
    m = tuner.load(bert_package)
    feed = m.random_inputs()
    assert feed["token_type_ids"].max() <= 1 and feed["input_ids"].max() <= 999 and feed["attention_mask"].min() == 1
    for name, value, valid in (("token_type_ids", 89, r"\[-2, 1\]"), ("input_ids", 10_000_000, r"\[-1000, 999\]")):
        bad = dict(feed, **{name: np.full((1, 16), value, "int64")})
        with pytest.raises(TunerError, match=rf"input '{name}': value {value} at \[0, 0\] is outside {valid}"):
            m(**bad)
    bad = dict(feed, input_ids=feed["input_ids"].copy())
    bad["input_ids"][0, 7] = -1001
    with pytest.raises(TunerError, match=r"value -1001 at \[0, 7\]"):
        m(**bad)


def test_an_out_of_range_id_past_the_check_still_reads_inside_the_table(bert_package):
    """In a fresh process, with the boundary check taken away: the kernels clamp (no signal, finite output)."""
    code = (
        "import numpy as np, tuner\n"
        f"m = tuner.load({bert_package!r})\n"
        "for s in m.inputs: s.pop('range', None)\n"
        "x = m.random_inputs()\n"
        "x['input_ids'][:] = 10_000_000; x['token_type_ids'][:] = 89\n"
        "print(bool(np.isfinite(m(**x)['pooled']).all()))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "True", (r.returncode, r.stderr[-2000:])


def test_tune_model_on_a_text_model_with_a_two_row_token_type_table(bert_ids, tmp_path):
    r = run_cli(
        "tune-model", bert_ids, "--target", "llvm", "--trials", "2", "--schedules", "none",
        "--db", str(tmp_path / "db"), "-o", str(tmp_path / "bert.ftpkg"), "--json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout)
    assert summary["verify"]["ok"], summary["verify"]
    assert "Warning" not in r.stderr and "ONNXRuntimeError" not in r.stderr, r.stderr[-2000:]


def test_first_contact_minus_one_dims_typos_and_unitless_budgets(tmp_path):
    """A paddle2onnx-style -1 dimension is dynamic (bound by --input-shape, not refused); a mistyped option gets
    its closest match and no usage block; a budget without a unit is refused."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, "?", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 3, "?", 8])],
    )  # fmt: skip
    model = str(tmp_path / "neg.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    r = run_cli("check", model)
    assert r.returncode == 1 and "needs --input-shape: x" in r.stdout and "dimension -1" not in r.stdout + r.stderr
    pkg = str(tmp_path / "neg.ftpkg")
    r = run_cli("compile", model, "--input-shape", "x:2x3x4x8", "--target", "llvm", "-o", pkg)
    assert r.returncode == 0 and r.stderr == "", r.stderr  # no C++ warning on the terminal
    r = run_cli("run", pkg, "--verify", model, "--repeat", "3")
    assert r.returncode == 0 and "PASS" in r.stdout, r.stdout + r.stderr
    r = run_cli("tune-model", model, "--time-buget", "30s", "-o", pkg)
    assert r.returncode == 2 and "did you mean --time-budget?" in r.stderr and "usage:" not in r.stderr
    r = run_cli("tune-model", model, "--input-shape", "x:2x3x4x8", "--time-budget", "10", "-o", pkg)
    assert r.returncode == 2 and "needs its unit" in r.stderr and "10s, 10m or 10h" in r.stderr


def test_the_tuning_database_lives_in_the_user_cache(mlp, tmp_path):
    """tune-model without --db fills the per-user cache from any folder; compile applies it by default and not
    with --db none."""
    import os

    env = {"FUSION_TUNER_CACHE": str(tmp_path / "cache")}
    shape = ("--input-shape", "x:16x32", "--target", "llvm")
    r = run_cli("tune-model", mlp, *shape, "--trials", "2", "--schedules", "none", "-o", str(tmp_path / "t.ftpkg"),
                "--json", "--no-verify", env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["db"].startswith(os.path.join(str(tmp_path / "cache"), "db", "mlp-"))
    r = run_cli("compile", mlp, *shape, "-o", str(tmp_path / "c.ftpkg"), "--json", env=env)
    assert r.returncode == 0 and json.loads(r.stdout)["tuning_db"]["path"].startswith(str(tmp_path / "cache"))
    r = run_cli("compile", mlp, *shape, "--db", "none", "-o", str(tmp_path / "u.ftpkg"), "--json", env=env)
    assert r.returncode == 0 and json.loads(r.stdout)["tuning_db"] is None
