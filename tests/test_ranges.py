"""Packages for a range of shapes (`--input-shape x:1x3x16x8..512`): parsing, symbolic dimensions through import
and lowering, the symbolic schedule replay, and ranged packages against ONNX Runtime at several shapes."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tuner.core.errors import TunerError
from tuner.core.shapes import DimRange, default_tune_shapes


def test_input_shape_ranges_parse_and_bad_ones_are_refused():
    from tuner.cli.shapes import parse_input_shapes

    got = parse_input_shapes(["x:1x3x48x32..2048", "ids:1..16x1..512 m:[1,4..4]"])
    assert got == {
        "x": (1, 3, 48, DimRange(32, 2048)),
        "ids": (DimRange(1, 16), DimRange(1, 512)),
        "m": (1, 4),  # a range of one value is that value
    }
    with pytest.raises(TunerError, match="is empty"):
        parse_input_shapes(["x:1x9..3"])
    with pytest.raises(TunerError, match="positive integer"):
        parse_input_shapes(["x:1x0..3"])
    assert default_tune_shapes({"x": (1, DimRange(8, 512))}) == [{"x": (1, 260)}, {"x": (1, 512)}]


def test_symbolic_dims_survive_import_and_lowering(seq_encoder):
    import tvm

    from tuner.build.executable import lower_prepared
    from tuner.core.target import resolve_target
    from tuner.frontend.onnx_model import prepare_model
    from tuner.fusion import get_strategy

    shapes = {"input_ids": (1, DimRange(2, 64)), "attention_mask": (1, DimRange(2, 64))}
    prepared = prepare_model(seq_encoder, shapes)
    assert prepared.ranged and prepared.dim_bounds() == {"tokens": (2, 64)}
    lowered = lower_prepared(prepared, resolve_target("llvm"), get_strategy("tvm"))
    main = lowered.mod["main"]
    assert int(main.attrs["tir_var_upper_bound"]["tokens"]) == 64
    dims = [str(d) for p in main.params for d in p.ty.shape.values]
    assert dims.count("tokens") == 2  # both inputs share the model's one symbolic dimension
    kernels = [f for f in lowered.mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    assert any("tokens" in f.script() for f in kernels)


def test_symbolic_kernel_takes_its_twins_schedule_and_stays_exact():
    """A matmul over n rows, scheduled as its twin at n = 40 is, then run at sizes 40 does not divide."""
    import tvm
    from tvm.script import tirx as T

    from tuner.core.target import resolve_target
    from tuner.schedule.symbolic import schedule_symbolic

    @T.prim_func(private=True, s_tir=True)
    def matmul(a: T.handle, w: T.Buffer((64, 48), "float32"), c: T.handle):
        n = T.int64()
        A = T.match_buffer(a, (n, 64), "float32")
        C = T.match_buffer(c, (n, 48), "float32")
        for i, j, k in T.grid(n, 48, 64):
            with T.sblock("matmul"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    C[vi, vj] = T.float32(0)
                C[vi, vj] = C[vi, vj] + A[vi, vk] * w[vk, vj]

    spec = resolve_target("llvm")
    mod, how = schedule_symbolic(tvm.IRModule({"matmul": matmul}), spec, {"n": 40})
    assert how == {"matmul": "default"}
    scheduled = mod["matmul"]
    assert "T.parallel" in scheduled.script() and "tirx.is_scheduled" in scheduled.attrs
    lib = tvm.compile(tvm.IRModule({"main": scheduled.with_attr("global_symbol", "main")}), target=spec.tvm_target())
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 48)).astype("float32")
    for n in (1, 37, 40, 123):
        a = rng.standard_normal((n, 64)).astype("float32")
        c = tvm.runtime.tensor(np.zeros((n, 48), "float32"))
        lib["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(w), c)
        np.testing.assert_allclose(c.numpy(), a @ w, rtol=1e-4, atol=1e-4)


def test_ranged_package_runs_any_shape_and_matches_onnxruntime(line_reader, line_reader_package):
    import onnxruntime as ort

    import tuner

    path, manifest = line_reader_package
    spec = manifest["inputs"][0]
    assert spec["shape_range"] == [[1, 1], [3, 3], [16, 16], [8, 512]] and spec["dim_names"][3] == "width"
    assert [v["shapes"]["image"][3] for v in manifest["variants"]] == [260, 512]
    model = tuner.load(path)
    session = ort.InferenceSession(line_reader, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    for width in (8, 37, 260, 511, 512):  # generic, generic, a tune shape, generic, a tune shape
        image = rng.standard_normal((1, 3, 16, width)).astype("float32")
        got = model(image=image)["probs"]
        want = session.run(None, {"image": image})[0]
        assert got.shape == want.shape == (1, width // 2, 12)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    with pytest.raises(TunerError, match=r"outside the package's range 1x3x16x8\.\.512"):
        model(image=np.zeros((1, 3, 16, 513), "float32"))
    with pytest.raises(TunerError, match="outside the package's range"):
        model(image=np.zeros((1, 3, 16), "float32"))


def test_inputs_sharing_a_dimension_must_agree_and_tune_shapes_complete(seq_encoder, tmp_path):
    import tuner
    from tuner.commands.compile import compile_model

    out = str(tmp_path / "enc.ftpkg")
    shapes = {"input_ids": (1, DimRange(2, 64)), "attention_mask": (1, DimRange(2, 64))}
    _, manifest = compile_model(seq_encoder, out, target="llvm", shapes=shapes, tune_shapes=[{"input_ids": (1, 16)}])
    assert manifest["variants"][0]["shapes"] == {"input_ids": [1, 16], "attention_mask": [1, 16]}
    model = tuner.load(out)
    ids = np.arange(20, dtype="int64")[None]
    with pytest.raises(TunerError, match="same dimension 'tokens'"):
        model(input_ids=ids, attention_mask=np.ones((1, 21), "int64"))
    assert model(input_ids=ids, attention_mask=np.ones((1, 20), "int64"))["hidden"].shape == (1, 20, 32)


def test_bad_tune_shapes_are_refused(seq_encoder, cnn, tmp_path):
    from tuner.commands.compile import compile_model

    shapes = {"input_ids": (1, DimRange(2, 64)), "attention_mask": (1, DimRange(2, 64))}
    with pytest.raises(TunerError, match="outside --input-shape input_ids:1x2..64"):
        compile_model(seq_encoder, str(tmp_path / "a.ftpkg"), shapes=shapes, tune_shapes=[{"input_ids": (1, 65)}])
    with pytest.raises(TunerError, match="needs a range"):
        compile_model(cnn, str(tmp_path / "b.ftpkg"), tune_shapes=[{"input": (1, 3, 32, 32)}])
    with pytest.raises(TunerError, match="contradicts the model's fixed shape"):
        compile_model(cnn, str(tmp_path / "c.ftpkg"), shapes={"input": (1, 3, 32, DimRange(16, 64))})


def test_manifest_ranges_are_validated(line_reader_package, cnn_package):
    import copy

    from tuner.runtime.package import read_package, validate_manifest

    manifest, members = read_package(line_reader_package[0])
    assert set(members) == {"model.so", "variants/0.so", "variants/1.so"}
    pinned, _ = read_package(cnn_package)  # a package without ranges: as before
    assert "shape_range" not in pinned["inputs"][0] and not pinned.get("variants")
    bad = copy.deepcopy(manifest)
    bad["inputs"][0]["shape_range"][3] = [600, 512]
    with pytest.raises(TunerError, match="shape_range"):
        validate_manifest(bad, "x.ftpkg")
    bad = copy.deepcopy(manifest)
    bad["variants"][0]["shapes"]["image"][3] = 4096
    with pytest.raises(TunerError, match="outside its range"):
        validate_manifest(bad, "x.ftpkg")


@pytest.mark.slow
def test_tune_model_over_a_range_tunes_each_tune_shape_and_verifies_across_it(line_reader, tmp_path):
    """tune-model with a range: both tune shapes tuned into the one database, and the package verified against ONNX
    Runtime at the first tune shape, at the ends of the range and between."""
    import json

    from conftest import run_cli

    out, db = str(tmp_path / "lr.ftpkg"), str(tmp_path / "db")
    args = ["tune-model", line_reader, "--input-shape", "image:1x3x16x8..512", "--tune-shape", "image:1x3x16x64"]
    proc = run_cli(*args, "--tune-shape", "image:1x3x16x200", "--trials", "8", "--db", db, "-o", out, "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["tune_shapes"] == [{"image": [1, 3, 16, 64]}, {"image": [1, 3, 16, 200]}]
    assert summary["trials"] > 0 and summary["verify"]["ok"]
    checks = summary["verify_shapes"]
    widths = [c["shapes"]["image"][3] for c in checks]
    assert widths[0] == 8 and widths[-1] == 512 and len(widths) == 3 and all(c["ok"] for c in checks)
    with open(os.path.join(db, "database_tuning_record.json")) as f:
        assert sum(1 for line in f if line.strip()) > 0
