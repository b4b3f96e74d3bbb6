"""The `compile` command's work: ONNX file -> prepared graph -> fused kernels -> (tuning records) -> package."""

from __future__ import annotations

import time

from tuner.build.executable import BuildResult, build_prepared, write_build
from tuner.core.errors import TunerError
from tuner.core.target import resolve_target
from tuner.frontend.onnx_model import prepare_model
from tuner.fusion import get_strategy
from tuner.runtime.package import check_writable
from tuner.transform.layout import resolve_layout


def compile_model(
    model: str,
    output: str,
    target: str = "auto",
    fusion: str = "tvm",
    db: str | None = None,
    shapes: dict | None = None,
    consts: dict | None = None,
    precision: str | None = None,
    cuda_graph: bool = True,
    layout: str = "auto",
    tune_shapes: list[dict] | None = None,
) -> tuple[BuildResult, dict]:
    """The `compile` command's work: returns the build (for a range of shapes, the generic one) and the manifest
    written to `output`."""
    strategy = get_strategy(fusion)
    target_spec = resolve_target(target)
    resolve_layout(layout, target_spec)  # refuse a bad layout before any work
    check_writable(output)
    t0 = time.perf_counter()
    prepared = prepare_model(model, shapes, consts, precision=precision)
    if prepared.ranged:  # one package for every shape in the ranges (tuner/build/ranged.py)
        from tuner.build.ranged import compile_ranged

        db_dir = resolve_db(db, prepared, target_spec)
        args = (model, prepared, target_spec, strategy, db_dir, output, tune_shapes, layout, consts, precision)
        build, manifest = compile_ranged(*args)
        return build.generic, manifest
    if tune_shapes:
        raise TunerError("--tune-shape needs a range in --input-shape", "e.g. --input-shape x:1x3x48x32..2048")
    result = build_prepared(prepared, target_spec, strategy, resolve_db(db, prepared, target_spec), cuda_graph, layout)
    manifest = write_build(result, output, time.perf_counter() - t0)
    return result, manifest


def resolve_db(db: str | None, prepared, target_spec) -> str | None:
    """--db: a folder as given; 'none' for no database; by default the cache's database of this model and target
    when tune-model has filled one."""
    if db is not None:
        return None if db.lower() == "none" else db
    from tuner.tuning.database.store import cached_db_dir

    return cached_db_dir(prepared, target_spec)


def compile_summary(output: str, result: BuildResult, manifest: dict) -> dict:
    """What `compile --json` prints and `tuner.compile` returns."""
    return {
        "package": output,
        "target": manifest["target"]["key"],
        "fusion": manifest["fusion"],
        "precision": manifest["precision"],
        "kernels": manifest["kernels"],
        "build_seconds": manifest["build_seconds"],
        "timings": result.timings,
        "preparation": manifest["preparation"],
        "tuning_db": manifest["tuning_db"],
        "gpu_rules": manifest.get("gpu_rules"),
    }
