"""The report's pictures (matplotlib, Agg backend): each function takes the report document and a path."""

from __future__ import annotations

import math

COLORS = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#ff9da6", "#9d755d"]


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _ok(doc):
    return {n: v for n, v in doc["variants"].items() if v["status"] == "ok"}


def _mb(x):
    return x / 2**20


def latency(doc, path) -> bool:
    variants = {n: v for n, v in _ok(doc).items() if v.get("latency_samples_ms")}
    if not variants:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 0.6 * len(variants) + 1.8))
    names = list(variants)
    data = [variants[n]["latency_samples_ms"] for n in names]
    ax.boxplot(data, orientation="horizontal", widths=0.6, showfliers=True)
    ax.set_yticks(range(1, len(names) + 1), names)
    for k, n in enumerate(names, 1):
        med = variants[n]["latency_ms"]["median"]
        ax.annotate(f"{med:.3g} ms", (med, k - 0.36), fontsize=8, ha="center")
    ref = (doc.get("reference") or {}).get("onnxruntime")
    if ref:
        ax.axvline(ref["median"], color="#888", ls="--", lw=1)
        ax.annotate(
            f"ONNX Runtime as shipped {ref['median']:.3g} ms",
            (ref["median"], len(names) + 0.45),
            fontsize=8,
            color="#555",
        )
    ax.invert_yaxis()  # first variant on top, as in the tables
    ax.set_xlabel("latency per inference (ms), alternating blocks of back-to-back runs")
    ax.set_xscale("log" if max(max(d) for d in data) / max(min(min(d) for d in data), 1e-9) > 20 else "linear")
    ax.set_title(f"{doc['model']['name']} on {doc['target']}: latency ({doc['repeat']} runs each)")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def roofline(doc, path) -> bool:
    variants = _ok(doc)
    if not variants:
        return False
    plt = _plt()
    peak, bw = doc["machine"]["peak_gflops"], doc["machine"]["peak_gbps"]
    fig, ax = plt.subplots(figsize=(7.5, 5))
    points = [k for v in variants.values() for k in v["kernels"] if k["intensity"] > 0]
    lo = min([k["intensity"] for k in points] + [0.05]) / 2
    hi = max([k["intensity"] for k in points] + [peak / bw * 4]) * 2
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(xs, [min(peak, x * bw) for x in xs], color="black", lw=1.5)
    ax.annotate(f"{peak:.0f} GFLOP/s", (hi, peak), ha="right", va="bottom", fontsize=8)
    ax.annotate(f"{bw:.0f} GB/s", (lo * 2, lo * 2 * bw), rotation=0, fontsize=8, va="bottom")
    measured = any(k.get("gflops") for k in points)
    for c, (name, v) in zip(COLORS * 4, variants.items()):
        ks = [k for k in v["kernels"] if k["intensity"] > 0 and (k.get("gflops") or not measured)]
        if not ks:
            continue
        ys = [k["gflops"] if measured else k["roofline_gflops"] for k in ks]
        times = [k.get("time_us") or 1.0 for k in ks]
        tmax = max(times)
        ax.scatter(
            [k["intensity"] for k in ks],
            ys,
            s=[12 + 180 * math.sqrt(t / tmax) for t in times],
            alpha=0.55,
            color=c,
            label=f"{name} ({len(v['kernels'])} kernels)",
            edgecolors="white",
            linewidths=0.5,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("compute density (FLOPs per byte of global memory)")
    ax.set_ylabel("achieved GFLOP/s" if measured else "attainable GFLOP/s (not measured)")
    ax.set_title(f"Roofline, one point per kernel (size ~ time): {doc['model']['name']}")
    ax.grid(which="both", alpha=0.2)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def traffic_and_launches(doc, path) -> bool:
    variants = _ok(doc)
    if not variants:
        return False
    plt = _plt()
    names = list(variants)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 0.55 * len(names) + 2))
    launches = [variants[n]["metrics"]["launches"] for n in names]
    a1.barh(names, launches, color=COLORS[0])
    for k, x in enumerate(launches):
        a1.annotate(str(x), (x, k), va="center", fontsize=8, xytext=(3, 0), textcoords="offset points")
    a1.set_xlabel("kernel launches per inference")
    a1.invert_yaxis()
    inter = [_mb(variants[n]["metrics"]["intermediate_traffic_bytes"]) for n in names]
    total = [_mb(variants[n]["metrics"]["traffic_bytes"]) for n in names]
    other = [t - i for t, i in zip(total, inter)]
    a2.barh(names, other, color="#bbbbbb", label="inputs, weights, outputs")
    a2.barh(names, inter, left=other, color=COLORS[1], label="intermediates (write + reads)")
    for k, t in enumerate(total):
        a2.annotate(f"{t:.2f} MiB", (t, k), va="center", fontsize=8, xytext=(3, 0), textcoords="offset points")
    a2.set_xlabel("global-memory traffic per inference (MiB)")
    a2.invert_yaxis()
    a2.legend(fontsize=8, loc="lower right")
    for a in (a1, a2):
        a.margins(x=0.2)
        a.grid(axis="x", alpha=0.3)
    fig.suptitle(f"{doc['model']['name']}: launches and memory traffic")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def kernel_time(doc, path, top: int = 8) -> bool:
    variants = {n: v for n, v in _ok(doc).items() if v.get("kernel_time_us")}
    if not variants:
        return False
    plt = _plt()
    fig, axes = plt.subplots(
        len(variants),
        1,
        figsize=(9, 1.0 + 0.28 * (top + 1) * len(variants) + 0.4 * len(variants)),
        squeeze=False,
        sharex=True,  # one time scale: bars of different strategies compare at a glance
    )
    for ax, (name, v) in zip(axes[:, 0], variants.items()):
        per, label = {}, {}
        for k in v["kernels"]:
            if k.get("time_us"):
                per[k["kernel"]] = per.get(k["kernel"], 0.0) + k["time_us"]
                label[k["kernel"]] = onnx_label(k)
        ranked = sorted(per.items(), key=lambda kv: -kv[1])
        shown = ranked[:top]
        rest = sum(t for _, t in ranked[top:])
        labels = [label[n] for n, _ in shown] + ([f"{len(ranked) - top} others"] if rest else [])
        values = [t / 1e3 for _, t in shown] + ([rest / 1e3] if rest else [])
        ax.barh(labels, values, color=COLORS[0])
        ax.invert_yaxis()
        ax.tick_params(axis="y", labelsize=7)
        ax.set_title(f"{name}: {v['kernel_time_us'] / 1e3:.3g} ms in {len(v['kernels'])} kernels", fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("time per inference (ms), VM instrument profile")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def onnx_label(kernel_row: dict, width: int = 60) -> str:
    """A kernel by its ONNX ops and first ONNX node ("Conv+Relu · stem/conv"), or TVM's name without a plan."""
    from tuner.plan.attribution import node_label

    nodes = kernel_row.get("onnx_nodes") or []
    if kernel_row.get("onnx_ops") and nodes:
        text = f"{kernel_row['onnx_ops']} · {node_label(nodes, width)}"
    else:
        text = kernel_row["kernel"]
    return text if len(text) <= width else text[: width - 3] + "..."


ALL = {"latency": latency, "roofline": roofline, "traffic_launches": traffic_and_launches, "kernel_time": kernel_time}
