"""The compare report's one-paragraph verdict: what fusion changed, each other strategy against the chosen one,
and ONNX Runtime beside it; latencies worded by `stats.compare_stats` ("within noise" when ranges overlap)."""

from __future__ import annotations

from tuner.core.stats import compare_stats
from tuner.core.units import human_bytes as _human


def _fused_vs_none(doc, tuned: bool):
    """(none variant, chosen fused variant) for one tuning state: `tvm` when compared, else the first fused."""
    vs = [(n, v) for n, v in doc["variants"].items() if v["tuned"] == tuned and v["status"] == "ok"]
    none = next(((n, v) for n, v in vs if v["strategy"] == "none"), None)
    fused = [(n, v) for n, v in vs if v["strategy"] != "none"]
    chosen = next(((n, v) for n, v in fused if v["strategy"] == "tvm"), fused[0] if fused else None)
    return none, chosen


def verdict(doc) -> str:
    none_u, fused_u = _fused_vs_none(doc, False)
    none_t, fused_t = _fused_vs_none(doc, True)
    if not (none_u and fused_u) and not (none_t and fused_t):
        failed = [n for n, v in doc["variants"].items() if v["status"] != "ok"]
        fused = [st for st in doc["strategies"] if st != "none"]
        chosen = "tvm" if "tvm" in fused else (fused[0] if fused else "none")
        return (
            "no fused-vs-unfused pair could be compared"
            + (f" (failed: {', '.join(failed)})" if failed else " (compare `none` with a fused strategy)")
            + "."
            + _others_vs(doc, chosen)
        )
    none, fused = (none_u, fused_u) if none_u and fused_u else (none_t, fused_t)
    mn, mf = none[1]["metrics"], fused[1]["metrics"]
    removed = mf["vs_unfused"]["intermediate_traffic_removed_pct"]
    text = (
        f"fusion ({fused[1]['strategy']}) cut launches {mn['launches']} → {mf['launches']} and intermediate "
        f"traffic by {removed:.0f}% ({_human(mn['intermediate_traffic_bytes'])} → "
        f"{_human(mf['intermediate_traffic_bytes'])})"
    )
    ratios = []
    for label, pair in (("untuned", (none_u, fused_u)), ("tuned", (none_t, fused_t))):
        a, b = pair
        if a and b and a[1].get("latency_ms") and b[1].get("latency_ms"):
            ratios.append(f"{label} {compare_stats(b[1]['latency_ms'], a[1]['latency_ms'])['words']}")
    if ratios:
        text += "; fused latency vs unfused: " + ", ".join(ratios)
    elif not doc["measured"]:
        text += "; latency not measured (no device to run on)"
    return text + "." + _others_vs(doc, fused[1]["strategy"]) + _vs_onnxruntime(doc, fused[1]["strategy"])


def _vs_onnxruntime(doc, chosen: str) -> str:
    """ONNX Runtime beside the chosen strategy's best measured variant, when it was timed (--ort)."""
    ort = ((doc.get("reference") or {}).get("onnxruntime")) or None
    if not ort:
        return ""
    by = {(v["strategy"], v["tuned"]): v for v in doc["variants"].values() if v["status"] == "ok"}
    mine = next((by[k] for k in ((chosen, True), (chosen, False)) if k in by and by[k].get("latency_ms")), None)
    if not mine:
        return ""
    label = f"{chosen}/{'tuned' if mine['tuned'] else 'untuned'}"
    return (
        f" ONNX Runtime {ort['median']:.3f} ms, {label} {mine['latency_ms']['median']:.3f} ms: "
        f"{compare_stats(mine['latency_ms'], ort)['words']}."
    )


def _others_vs(doc, chosen: str) -> str:
    """One sentence per other fused strategy, against the chosen one: launches, and latency where measured."""
    by = {(v["strategy"], v["tuned"]): v for v in doc["variants"].values() if v["status"] == "ok"}
    out = []
    for strategy in doc["strategies"]:
        if strategy in ("none", chosen):
            continue
        parts = []
        for tuned in (False, True):
            mine, ref = by.get((strategy, tuned)), by.get((chosen, tuned))
            if not (mine and ref):
                continue
            label = "tuned" if tuned else "untuned"
            if not parts:
                parts.append(f"{mine['metrics']['launches']} launches vs {ref['metrics']['launches']}")
            if mine.get("latency_ms") and ref.get("latency_ms"):
                parts.append(f"{compare_stats(mine['latency_ms'], ref['latency_ms'])['words']} {label}")
        if parts:
            out.append(f" {strategy} vs {chosen}: " + ", ".join(parts) + ".")
    return "".join(out)


# --- sections: ("h", text) | ("p", text) | ("table", header, rows) | ("img", file, alt)
