"""The Python API: what the commands do, as functions (`tuner.tune`, `tuner.compile`, `tuner.compare`; `tuner.load`
for deployment). Each takes the command's options as keyword arguments and returns the document its `--json`
prints; errors are `TunerError`s with the same words as the CLI's. Importing this module imports no compiler:
each function loads TVM and ONNX when it is called."""

from __future__ import annotations


def tune(
    model: str,
    output: str,
    *,
    time_budget: str | float | None = None,
    trials: int | None = None,
    target: str = "auto",
    fusion: str = "tvm",
    db: str | None = None,
    resume: bool = False,
    schedules: str | None = "auto",
    shapes: dict | None = None,
    consts: dict | None = None,
    layout: str = "auto",
    verify: bool = True,
    seed: int | None = None,
) -> dict:
    """`tune-model`: tune every fused kernel of `model` (an ONNX path) and write the tuned package to `output`.

    `time_budget` ("10m", "90s" or seconds) tunes until it is spent; `trials` caps measured candidates (64 when
    neither is given). Returns the summary: trials, why tuning stopped, tuned and untuned latency, ONNX Runtime's
    latency and the verification against it."""
    from .interface.tune_model import tune_model
    from .tuning import Knobs
    from .tuning.knobs import UNLIMITED
    from .units import parse_duration

    budget_s = parse_duration(time_budget, "time_budget")
    knobs = Knobs(
        trials=trials if trials is not None else (UNLIMITED if budget_s else 64), time_budget_s=budget_s, seed=seed
    )
    return tune_model(
        model,
        output,
        target=target,
        fusion=fusion,
        knobs=knobs,
        db=db,
        resume=resume,
        schedules=schedules,
        shapes=shapes,
        consts=consts,
        verify=verify,
        layout=layout,
    )


def compile(
    model: str,
    output: str,
    *,
    target: str = "auto",
    fusion: str = "tvm",
    db: str | None = None,
    shapes: dict | None = None,
    consts: dict | None = None,
    layout: str = "auto",
) -> dict:
    """`compile`: import, fuse, apply the tuning database `db` when given (kernels it lacks get the default
    schedule), build, and write the package to `output`. Returns the package's manifest."""
    from .interface.compile import compile_model

    _, manifest = compile_model(
        model, output, target=target, fusion=fusion, db=db, shapes=shapes, consts=consts, layout=layout
    )
    return manifest


def compare(
    model: str,
    output_dir: str,
    *,
    fusion: str = "none,tvm",
    target: str = "auto",
    trials: int | None = None,
    db: str | None = None,
    ort: bool = True,
    repeat: int = 20,
    shapes: dict | None = None,
    consts: dict | None = None,
    force: bool = False,
    log=None,
) -> dict:
    """`compare`: build `model` under each fusion strategy (untuned, and tuned with `trials` each or from `db`),
    measure what fusion changes and write report.md/html/json and plots to `output_dir`. Returns the report's
    document (`doc["verdict"]` is its one-line finding). `log` receives progress lines (silent by default)."""
    from .comparison.driver import compare as run_compare

    return run_compare(
        model,
        output_dir,
        target=target,
        fusion=fusion,
        db=db,
        trials=trials,
        ort=ort,
        repeat=repeat,
        shapes=shapes,
        consts=consts,
        force=force,
        log=log or (lambda *_: None),
    )
