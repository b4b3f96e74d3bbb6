"""Issue 16's defects, one test each: damaged packages, special files as outputs, odd model files, meaningless
models, exit codes, resource limits and wording. Every CLI case: a clear message, its documented exit code, no
traceback, nothing left behind."""

import json
import os
import tempfile
import zipfile

import numpy as np
import onnx
import pytest
from conftest import run_cli
from onnx import TensorProto, helper
from test_bad_input import _rewrite, assert_clean_error

from devtools.fuzz import base_models
from tuner.core.errors import TunerError
from tuner.core.fsio import check_output_path, check_writable
from tuner.runtime import load


def _save(tmp_path, model, name="m.onnx"):
    path = str(tmp_path / name)
    onnx.save(model, path)
    return path


# 4. a package is trusted no further than its digest and schema


def test_edited_manifest_fails_its_digest(cnn_package, tmp_path):
    def threads(m):
        m["num_threads"] = -5

    edited = _rewrite(cnn_package, tmp_path / "e.ftpkg", threads, redigest=False)
    with pytest.raises(TunerError, match="does not match its digest"):
        load(edited)
    assert_clean_error(run_cli("run", edited), "does not match its digest")


@pytest.mark.parametrize(
    "edit, needle",
    [
        (lambda m: m.update(num_threads=-5), "num_threads"),
        (lambda m: m.update(target="llvm"), "manifest field target has the wrong type"),
        (lambda m: m.pop("target"), "manifest field target is missing"),
        (lambda m: m["inputs"][0].update(shape=[1, -3, 32, 32]), "inputs[0].shape"),
        (lambda m: m["inputs"][0].update(dtype="complex256"), "inputs[0].dtype"),
        (lambda m: m.update(outputs=[]), "outputs is empty"),
    ],
)
def test_manifest_schema(cnn_package, tmp_path, edit, needle):
    with pytest.raises(TunerError, match=None) as err:
        load(_rewrite(cnn_package, tmp_path / "s.ftpkg", edit))
    assert needle in str(err.value)


def test_manifest_that_is_a_list_or_damaged_zip(cnn_package, tmp_path):
    lst = tmp_path / "list.ftpkg"
    with zipfile.ZipFile(lst, "w") as z:
        z.writestr("manifest.json", "[1, 2]")
    with pytest.raises(TunerError, match="not a fusion-tuner package"):
        load(str(lst))
    # a flipped byte inside the compressed library: zlib's error becomes ours
    data = bytearray(open(cnn_package, "rb").read())
    with zipfile.ZipFile(cnn_package) as z:
        info = z.getinfo("model.so")
    data[info.header_offset + 30 + len(info.filename) + 200] ^= 0xFF
    flipped = tmp_path / "flip.ftpkg"
    flipped.write_bytes(bytes(data))
    assert_clean_error(run_cli("run", str(flipped)), str(flipped))
    assert_clean_error(run_cli("run", str(tmp_path)), "is not a package file")


def test_rehashed_garbage_library_is_refused_before_dlopen(cnn_package, tmp_path):
    garbage = _rewrite(cnn_package, tmp_path / "g.ftpkg", member_edit=lambda b: b"\0" * 4096, rehash=True)
    before = {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("ftpkg-")}
    assert_clean_error(run_cli("run", garbage), "no ELF header")
    after = {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("ftpkg-")}
    assert after <= before


def test_library_copies_of_dead_processes_are_swept(cnn_package):
    stale = os.path.join(tempfile.gettempdir(), "ftpkg-999999999-test")  # no such pid
    os.makedirs(stale, exist_ok=True)
    open(os.path.join(stale, "model.so"), "wb").close()
    load(cnn_package)
    assert not os.path.exists(stale)


# 5. outputs that a rename would destroy


def test_special_files_are_not_replaced_as_outputs(cnn, tmp_path):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    assert_clean_error(run_cli("compile", cnn, "--target", "llvm", "-o", str(fifo)), "is a FIFO")
    assert os.path.exists(fifo) and not os.path.isfile(fifo)
    real = tmp_path / "real.ftpkg"
    real.write_bytes(b"keep")
    link = tmp_path / "link.ftpkg"
    link.symlink_to(real)
    assert_clean_error(run_cli("compile", cnn, "--target", "llvm", "-o", str(link)), "is a symbolic link")
    assert os.path.islink(link) and real.read_bytes() == b"keep"
    with pytest.raises(TunerError, match="is a device"):
        check_output_path("/dev/null")  # checked, never written: as root a rename would replace it
    with pytest.raises(TunerError, match="-o is empty"):
        check_output_path("")
    with pytest.raises(TunerError, match="not writable"):
        check_writable("/proc/x.ftpkg")  # refused before any build


# 6, 8. model files check must not hang on or crash with, and models that mean nothing


def test_check_refuses_a_fifo_without_hanging(tmp_path):
    fifo = tmp_path / "f.onnx"
    os.mkfifo(fifo)
    assert_clean_error(run_cli("check", str(fifo), timeout=120), "not a regular file")


def test_non_utf8_name_and_unfeedable_inputs(tmp_path):
    data = base_models()["cnn"].SerializeToString()
    i = data.find(b"conv")
    bad = tmp_path / "name.onnx"
    bad.write_bytes(data[:i] + b"\xff" + data[i + 1 :])
    r = run_cli("check", str(bad))
    assert r.returncode in (1, 2) and "Traceback" not in r.stderr + r.stdout
    for elem, word in ((TensorProto.STRING, "STRING"), (TensorProto.UNDEFINED, "UNDEFINED"), (999, "999")):
        m = base_models()["cnn"]
        m.graph.input[0].type.tensor_type.elem_type = elem
        assert_clean_error(run_cli("check", _save(tmp_path, m)), f"element type {word}")


def test_meaningless_models(tmp_path):
    m = base_models()["cnn"]
    del m.graph.output[:]
    assert_clean_error(run_cli("compile", _save(tmp_path, m), "-o", str(tmp_path / "x.ftpkg")), "no outputs")
    assert not os.path.exists(tmp_path / "x.ftpkg")
    m = base_models()["cnn"]
    m.opset_import[0].version = 99
    assert_clean_error(run_cli("check", _save(tmp_path, m)), "opset 99 is newer")
    m.opset_import[0].version = 1
    assert_clean_error(run_cli("check", _save(tmp_path, m)), "opset 1 predates")
    for dim in (2**40, 2**63 - 1):
        m = base_models()["cnn"]
        m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = dim
        assert_clean_error(run_cli("check", _save(tmp_path, m)), f"dimension {dim}")
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = -1  # an exporter's "unknown": dynamic, bindable
    r = run_cli("check", _save(tmp_path, m))
    assert r.returncode == 1 and "needs --input-shape: x" in r.stdout, r.stdout + r.stderr


# 7. check's verdict is compile's


@pytest.mark.parametrize(
    "node, attr, value, needle",
    [
        ("pool", "kernel_shape", [100, 100], "larger than its padded input"),
        ("conv", "strides", [-1, -1], "strides [-1, -1] must be positive"),
        ("conv", "dilations", [1000, 1000], "larger than its padded input"),
    ],
)
def test_window_attributes_check_and_compile_agree(tmp_path, node, attr, value, needle):
    m = base_models()["cnn"]
    n = next(n for n in m.graph.node if n.name == node)
    for a in list(n.attribute):
        if a.name == attr:
            n.attribute.remove(a)
    n.attribute.append(helper.make_attribute(attr, value))
    path = _save(tmp_path, m)
    r = run_cli("check", path, "--json")
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert not doc["buildable"] and any(needle in u["reason"] and u["nodes"] == [node] for u in doc["unsupported"])
    assert_clean_error(run_cli("compile", path, "-o", str(tmp_path / "x.ftpkg")), f"node '{node}'", needle)


def test_tvm_errors_are_summarized_without_ir():
    from tuner.core.errors import summarize_native_error

    err = RuntimeError(
        "Traceback (most recent call last):\n  File x\nInternalError: Check failed: (a == b) is false: shapes differ\n"
        "# from tvm.script import relax as R\n# Metadata omitted. Use show_meta=True in script() method to show it.\n"
        "@R.function\ndef main(x: R.Tensor((1,), dtype='float32')):\n    R.add(x, x)\n"
    )
    assert summarize_native_error(err) == "Check failed: (a == b) is false: shapes differ"


# 9. exit codes


def test_internal_errors_have_their_own_exit_code(monkeypatch, cnn, capsys):
    import tuner.commands.check as check
    from tuner.cli.help import EXIT_CODES
    from tuner.cli.main import main

    def broken(*a, **k):
        raise RuntimeError("a bug")

    monkeypatch.setattr(check, "check_model", broken)
    code = main(["check", cnn])
    err = capsys.readouterr().err
    assert code == 4 and "internal error: RuntimeError: a bug" in err and "Traceback" not in err
    assert set(EXIT_CODES) == {0, 1, 2, 3, 4, 130}
    usage = run_cli("--help").stdout
    assert "exit codes:" in usage and "internal error" in usage


# 10, 12. resources and wording


def test_huge_generated_inputs_are_refused_before_allocation():
    from tuner.runtime import make_inputs

    with pytest.raises(TunerError, match="TiB"):
        make_inputs([{"name": "x", "shape": [2**24, 2**22], "dtype": "float32"}])


def test_inputs_from_npy_text_and_outputs_to_a_folder(cnn_package, tmp_path):
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    r = run_cli("run", cnn_package, "--inputs", str(tmp_path / "x.npy"), "--repeat", "1", "--json")
    assert r.returncode == 0, r.stderr
    (tmp_path / "x.txt").write_text("1 2 3\n")
    assert_clean_error(run_cli("run", cnn_package, "--inputs", str(tmp_path / "x.txt")), "not a .npz or .npy file")
    r = run_cli("run", cnn_package, "--outputs", str(tmp_path), "--repeat", "1")
    assert_clean_error(r, "is a directory")
    assert "--outputs outputs.npz" in r.stderr and "-o model.ftpkg" not in r.stderr
