"""The Python API: the commands as functions (`tuner.tune`, `tuner.compile`, `tuner.compare`; `tuner.load` for
deployment). Each takes the command's options as keyword arguments, with the CLI's names and defaults
(`--input-shape`/`--const` as `shapes`/`consts` dicts, `--no-verify` as `verify=False`; tests/test_api.py holds
them equal), calls the same function in `tuner.commands` as the CLI, and returns the document its `--json`
prints. Errors are `TunerError`s with the CLI's words. Importing this module imports no compiler."""

from __future__ import annotations


def tune(
    model: str,
    output: str,
    *,
    target: str = "auto",
    dtype: str = "float32",
    fusion: str = "tvm",
    layout: str = "auto",
    trials: int | None = None,
    max_trials_per_task: int | None = None,
    time_budget: str | float | None = None,
    early_stopping: int | None = None,
    db: str | None = None,
    resume: bool = False,
    schedules: str | None = "auto",
    only: tuple = (),
    skip: tuple = (),
    cost_model: str = "xgb",
    search: str = "evolutionary",
    measure_cache: str = "warm",
    rank: str = "headroom",
    space: str = "template",
    trials_per_iter: int | None = None,
    seed: int | None = None,
    rpc: str | None = None,
    verify: bool = True,
    shapes: dict | None = None,
    consts: dict | None = None,
    tune_shapes: list[dict] | None = None,
) -> dict:
    """`tune-model`: tune every fused kernel of `model` (an ONNX path) and write the tuned package to `output`.

    `time_budget` ("10m", "90s" or seconds as a number) tunes until it is spent; `trials` caps measured
    candidates (64 when neither is given). Returns the summary: trials, why tuning stopped, tuned and untuned
    latency, ONNX Runtime's latency and the verification against it."""
    from tuner.commands.tune_model import knobs_from_options, tune_model

    knobs = knobs_from_options(
        trials=trials,
        time_budget=time_budget,
        max_trials_per_task=max_trials_per_task,
        trials_per_iter=trials_per_iter,
        early_stopping=early_stopping,
        cost_model=cost_model,
        search=search,
        seed=seed,
        only=only,
        skip=skip,
        rpc=rpc,
        measure_cache=measure_cache,
        rank=rank,
        space=space,
        budget_flag="time_budget",
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
        precision=dtype,
        verify=verify,
        layout=layout,
        tune_shapes=tune_shapes,
    )


def compile(
    model: str,
    output: str,
    *,
    target: str = "auto",
    dtype: str = "float32",
    fusion: str = "tvm",
    layout: str = "auto",
    db: str | None = None,
    shapes: dict | None = None,
    consts: dict | None = None,
    tune_shapes: list[dict] | None = None,
) -> dict:
    """`compile`: import, fuse, apply the tuning database `db` when given (kernels it lacks get the default
    schedule), build, and write the package to `output`. Returns the summary `compile --json` prints. A shape
    with a range, `shapes={"x": (1, 3, 48, (32, 2048))}`, builds one package for every shape in it."""
    from tuner.commands.compile import compile_model, compile_summary

    result, manifest = compile_model(
        model,
        output,
        target=target,
        fusion=fusion,
        db=db,
        shapes=shapes,
        consts=consts,
        layout=layout,
        precision=dtype,
        tune_shapes=tune_shapes,
    )
    return compile_summary(output, result, manifest)


def compare(
    model: str,
    output: str,
    *,
    target: str = "auto",
    dtype: str = "float32",
    fusion: str = "none,tvm",
    db: str | None = None,
    trials: int | None = None,
    ort: bool = False,
    repeat: int = 20,
    peak_gflops: float | None = None,
    peak_gbps: float | None = None,
    force: bool = False,
    shapes: dict | None = None,
    consts: dict | None = None,
    log=None,
) -> dict:
    """`compare`: build `model` under each fusion strategy (untuned, and tuned with `trials` each or from `db`),
    measure what fusion changes and write report.md/html/json and plots to the folder `output`; `ort` times ONNX
    Runtime beside them. Returns the report's document (`doc["verdict"]` is its one-line finding). `log`
    receives progress lines (silent by default)."""
    from tuner.commands.compare import compare as run_compare

    return run_compare(
        model,
        output,
        target=target,
        fusion=fusion,
        db=db,
        trials=trials,
        ort=ort,
        repeat=repeat,
        shapes=shapes,
        consts=consts,
        force=force,
        peak_gflops=peak_gflops,
        peak_gbps=peak_gbps,
        precision=dtype,
        log=log or (lambda *_: None),
    )
