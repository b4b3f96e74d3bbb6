"""compare: every metric comes from the build, every file is written, the HTML renders in Chromium."""

import json
import os
import shutil
import subprocess

import numpy as np
import pytest
from conftest import run_cli

SHAPE = (1, 64, 32, 32)
TENSOR = int(np.prod(SHAPE)) * 4


def _elementwise_chain(path):
    """x -> Add(c) -> Relu -> Mul(c) -> Neg -> Tanh: five operators, one kernel when fused. (No Sigmoid: fast
    math's polynomial reads its input several times, so an inlined producer is recomputed and FLOPs differ.)"""
    import onnx
    from onnx import TensorProto, helper

    c = helper.make_tensor("c", TensorProto.FLOAT, [], [0.5])
    nodes = [
        helper.make_node("Add", ["x", "c"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        helper.make_node("Mul", ["r", "c"], ["m"], name="mul"),
        helper.make_node("Neg", ["m"], ["s"], name="neg"),
        helper.make_node("Tanh", ["s"], ["y"], name="tanh"),
    ]
    g = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)],
        [c],
    )
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.fixture(scope="module")
def chain_report(tmp_path_factory):
    from tuner.commands.compare import compare

    d = tmp_path_factory.mktemp("cmp")
    model = _elementwise_chain(str(d / "chain.onnx"))
    out = str(d / "report")
    doc = compare(model, out, target="llvm", fusion="none,tvm", ort=True, repeat=5, log=lambda *a: None)
    return doc, out


def test_metrics_come_from_the_build(chain_report):
    doc, _ = chain_report
    none, tvm = doc["variants"]["none"]["metrics"], doc["variants"]["tvm"]["metrics"]
    # unfused: one launch per ONNX operator; fused: the whole element-wise chain is one kernel
    assert none["launches"] == 5 and tvm["launches"] == 1
    # four intermediates, each written once and read once unfused; none left fused
    assert none["intermediate_tensors"] == 4 and none["intermediate_bytes"] == 4 * TENSOR
    assert none["intermediate_traffic_bytes"] == 8 * TENSOR and tvm["intermediate_traffic_bytes"] == 0
    # every kernel reads its input and writes its output (the scalar constant is an immediate in the kernel)
    assert none["traffic_bytes"] == 10 * TENSOR and tvm["traffic_bytes"] == 2 * TENSOR
    assert tvm["vs_unfused"]["intermediate_traffic_removed_pct"] == pytest.approx(100.0)
    assert tvm["vs_unfused"]["launches_saved"] == 4
    assert tvm["flops"] == none["flops"] > 0 and tvm["vs_unfused"]["recomputed_flops"] == 0
    # memory planning reuses storage unfused; fused needs none for intermediates (output is allocated apart)
    assert none["planned_storage_bytes"] >= TENSOR > tvm["planned_storage_bytes"]
    assert none["unplanned_storage_bytes"] == 4 * TENSOR
    # untuned CPU kernels get the default schedule: parallel outer loops, none left serial
    assert none["parallelism"]["serial_kernels"] == 0 and none["parallelism"]["median"] >= 2
    assert tvm["intensity"] > none["intensity"]
    assert doc["machine"]["launch_us"] > 0 and doc["machine"]["peak_gflops"] > 1 and doc["machine"]["peak_gbps"] > 0.5
    assert doc["machine"]["source"]["peak_gflops"].startswith("FMA loop measured")
    assert none["launch_overhead_us"] == pytest.approx(5 * doc["machine"]["launch_us"])
    # kernels are named by their ONNX nodes (the strategy's plan), as the report labels them
    fused = doc["variants"]["tvm"]["kernels"]
    assert [k["onnx_nodes"] for k in fused] == [["add", "relu", "mul", "neg", "tanh"]]
    assert fused[0]["onnx_ops"] == "Add+Relu+Mul+Neg+Tanh"
    assert [k["onnx_ops"] for k in doc["variants"]["none"]["kernels"]] == ["Add", "Relu", "Mul", "Neg", "Tanh"]


def test_latency_profile_and_verification(chain_report):
    doc, _ = chain_report
    for name in ("none", "tvm"):
        v = doc["variants"][name]
        assert v["verify"]["ok"]
        lat = v["latency_ms"]
        assert lat["runs"] >= 5 and lat["p10"] <= lat["median"] <= lat["p90"]  # blocks of back-to-back runs
        times = [k["time_us"] for k in v["kernels"]]
        assert all(t is not None and t > 0 for t in times)
        assert v["kernel_time_us"] <= lat["max"] * 1e3 * 1.5  # kernels fit inside an inference
    assert doc["reference"]["onnxruntime"]["median"] > 0  # as shipped; without spin-waiting beside it
    assert doc["reference"]["onnxruntime_no_spin"]["median"] > 0
    assert "cut launches 5 → 1" in doc["verdict"] and "intermediate traffic by 100%" in doc["verdict"]


def test_all_files_written(chain_report):
    import pandas as pd

    doc, out = chain_report
    for f in (
        "report.md",
        "report.html",
        "report.json",
        "kernels.csv",
        "variants.csv",
        "latency.png",
        "roofline.png",
        "traffic_launches.png",
        "kernel_time.png",
    ):
        assert os.path.getsize(os.path.join(out, f)) > 200, f
    on_disk = json.load(open(os.path.join(out, "report.json")))
    assert set(on_disk["variants"]) == {"none", "tvm"} and on_disk["verdict"] == doc["verdict"]
    kernels = pd.read_csv(os.path.join(out, "kernels.csv"))
    assert len(kernels) == 6 and set(kernels["variant"]) == {"none", "tvm"}
    md = open(os.path.join(out, "report.md")).read()
    assert doc["verdict"] in md and "| none | 5 |" in md and "![Roofline](roofline.png)" in md


@pytest.mark.skipif(not shutil.which("chromium"), reason="needs Debian's chromium (scripts/setup.sh installs it)")
def test_html_renders_in_chromium(chain_report, tmp_path):
    import matplotlib.image as mpimg

    _, out = chain_report
    url = "file://" + os.path.abspath(os.path.join(out, "report.html"))
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files"]
    dom = subprocess.run(["chromium", *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
    assert dom.count("<table") >= 3 and dom.count("<img") == 4 and "data:image/png;base64," in dom
    assert "http://" not in dom and "https://" not in dom  # self-contained
    shot = tmp_path / "shot.png"
    subprocess.run(
        ["chromium", *flags, f"--screenshot={shot}", "--window-size=1200,1800", url], capture_output=True, timeout=120
    )
    img = mpimg.imread(str(shot))
    assert img.shape[0] == 1800 and img[..., :3].std() > 0.05  # not a blank page


def test_unknown_strategy_fails_before_any_build(tmp_path):
    r = run_cli("compare", "nonexistent.onnx", "--fusion", "none,fancy", "-o", str(tmp_path / "r"))
    assert r.returncode == 2 and "unknown fusion strategy 'fancy'" in r.stderr and "known strategies" in r.stderr
    assert not (tmp_path / "r").exists()


def test_existing_output_needs_force(chain_report, tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "keep.txt").write_text("mine")
    model = _elementwise_chain(str(tmp_path / "chain.onnx"))
    r = run_cli("compare", model, "--target", "llvm", "-o", str(tmp_path / "r"))
    assert r.returncode == 2 and "exists and is not empty" in r.stderr and "--force" in r.stderr
    assert (tmp_path / "r" / "keep.txt").read_text() == "mine"


def test_failed_variant_is_reported_and_the_rest_still_is(tmp_path):
    """A strategy whose pass breaks: that variant is 'failed' with its error, the report still has the others."""
    import tvm

    from tuner.commands.compare import compare
    from tuner.fusion import FusionStrategy, register
    from tuner.fusion.base import _REGISTRY

    @tvm.transform.module_pass(opt_level=0)
    def broken(mod, ctx):
        raise RuntimeError("this pass always fails")

    @register
    class Broken(FusionStrategy):
        name, description = "broken_for_test", "a pass that raises"

        def graph_passes(self, target, params):
            return [broken]

    try:
        model = _elementwise_chain(str(tmp_path / "chain.onnx"))
        doc = compare(
            model, str(tmp_path / "r"), target="llvm", fusion="none,broken_for_test,tvm", repeat=3, log=lambda *a: None
        )
    finally:
        _REGISTRY.pop("broken_for_test")
    bad = doc["variants"]["broken_for_test"]
    assert bad["status"] == "failed" and "this pass always fails" in bad["error"]
    assert doc["variants"]["tvm"]["status"] == "ok" and "cut launches 5 → 1" in doc["verdict"]
    md = (tmp_path / "r" / "report.md").read_text()
    assert "## Failed variants" in md and "this pass always fails" in md


@pytest.mark.slow
def test_tuned_and_untuned_side_by_side(mlp, tmp_path):
    """--trials: each strategy tuned with the same budget into its own database; both states reported."""
    r = run_cli(
        "compare",
        mlp,
        "--input-shape",
        "x:1x32",
        "--target",
        "llvm",
        "--trials",
        "8",
        "--repeat",
        "5",
        "-o",
        str(tmp_path / "r"),
    )
    assert r.returncode == 0, r.stderr
    doc = json.load(open(tmp_path / "r" / "report.json"))
    assert set(doc["variants"]) == {"none/untuned", "none/tuned", "tvm/untuned", "tvm/tuned"}
    assert doc["tuning"] == {"trials_per_variant": 8}
    for s in ("none", "tvm"):
        assert os.path.isdir(tmp_path / "r" / "db" / s)
        assert doc["variants"][f"{s}/tuned"]["verify"]["ok"]
    assert "untuned" in doc["verdict"] and "tuned" in doc["verdict"].split("untuned")[-1]
    tuned = doc["variants"]["tvm/tuned"]
    assert tuned["tuned_kernels"] + len(tuned["default_record_kernels"]) >= 1  # records reached the build
    assert doc["variants"]["tvm/untuned"]["tuned_kernels"] == 0


def _scheduled(kind):
    from tvm import te
    from tvm.s_tir import Schedule

    a = te.placeholder((64, 128), name="A")
    b = te.compute((64, 128), lambda i, j: a[i, j] * 2, name="B")
    sch = Schedule(te.create_prim_func([a, b]))
    i, j = sch.get_loops(sch.get_sblock("B"))
    if kind == "cpu":
        sch.parallel(i)
    else:
        sch.bind(i, "blockIdx.x")
        sch.bind(j, "threadIdx.x")
    return sch.mod["main"].script()


def test_parallel_extent_is_read_from_the_schedule():
    from tuner.report.kernels import parallelism

    assert parallelism(_scheduled("cpu")) == (64, None, None)
    assert parallelism(_scheduled("gpu")) == (64 * 128, 64, 128)
    assert parallelism("for i in T.parallel(T.int64(8)):\n    for j in T.parallel(4):\n        pass") == (
        32,
        None,
        None,
    )


def test_verdict_names_each_other_strategy_against_the_chosen_one():
    from tuner.report.verdict import verdict

    def v(strategy, tuned, launches, median, traffic, spread=0.05):
        return {
            "strategy": strategy,
            "tuned": tuned,
            "status": "ok",
            "latency_ms": {"median": median, "p10": median * (1 - spread), "p90": median * (1 + spread)},
            "metrics": {
                "launches": launches,
                "intermediate_traffic_bytes": traffic,
                "vs_unfused": {"intermediate_traffic_removed_pct": 100.0 * (1 - traffic / 1000)},
            },
        }

    doc = {
        "strategies": ["none", "tvm", "cost"],
        "measured": True,
        "variants": {
            "none/untuned": v("none", False, 20, 10.0, 1000),
            "none/tuned": v("none", True, 20, 4.0, 1000),
            "tvm/untuned": v("tvm", False, 8, 9.0, 400, spread=0.1),  # p10-p90 8.1-9.9 meets none's 9.5-10.5
            "tvm/tuned": v("tvm", True, 8, 2.0, 400),
            "cost/untuned": v("cost", False, 6, 9.0, 300),
            "cost/tuned": v("cost", True, 6, 1.6, 300),
        },
    }
    text = verdict(doc)
    assert text.startswith("fusion (tvm) cut launches 20 → 8")
    assert "fused latency vs unfused: untuned within noise (0.90×, p10-p90 ranges overlap), tuned 2.00× faster" in text
    assert text.endswith(
        "cost vs tvm: 6 launches vs 8, within noise (1.00×, p10-p90 ranges overlap) untuned, 1.25× faster tuned."
    )
    doc["reference"] = {"onnxruntime": {"median": 1.0, "p10": 0.95, "p90": 1.05}}
    assert verdict(doc).endswith("ONNX Runtime 1.000 ms, tvm/tuned 2.000 ms: 2.00× slower.")
    # without `none` there is no fused-vs-unfused pair, but the strategies are still compared
    only_fused = {
        "strategies": ["tvm", "cost"],
        "measured": True,
        "variants": {k: doc["variants"][k] for k in ("tvm/tuned", "cost/tuned")},
    }
    assert verdict(only_fused).endswith("cost vs tvm: 6 launches vs 8, 1.25× faster tuned.")


def test_compare_json_prints_the_report_with_onnxruntime_in_the_verdict(tmp_path):
    model = _elementwise_chain(str(tmp_path / "chain.onnx"))
    out = str(tmp_path / "r")
    limits = ("--peak-gflops", "100", "--peak-gbps", "20")  # not measured: the test is about the output
    r = run_cli("compare", model, "--target", "llvm", "--ort", "--repeat", "5", *limits, "-o", out, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)  # nothing but the document on stdout
    assert doc["verdict"] == json.load(open(f"{out}/report.json"))["verdict"]
    # the verdict says ONNX Runtime's latency and the comparison of the report's own numbers
    from tuner.core.stats import compare_stats

    ort = doc["reference"]["onnxruntime"]
    mine = doc["variants"]["tvm"]["latency_ms"]
    assert f"ONNX Runtime {ort['median']:.3f} ms, tvm/untuned {mine['median']:.3f} ms: " in doc["verdict"]
    assert doc["verdict"].rstrip().endswith(compare_stats(mine, ort)["words"] + ".") or (
        compare_stats(mine, ort)["words"] + "." in doc["verdict"]
    )


def test_cpu_peak_comes_from_an_fma_loop_of_the_targets_widest_vector():
    """Issue 39, lever 7: the roofline's ceiling is what the core issues (vector FMAs of the target's width on
    the package's threads), not numpy's matmul, which our own kernels outran. The loop compiles to packed FMAs
    on the widest registers (zmm with AVX-512), and the ISA figure explains it: lanes x 2 x pipes x GHz x
    threads."""
    from tuner.core.target import resolve_target, vector_lanes
    from tuner.report.peak import build_fma_loop, isa_explanation, isa_peak_gflops, measure_fma_gflops, nominal_ghz

    spec = resolve_target("llvm")
    lanes = vector_lanes(spec)
    asm = build_fma_loop(spec.tvm_target(), lanes, 2, steps=10).mod.inspect_source("asm")
    register = "zmm" if lanes == 16 else "ymm"
    assert any("vfmadd" in line and register in line for line in asm.splitlines())
    assert measure_fma_gflops(spec.tvm_target(), lanes, 1, repeat=1) > 0
    assert isa_peak_gflops(16, 1, 2.6, 2) == pytest.approx(166.4)  # Zen 4: AVX-512 FMAs in two 256-bit halves
    # 256 GFLOP/s on 2 threads of 16 lanes: one FMA a cycle at 4.0 GHz, not two at 2.0 (below the nominal 2.6)
    assert isa_explanation(256.0, 16, 2, 2.6) == (
        "ISA: 16 lanes x 2 FLOPs x 1 full-width FMA/cycle x 2 thread(s) at 4.00 GHz (nominal 2.60 GHz)"
    )
    assert "x 2 full-width FMA/cycle" in isa_explanation(500.0, 16, 2, 3.0)  # two 512-bit units at 3.9 GHz
    ghz = nominal_ghz()
    assert ghz is None or 0.5 < ghz < 10
