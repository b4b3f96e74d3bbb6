"""Flush-to-zero at run time (`tuner.load(..., flush_denormals=True)`, runtime/float_mode.py): subnormal
activations read and written as zero on every thread of TVM's pool, the caller's own MXCSR untouched, and a
package loaded without the option never computing with another's setting."""

import threading

import numpy as np
import pytest

from tuner.runtime import float_mode

pytestmark = pytest.mark.skipif(not float_mode.supported(), reason="MXCSR is x86's")

SUBNORMAL = np.float32(1e-39)


@pytest.fixture(scope="module")
def doubling_package(tmp_path_factory):
    """y = 2 x over a 64 x 1024 input: a parallel kernel, its rows split between the pool's threads."""
    import onnx
    from onnx import TensorProto, helper

    from tuner.commands.compile import compile_model

    d = tmp_path_factory.mktemp("flush")
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["y"])],
        "double",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 1024])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 1024])],
        [two],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), d / "double.onnx")
    out = str(d / "double.ftpkg")
    compile_model(str(d / "double.onnx"), out, target="llvm", fusion="tvm")
    return out


@pytest.fixture(scope="module", autouse=True)
def plain_pool_afterwards(doubling_package):
    """A flushing call leaves this thread's pool workers with FTZ/DAZ until a plain package's call clears them
    (by design: runtime/float_mode.py). Raw VMs do not clear them: test_in_model's timings of a serial record
    against the parallel default, run next in the suite, found nothing slower with them left set. Clear them."""
    yield
    import tuner

    tuner.load(doubling_package)(_inputs())


def _inputs():
    x = np.full((64, 1024), SUBNORMAL, np.float32)
    x[0, 0] = 1.5  # a normal value keeps its product
    return x


def test_flushing_zeroes_subnormals_on_every_pool_thread_and_restores_the_caller(doubling_package):
    import tuner

    before = float_mode.read_mxcsr()
    flushing = tuner.load(doubling_package, flush_denormals=True)
    y = flushing(_inputs())["y"]
    assert y[0, 0] == 3.0
    assert np.count_nonzero(y) == 1, "rows left subnormal: a pool thread ran without FTZ/DAZ"
    assert float_mode.read_mxcsr() == before  # the caller's numpy keeps IEEE subnormals
    assert np.float32(SUBNORMAL) * np.float32(1.0) != 0


def test_a_package_without_the_option_is_not_left_flushing(doubling_package):
    """The flushing package's call leaves the pool's workers with FTZ/DAZ; the next call of a package loaded
    without the option, on the same thread's pool, clears them first."""
    import tuner

    flushing = tuner.load(doubling_package, flush_denormals=True)
    plain = tuner.load(doubling_package)
    for _ in range(2):
        assert np.count_nonzero(flushing(_inputs())["y"]) == 1
        np.testing.assert_array_equal(plain(_inputs())["y"], 2 * _inputs())


def test_each_calling_thread_gets_its_own_setting(doubling_package):
    """TVM keeps a pool per calling thread: a flushing package in one thread, a plain one in another, at once."""
    import tuner

    flushing = tuner.load(doubling_package, flush_denormals=True)
    plain = tuner.load(doubling_package)
    bad = []

    def run(model, nonzero):
        for _ in range(20):
            got = np.count_nonzero(model(_inputs())["y"])
            if got != nonzero:
                bad.append((model.flush_denormals, got))

    threads = [threading.Thread(target=run, args=(flushing, 1)), threading.Thread(target=run, args=(plain, 64 * 1024))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad, bad[:3]


def test_flushing_is_refused_where_it_is_not_built(doubling_package, monkeypatch):
    import tuner
    from tuner.core.errors import TunerError

    monkeypatch.setattr(float_mode.platform, "machine", lambda: "aarch64")
    with pytest.raises(TunerError, match="flush_denormals is built for x86 CPUs"):
        tuner.load(doubling_package, flush_denormals=True)


def test_run_command_takes_the_flag(doubling_package, tmp_path):
    """`fusion-tuner run PKG --flush-denormals --outputs y.npz`: the outputs flushed, the setting in the JSON."""
    import json
    import subprocess
    import sys

    x = tmp_path / "x.npz"
    np.savez(x, x=_inputs())
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuner.cli.main",
            "run",
            doubling_package,
            "--inputs",
            str(x),
            "--repeat",
            "2",
            "--flush-denormals",
            "--outputs",
            str(tmp_path / "y.npz"),
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout)["flush_denormals"] is True
    assert np.count_nonzero(np.load(tmp_path / "y.npz")["y"]) == 1


def test_a_thread_whose_pool_differs_from_the_models_belief_is_still_flushed(doubling_package):
    """The pool's threads as they are: this thread's pool left on one thread by another Model, the model then
    called from a fresh thread whose pool starts at TVM_NUM_THREADS (in the full suite a worker was left
    unflushed this way)."""
    import tuner

    other = tuner.load(doubling_package)
    other._threads._apply(1)
    try:
        flushing = tuner.load(doubling_package, flush_denormals=True)
        got = []
        t = threading.Thread(target=lambda: got.append(np.count_nonzero(flushing(_inputs())["y"])))
        t.start()
        t.join()
        assert got == [1]
    finally:
        other._threads._apply(other._threads.full)
