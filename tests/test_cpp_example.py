"""examples/cpp: a package's library loaded and run from C++ with the TVM runtime in the wheel, no Python."""

import os
import subprocess
import sys
import zipfile

import numpy as np
from conftest import ROOT


def test_cpp_example_runs_a_package_and_matches_onnxruntime(cnn_package, cnn, tmp_path):
    import onnxruntime as ort

    exe = str(tmp_path / "run_package")
    env = {**os.environ, "PYTHON": sys.executable}
    build = subprocess.run(
        ["bash", os.path.join(ROOT, "examples", "cpp", "build.sh"), exe], capture_output=True, text=True, env=env
    )
    assert build.returncode == 0, build.stderr
    with zipfile.ZipFile(cnn_package) as z:
        z.extract("model.so", tmp_path)
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    x.tofile(tmp_path / "in.bin")
    run = subprocess.run(
        [exe, str(tmp_path / "model.so"), str(tmp_path / "in.bin"), "1x3x32x32", str(tmp_path / "out.bin")],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert run.returncode == 0, run.stderr
    got = np.fromfile(tmp_path / "out.bin", dtype=np.float32)
    want = ort.InferenceSession(cnn, providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-5)
    callers = subprocess.run(
        [exe, str(tmp_path / "model.so"), str(tmp_path / "in.bin"), "1x3x32x32", str(tmp_path / "o4.bin"), "4"],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert callers.returncode == 0 and "4 callers x 25 calls: 0 outputs differ" in callers.stdout, callers.stderr
    bad = subprocess.run(
        [exe, str(tmp_path / "model.so"), str(tmp_path / "in.bin"), "1x3x8x8", "o.bin"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "bytes, the shape needs" in bad.stderr


def test_cpp_example_runs_a_ranged_package_at_any_width_and_refuses_others(line_reader, line_reader_package, tmp_path):
    """The generic library of a ranged package, from C++: any width in the range matches ONNX Runtime; a width
    past the range is an error from the library itself (its main asserts the range), not a write out of bounds."""
    import onnxruntime as ort

    path, _ = line_reader_package
    exe = str(tmp_path / "run_package")
    env = {**os.environ, "PYTHON": sys.executable}
    build = subprocess.run(
        ["bash", os.path.join(ROOT, "examples", "cpp", "build.sh"), exe], capture_output=True, text=True, env=env
    )
    assert build.returncode == 0, build.stderr
    with zipfile.ZipFile(path) as z:
        z.extract("model.so", tmp_path)
    session = ort.InferenceSession(line_reader, providers=["CPUExecutionProvider"])
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for width in (9, 300, 600):
        x = np.random.default_rng(width).standard_normal((1, 3, 16, width)).astype(np.float32)
        x.tofile(tmp_path / "in.bin")
        shape = f"1x3x16x{width}"
        run = subprocess.run(
            [exe, str(tmp_path / "model.so"), str(tmp_path / "in.bin"), shape, str(tmp_path / "out.bin")],
            capture_output=True,
            text=True,
            env=clean,
        )
        if width > 512:
            assert run.returncode == 1 and "outside the package's range 8..512" in run.stderr, run.stderr
            continue
        assert run.returncode == 0, run.stderr
        want = session.run(None, {"image": x})[0]
        np.testing.assert_allclose(np.fromfile(tmp_path / "out.bin", np.float32).reshape(want.shape), want, 1e-4, 1e-5)
