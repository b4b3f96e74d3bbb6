"""Packages for a range of shapes: one build over symbolic dimensions, and one pinned to each tune shape.

    --input-shape x:1x3x48x32..2048   --tune-shape x:1x3x48x320 --tune-shape x:1x3x48x1280

The build over symbolic dimensions (the generic build) runs every shape in the range: its kernels take the
schedules of their twins at the first tune shape (tuner/schedule/symbolic.py), and the VM sizes its memory for
the top of the ranges. Each tune shape also gets a build of its own, the package `--input-shape` of that shape
gives (tuned records, Winograd where it pays, every size known to every pass), and the loader sends a call whose
input shapes are a tune shape there. The cost is size: the weights are in every build (a package with two tune
shapes holds them three times). CUDA packages have the generic build only: dlight's rules schedule symbolic
extents as they are.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from tuner.core.shapes import default_tune_shapes


@dataclass
class RangedBuild:
    generic: object  # BuildResult over symbolic dimensions
    variants: list = field(default_factory=list)  # [(tune shape {input: dims}, BuildResult)]

    @property
    def num_kernels(self) -> int:
        return self.generic.num_kernels


def dim_values(prepared, pinned: dict) -> dict[str, int]:
    """{symbolic dimension: its size in `pinned`}: the sizes the generic build's kernels are scheduled at."""
    from tuner.frontend.onnx_model import symbolic_dim_names

    names = symbolic_dim_names({i.name: i for i in prepared.inputs}, prepared.shapes)
    return {n: pinned[inp][axis] for inp, row in names.items() for axis, n in enumerate(row) if n is not None}


def tune_shapes_for(prepared, given: list[dict] | None) -> list[dict]:
    """--tune-shape as given (each inside the ranges), else the middle and the top of every range. A tune shape
    may leave out the pinned inputs, and inputs whose dimensions the given ones fix (attention_mask beside
    input_ids)."""
    from tuner.core.shapes import check_within, normalize_shapes

    if not given:
        return default_tune_shapes(prepared.shapes)
    out = []
    for pinned in given:
        full = _completed(prepared, normalize_shapes(pinned))
        check_within(prepared.shapes, full)
        out.append(full)
    return out


def _completed(prepared, pinned: dict) -> dict:
    from tuner.core.shapes import DimRange
    from tuner.frontend.onnx_model import symbolic_dim_names

    names = symbolic_dim_names({i.name: i for i in prepared.inputs}, prepared.shapes)
    sizes = {n: pinned[i][a] for i, row in names.items() if i in pinned for a, n in enumerate(row) if n is not None}
    full = dict(pinned)
    for inp, shape in prepared.shapes.items():
        if inp in full:
            continue
        dims = [sizes.get(n) if isinstance(d, DimRange) else d for d, n in zip(shape, names[inp])]
        if all(d is not None for d in dims):
            full[inp] = tuple(dims)
    return full


def prepare_pinned(source, pinned: dict, consts=None, precision=None):
    """The model prepared at one tune shape, as `--input-shape` of that shape prepares it."""
    from tuner.frontend.onnx_model import prepare_model

    return prepare_model(source, pinned, consts, precision=precision)


def build_ranged(
    source,
    prepared,
    target_spec,
    strategy,
    db_dir: str | None = None,
    tune_shapes: list[dict] | None = None,
    layout: str = "auto",
    consts=None,
    precision=None,
    variant_builder=None,
) -> RangedBuild:
    """The generic build and one per tune shape. `variant_builder(pinned_prepared) -> BuildResult` replaces the
    plain build of a variant (tune-model passes its in-model record check)."""
    from tuner.build.executable import build_lowered, build_prepared, lower_prepared

    shapes = tune_shapes_for(prepared, tune_shapes)
    lowered = lower_prepared(prepared, target_spec, strategy, layout=layout)
    lowered.dim_values = dim_values(prepared, shapes[0])
    generic = build_lowered(lowered, db_dir)
    variants = []
    if not target_spec.is_gpu:
        for pinned in shapes:
            p = prepare_pinned(source, pinned, consts, precision)
            build = (
                variant_builder(p)
                if variant_builder
                else build_prepared(p, target_spec, strategy, db_dir, layout=layout)
            )
            variants.append((pinned, build))
    return RangedBuild(generic, variants)


def write_ranged(build: RangedBuild, output: str, build_seconds: float) -> dict:
    """The package: the generic build as model.so, each tune shape's as variants/N.so."""
    from tuner.build.executable import export_library_bytes, manifest_for, output_specs
    from tuner.runtime.package import LIBRARY, write_package

    generic = build.generic
    members = {LIBRARY: export_library_bytes(generic.executable, generic.target)}
    manifest = manifest_for(generic, build_seconds)
    if build.variants:  # `inputs[].shape` (what generated inputs take) is the first tune shape, outputs at it
        first = build.variants[0][0]
        manifest["inputs"] = [{**spec, "shape": list(first[spec["name"]])} for spec in manifest["inputs"]]
        manifest["outputs"] = output_specs(build.variants[0][1])
    else:
        manifest["outputs"] = _sized(manifest["outputs"])
    manifest["variants"] = []
    for k, (pinned, result) in enumerate(build.variants):
        name = f"variants/{k}.so"
        members[name] = export_library_bytes(result.executable, result.target)
        manifest["variants"].append(
            {
                "library": name,
                "shapes": {i: list(d) for i, d in pinned.items()},
                "kernels": result.num_kernels,
                "tuning_db": result.db_info,
                "default_scheduled": result.default_scheduled,
            }
        )
    if generic.target.is_gpu:
        from tuner.runtime.device_code import package_members

        device, manifest["device_code"] = package_members(generic.executable, generic.target)
        members.update(device)
    return write_package(output, members, manifest)


def _sized(outputs: list[dict]) -> list[dict]:
    """Output specs with each symbolic dimension as 0 (the manifest's shapes are numbers; the VM sizes them)."""
    return [{**o, "shape": [d if isinstance(d, int) else 0 for d in o["shape"]]} for o in outputs]


def compile_ranged(source, prepared, target_spec, strategy, db_dir, output, tune_shapes, layout, consts, precision):
    """`compile` of a ranged model: (RangedBuild, manifest)."""
    t0 = time.perf_counter()
    build = build_ranged(source, prepared, target_spec, strategy, db_dir, tune_shapes, layout, consts, precision)
    return build, write_ranged(build, output, time.perf_counter() - t0)
