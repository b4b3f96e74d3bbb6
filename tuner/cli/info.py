"""`fusion-tuner info model.ftpkg`: what a package is, from its manifest, without loading its library."""

from __future__ import annotations

import argparse

from tuner.cli import common


def build_parser() -> argparse.ArgumentParser:
    p = common.parser("info")
    p.add_argument("package", help="a .ftpkg built by compile or tune-model")
    common.add_output_flags(p)
    return p


def main(argv: list[str]) -> int:
    args = common.parse(build_parser(), argv)
    from tuner.runtime.package import read_package

    manifest, members = read_package(args.package)  # digest, schema and checksums: nothing is loaded
    doc = describe(args.package, manifest, members)
    if args.json:
        common.print_json(doc)
    else:
        render(doc)
    return 0


def describe(path: str, m: dict, members: dict) -> dict:
    db = m.get("tuning_db") or {}
    return {
        "package": path,
        "model": m["model"],
        "inputs": m["inputs"],
        "outputs": m["outputs"],
        "target": m["target"]["key"],
        "num_threads": m.get("num_threads"),
        "fusion": m["fusion"],
        "layout": m.get("layout", "nchw"),  # packages before layouts were chosen are NCHW
        "precision": m.get("precision", "float32"),
        "kernels": m["kernels"],
        "tuned_kernels": db.get("applied", 0),
        # kernels on their default schedule: none in the database, or a record that is the default itself
        "default_scheduled": len(m.get("default_scheduled") or []) + len(db.get("default_records") or []),
        "other_kernels": max(
            0,
            m["kernels"]
            - db.get("applied", 0)
            - len(m.get("default_scheduled") or [])
            - len(db.get("default_records") or []),
        ),
        "tuning_db": db.get("db") or db.get("path"),
        "tvm_version": m["tvm_version"],
        "built_at": m.get("built_at"),
        "build_seconds": m.get("build_seconds"),
        "cuda_graph_regions": m.get("cuda_graph_regions"),
        "memory": m.get("memory"),
        "gpu_rules": m.get("gpu_rules"),
        "preparation": m.get("preparation") or [],
        "variants": [
            {
                "shapes": v["shapes"],
                "kernels": v["kernels"],
                "tuned_kernels": (v.get("tuning_db") or {}).get("applied", 0),
            }
            for v in m.get("variants") or []
        ],
        "members": {name: meta["bytes"] for name, meta in m["members"].items()},
    }


def _dims(spec: dict) -> str:
    """An input's shape as --input-shape writes it: 1x3x48x32..2048 for a ranged one."""
    ranges = spec.get("shape_range")
    if not ranges:
        return "x".join(str(d) for d in spec["shape"]) if spec["shape"] else "scalar"
    return "x".join(str(lo) if lo == hi else f"{lo}..{hi}" for lo, hi in ranges)


def render(doc: dict) -> None:
    from tuner.core.shapes import format_dims as format_shape

    con = common.console()
    con.print(f"[bold]{doc['package']}[/]: {doc['model']['file']} (sha256 {doc['model']['sha256'][:12]}…)")
    con.print(
        f"  built for {doc['target']} ({doc['num_threads']} threads), fusion={doc['fusion']}, "
        f"layout={doc['layout']}, {doc['precision']}, "
        f"TVM {doc['tvm_version']}, {doc['built_at']} in {doc['build_seconds']} s"
    )
    con.print(
        f"  {doc['kernels']} distinct kernels: {doc['tuned_kernels']} tuned"
        + (f" (database {doc['tuning_db']})" if doc["tuning_db"] else "")
        + f", {doc['default_scheduled']} on default schedules"
        + (
            f", {doc['other_kernels']} on dlight's GPU rules"
            if doc["other_kernels"] and doc["target"].startswith("cuda")
            else f", {doc['other_kernels']} as TVM lowers them (copies, reshapes and kernels too small to schedule)"
            if doc["other_kernels"]
            else ""
        )
    )
    rules = doc.get("gpu_rules") or {}
    if rules:
        con.print(
            "  GPU schedules (dlight rule: kernels): " + ", ".join(f"{r} {n}" for r, n in rules["kernels"].items())
        )
        for kernel, why in rules["fell_back"].items():
            con.print(f"    {kernel} scheduled by a later rule: {why}")
    for note in doc["preparation"]:
        con.print(f"  prepared: {note}")
    for side in ("inputs", "outputs"):
        con.print(f"  {side}: " + ", ".join(f"{t['name']} {t['dtype']}[{_dims(t)}]" for t in doc[side]))
    if doc["variants"]:
        con.print(
            "  a range of shapes: any shape in it runs on the build over symbolic dimensions; "
            f"{len(doc['variants'])} tune shape(s) have a build of their own:"
        )
        for v in doc["variants"]:
            shapes = " ".join(f"{n}:{format_shape(d)}" for n, d in v["shapes"].items())
            con.print(f"    {shapes}: {v['kernels']} kernels, {v['tuned_kernels']} tuned")
    mem = doc.get("memory") or {}
    if mem:
        con.print(
            f"  memory: {mem.get('weights_bytes', 0) / 2**20:.1f} MiB weights, "
            f"{mem.get('intermediate_bytes', 0) / 2**20:.1f} MiB intermediates per inference"
        )
    con.print("  members: " + ", ".join(f"{n} ({b / 2**20:.1f} MiB)" for n, b in doc["members"].items()))
