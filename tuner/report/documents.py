"""The report: one list of sections rendered twice (Markdown for terminals and forges, self-contained HTML
with embedded images), plus report.json (every number), kernels.csv and variants.csv."""

from __future__ import annotations

import base64
import html
import json
import os

from tuner.core.fsio import atomic_write
from tuner.core.units import human_bytes as _human
from tuner.report import plots


def _num(x, fmt="{:.3g}") -> str:
    return "—" if x is None else fmt.format(x)


def _summary_rows(doc):
    """Two tables, so neither needs a scrollbar: (latency and verification), (what fusion changed)."""
    timing_header = ["variant", "launches", "tuned kernels", "median ms", "p10", "p90", "std", "verify"]
    static_header = [
        "variant",
        "launch overhead",
        "traffic",
        "intermediate traffic",
        "removed vs none",
        "MFLOP",
        "recomputed MFLOP",
        "FLOP/B",
        "parallel extent (median / serial kernels)",
        "planned footprint",
        "weights",
    ]
    timing, static = [], []
    for name, v in doc["variants"].items():
        if v["status"] != "ok":
            timing.append([name, "FAILED"] + ["—"] * (len(timing_header) - 2))
            static.append([name] + ["—"] * (len(static_header) - 1))
            continue
        m = v["metrics"]
        vs = m.get("vs_unfused") or {}
        lat = v.get("latency_ms") or {}
        par = m["parallelism"]
        ver = v.get("verify")
        timing.append(
            [
                name,
                str(m["launches"]),
                str(v.get("tuned_kernels", 0)),
                *(_num(lat.get(k), "{:.3f}") for k in ("median", "p10", "p90", "std")),
                "—" if ver is None else ("PASS" if ver["ok"] else "FAIL") + f" ({ver.get('max_rel_err', 0):.1e})",
            ]
        )
        static.append(
            [
                name,
                _num(m["launch_overhead_us"], "{:.1f} µs"),
                _human(m["traffic_bytes"]),
                _human(m["intermediate_traffic_bytes"]),
                _num(vs.get("intermediate_traffic_removed_pct"), "{:.0f}%"),
                f"{m['flops'] / 1e6:.4g}",
                _num(None if vs.get("recomputed_flops") is None else vs["recomputed_flops"] / 1e6, "{:.4g}"),
                f"{m['intensity']:.2f}",
                f"{par['median']} / {par['serial_kernels']}",
                _human(m["planned_storage_bytes"]),
                _human(m["weight_bytes"]),
            ]
        )
    for peer, label in PEER_ROWS.items():
        ref = (doc.get("reference") or {}).get(peer)
        if ref:
            timing.append([label, "—", "—", *(f"{ref[k]:.3f}" for k in ("median", "p10", "p90", "std")), "—"])
    return (timing_header, timing), (static_header, static)


PEER_ROWS = {  # the peers timed beside the variants (compare --ort), as the timing table names them
    "onnxruntime": "ONNX Runtime as shipped (reference)",
    "onnxruntime_no_spin": "ONNX Runtime without spin-waiting",
    "openvino": "OpenVINO f32",
}


def _top_kernels(v, n=8):
    """One row per kernel (a PrimFunc launched several times is one row with its launch count)."""
    launches: dict = {}
    for k in v["kernels"]:
        if k.get("time_us"):
            launches.setdefault(k["kernel"], [k, 0])[1] += 1
    ks = sorted(launches.values(), key=lambda kc: -kc[0]["time_us"] * kc[1])[:n]
    rows = [
        [
            plots.onnx_label(k, width=48),
            str(c),
            f"{k['time_us']:.1f}",
            f"{k['time_us'] * c:.1f}",
            f"{k['flops'] / 1e6:.2f}",
            _human(k["bytes_total"]),
            f"{k['intensity']:.2f}",
            _num(k.get("gflops"), "{:.2f}"),
            f"{k['roofline_gflops']:.1f}",
            str(k["parallel_extent"]),
        ]
        for k, c in ks
    ]
    return [
        "kernel (ONNX ops · first node)",
        "launches",
        "µs each",
        "µs total",
        "MFLOP each",
        "bytes each",
        "FLOP/B",
        "GFLOP/s",
        "roofline GFLOP/s",
        "parallel",
    ], rows


def sections(doc, images: dict) -> list:
    mach = doc["machine"]
    s = [
        ("h1", f"Fusion report: {doc['model']['name']} on {doc['target']}"),
        ("p", "**" + doc["verdict"] + "**"),
        (
            "p",
            f"Model `{doc['model']['file']}` (sha256 {doc['model']['sha256'][:12]}), inputs "
            + ", ".join(f"{k} {v}" for k, v in doc["model"]["inputs"].items())
            + (f", computed in {doc['precision']}" if doc.get("precision", "float32") != "float32" else "")
            + f". TVM {doc['tvm_version']}. Variants: {', '.join(doc['variants'])}. "
            + (
                "Tuned variants got " + str(doc["tuning"]["trials_per_variant"]) + " trials each."
                if doc["tuning"] and "trials_per_variant" in doc["tuning"]
                else f"Tuned variants use the shared database `{doc['tuning']['shared_db']}`."
                if doc["tuning"]
                else "All variants use default schedules (untuned)."
            )
            + f" Latency: about {doc['repeat']} runs per variant, in alternating blocks of back-to-back runs (the"
            " first of each block dropped); peers, where timed, at the same threads (ONNX Runtime as shipped is"
            " the reference).",
        ),
        (
            "p",
            f"Machine: peak {mach['peak_gflops']:.0f} GFLOP/s ({mach['source']['peak_gflops']}), "
            f"{mach['peak_gbps']:.1f} GB/s ({mach['source']['peak_gbps']}), ridge {mach['ridge_flops_per_byte']:.1f} "
            f"FLOP/B; one kernel launch costs {_num(mach['launch_us'], '{:.2f} µs')} "
            f"({mach['source']['launch_us']}).",
        ),
        ("h2", "Summary: latency and verification"),
        ("table", *_summary_rows(doc)[0]),
        ("h2", "What fusion changed"),
        ("table", *_summary_rows(doc)[1]),
    ]
    failed = {n: v for n, v in doc["variants"].items() if v["status"] != "ok"}
    if failed:
        s.append(("h2", "Failed variants"))
        for n, v in failed.items():
            s.append(("p", f"`{n}`: {v['error']}"))
    for key, title in (
        ("latency", "Latency"),
        ("traffic_launches", "Launches and memory traffic"),
        ("roofline", "Roofline"),
        ("kernel_time", "Where the time goes"),
    ):
        if key in images:
            s += [("h2", title), ("img", images[key], title)]
    s.append(("h2", "Top kernels by time"))
    for n, v in doc["variants"].items():
        if v["status"] == "ok" and any(k.get("time_us") for k in v["kernels"]):
            s += [("h3", n), ("table", *_top_kernels(v))]
    s += [
        ("h2", "How each number is obtained"),
        (
            "p",
            "Launches: `call_tir` sites in the built module (reshape views excluded). Traffic: bytes of every "
            "tensor argument and output of each launch. Intermediate traffic: tensors one kernel writes and "
            "others read, once written plus once per reading kernel. FLOPs: `estimate_tir_flops` of each "
            "scheduled kernel; recomputed = FLOPs above the unfused variant's. Parallel extent: product of "
            "`T.parallel` loops (CPU) or grid × block (CUDA) in the schedule; untuned CPU kernels are serial. "
            "Footprint: intermediate storage after Relax's StaticPlanBlockMemory. Kernel times: the VM "
            "instrument hook, median of 5 inferences. Per-kernel and per-variant numbers are in "
            "`kernels.csv`, `variants.csv` and `report.json`.",
        ),
    ]
    return s


def to_markdown(secs) -> str:
    out = []
    for sec in secs:
        kind = sec[0]
        if kind.startswith("h"):
            out.append("#" * int(kind[1:]) + " " + sec[1])
        elif kind == "p":
            out.append(sec[1])
        elif kind == "table":
            header, rows = sec[1], sec[2]
            out.append("| " + " | ".join(header) + " |")
            out.append("|" + "|".join("---" for _ in header) + "|")
            out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
        elif kind == "img":
            out.append(f"![{sec[2]}]({sec[1]})")
        out.append("")
    return "\n".join(out)


def _inline_md(text: str) -> str:
    import re

    t = html.escape(text)
    t = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", t)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", t)


def to_html(secs, folder: str, title: str) -> str:
    body = []
    for sec in secs:
        kind = sec[0]
        if kind.startswith("h"):
            body.append(f"<{kind}>{_inline_md(sec[1])}</{kind}>")
        elif kind == "p":
            body.append(f"<p>{_inline_md(sec[1])}</p>")
        elif kind == "table":
            head = "".join(f"<th>{html.escape(h)}</th>" for h in sec[1])
            rows = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in sec[2])
            body.append(f"<div class='scroll'><table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>")
        elif kind == "img":
            with open(os.path.join(folder, sec[1]), "rb") as f:
                data = base64.b64encode(f.read()).decode()
            body.append(f'<figure><img alt="{html.escape(sec[2])}" src="data:image/png;base64,{data}"></figure>')
    style = (
        "body{font-family:system-ui,Helvetica,Arial,sans-serif;margin:2em auto;max-width:1200px;color:#222}"
        ".scroll{overflow-x:auto}table{border-collapse:collapse;font-size:12px;margin:0.5em 0 1.5em}"
        "td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}td:first-child,th:first-child{text-align:left}"
        "th{background:#f3f3f3}img{max-width:100%}code{background:#f3f3f3;padding:0 3px}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{style}</style></head><body>{''.join(body)}</body></html>"
    )


def _csv_frames(doc):
    import pandas as pd

    rows = []
    for name, v in doc["variants"].items():
        for k in v.get("kernels", []):
            rows.append({"variant": name, **k})
    kernels = pd.DataFrame(rows)
    summary = []
    for name, v in doc["variants"].items():
        row = {
            "variant": name,
            "strategy": v["strategy"],
            "tuned": v["tuned"],
            "status": v["status"],
            "error": v["error"],
        }
        if v["status"] == "ok":
            m = {k: x for k, x in v["metrics"].items() if not isinstance(x, (dict, list))}
            row.update(m)
            row.update({f"latency_{k}_ms": x for k, x in (v.get("latency_ms") or {}).items()})
        summary.append(row)
    return kernels, pd.DataFrame(summary)


def write_report(doc: dict, folder: str) -> dict:
    """Write every file into `folder`; returns {kind: file name}."""
    files = {}
    images = {}
    for key, fn in plots.ALL.items():
        name = f"{key}.png"
        if fn(doc, os.path.join(folder, name)):
            images[key] = name
    secs = sections(doc, images)
    title = f"Fusion report: {doc['model']['name']}"
    outputs = {
        "report.md": to_markdown(secs),
        "report.html": to_html(secs, folder, title),
        "report.json": json.dumps(doc, indent=2, default=str),
    }
    kernels, summary = _csv_frames(doc)
    outputs["kernels.csv"] = kernels.to_csv(index=False)
    outputs["variants.csv"] = summary.to_csv(index=False)
    for name, text in outputs.items():

        def write(tmp, text=text):
            with open(tmp, "w") as f:
                f.write(text)

        atomic_write(os.path.join(folder, name), write)
        files[name] = name
    files.update({k: v for k, v in images.items()})
    return files
