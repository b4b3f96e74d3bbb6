"""tune-model: MetaSchedule search over every fused kernel, with budget accounting, resume and kill safety.

The loop, in rounds (so time budgets, Ctrl-C and progress have a place to act):

    tasks   = extract_tasks(fused module)            # one per distinct fused kernel
    tasks  -= trivial (FLOPs < knobs.trivial_flops) and --only/--skip filters
    tasks   = the heaviest (FLOPs x weight) when the budget cannot give each one search iteration
    done    = trials already recorded per task        # from the database files, not a counter we keep
    while budget left and time left:
        tune_tasks(round of trials, gradient task scheduler, XGB cost model shared across rounds)
        save cost model + manifest                    # a kill loses at most the round in flight
"""

from __future__ import annotations

import fnmatch
import logging
import os
import re
import time
from dataclasses import dataclass, field

from .errors import TunerError


@dataclass(frozen=True)
class Knobs:
    """Every tuning knob in one place."""

    trials: int = 64  # total for the model, over all tasks
    max_trials_per_task: int | None = None
    num_trials_per_iter: int = 8
    round_trials: int | None = None  # default: 4 iterations per task per round
    time_budget_s: float | None = None
    early_stopping: int | None = None  # stop after this many rounds without improvement
    trivial_flops: float = 4e3  # below this a kernel keeps its default schedule
    cost_model: str = "xgb"  # xgb | random
    search: str = "evolutionary"  # evolutionary | replay-trace
    seed: int | None = None
    only: tuple = ()
    skip: tuple = ()
    builder_timeout_s: float = 60.0
    runner_timeout_s: float = 30.0
    rpc: str | None = None  # TRACKER_HOST:PORT:KEY: measure on remote devices (a GPU box) instead of here


def parse_rpc(text: str) -> tuple[str, int, str]:
    """`host:port:key` -> (host, port, key), with a clear error for anything else."""
    parts = text.rsplit(":", 2)
    if len(parts) != 3 or not parts[0] or not parts[2] or not parts[1].isdigit():
        raise TunerError(f"--rpc {text!r}: write TRACKER_HOST:PORT:KEY, e.g. 127.0.0.1:9190:h200",
                         "the key is the one the devices' rpc_server registered with (--key)")
    return parts[0], int(parts[1]), parts[2]


def check_rpc(text: str) -> int:
    """Ask the tracker how many devices serve the key; refuse before tuning when none can be reached."""
    import socket

    from tvm import rpc

    host, port, key = parse_rpc(text)
    try:
        socket.create_connection((host, port), timeout=3).close()  # TVM's own connect retries for a minute
        summary = rpc.connect_tracker(host, port).summary()
    except Exception as err:
        raise TunerError(f"--rpc: cannot reach the RPC tracker at {host}:{port} "
                         f"({str(err).strip().splitlines()[-1][:120] if str(err).strip() else type(err).__name__})",
                         "start one with `python -m tvm.exec.rpc_tracker --port PORT` and register devices with "
                         "`python -m tvm.exec.rpc_server --tracker HOST:PORT --key KEY`") from None
    free = int(summary.get("queue_info", {}).get(key, {}).get("free", 0))
    servers = [s for s in summary.get("server_info", []) if str(s.get("key", "")).split(":")[-1] == key]
    if not servers and not free:
        known = sorted({str(s.get("key", "")).split(":")[-1] for s in summary.get("server_info", [])})
        raise TunerError(f"--rpc: no device is registered with key {key!r} at {host}:{port}",
                         f"keys registered there: {', '.join(known) or 'none'}")
    return max(len(servers), free)


def _runner(knobs: Knobs):
    from tvm.s_tir import meta_schedule as ms

    if not knobs.rpc:
        return ms.runner.LocalRunner(timeout_sec=knobs.runner_timeout_s)
    host, port, key = parse_rpc(knobs.rpc)
    config = ms.runner.RPCConfig(tracker_host=host, tracker_port=port, tracker_key=key,
                                 session_timeout_sec=int(knobs.runner_timeout_s * 2))
    return ms.runner.RPCRunner(rpc_config=config, max_workers=1)


# TVM 0.27: StorageRewrite lets an fp32 accumulator stage reuse an fp16 shared buffer, and the typed
# tvm_access_ptr of the WMMA store then fails its dtype check ("tvm_access_ptr element type must match the source
# buffer"): 6 of 8 sampled f16f16f32 schedules failed to build. Tensorized kernels build without that rewrite.
TENSOR_CORE_BUILD_CONFIG = {"tirx.disable_storage_rewrite": True}
_TENSOR_CORE_MARK = re.compile(r"tensorize|mma_sync|wmma|ldmatrix")


def uses_tensor_cores(mod) -> bool:
    """Does any kernel use WMMA/MMA (tensorized, or lowered to the intrinsics' calls)?"""
    import tvm

    return any(isinstance(f, tvm.tirx.PrimFunc) and _TENSOR_CORE_MARK.search(f.script())
               for f in mod.functions.values())


def fast_build(mod, target, _params):
    """MetaSchedule's default build, minus importing every tensor intrinsic (~20 s) in each fresh worker:
    the intrinsics are imported only when the candidate was tensorized."""
    import tvm
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    script = mod.script(show_meta=False)
    if "tensorize" in script:
        import tvm.s_tir.tensor_intrin  # noqa: F401
    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    with tvm.transform.PassContext(config=TENSOR_CORE_BUILD_CONFIG if _TENSOR_CORE_MARK.search(script) else {}):
        return tvm_build(mod, target=target)


def half_precision(mod) -> bool:
    """Does any kernel compute in fp16/bf16 (where CUDA tensor cores apply)?"""
    import tvm

    # TVM 0.27's Python PrimFunc exposes no buffer map: read the dtypes from the printed TIR (once per tuning run)
    return any(isinstance(f, tvm.tirx.PrimFunc) and ('"float16"' in f.script() or '"bfloat16"' in f.script())
               for f in mod.functions.values())


def design_space(target_spec, mod):
    """MetaSchedule's design space for a target. CUDA: thread binding, shared-memory tiling, cross-thread
    reduction; when the model computes in fp16/bf16, also the tensor-core (WMMA/MMA) tiling rules, which fall
    back to the plain CUDA rules for blocks they cannot tensorize. CPU: TVM's llvm rules."""
    from tvm.s_tir import meta_schedule as ms

    if target_spec.is_gpu and half_precision(mod):
        import tvm.s_tir.tensor_intrin  # noqa: F401  (registers the WMMA/MMA intrinsics the rules name; ~20 s)

        return ms.space_generator.PostOrderApply(sch_rules="cuda-tensorcore", postprocs="cuda-tensorcore",
                                                 mutator_probs="cuda-tensorcore")
    return "post-order-apply"


def _bare_context(task, space, seed=None, search: str = "evolutionary"):
    """A TuneContext with no logger: MetaSchedule's per-task loggers reconfigure console logging on creation."""
    from tvm.s_tir import meta_schedule as ms

    return ms.TuneContext(mod=task.dispatched[0], target=task.target, space_generator=space,
                          search_strategy=search, task_name=task.task_name, num_threads=1,
                          rand_state=-1 if seed is None else seed).clone()


@dataclass
class SampledTask:
    task: object  # MetaSchedule ExtractedTask
    design_spaces: int
    candidates: list  # MeasureCandidate, post-processed as the tuner would measure them


def sample_candidates(fused_mod, target_spec, max_tasks: int = 2, per_task: int = 4,
                      seed: int = 0) -> list[SampledTask]:
    """For the heaviest kernels: schedules drawn at random from the design space the tuner would search, and
    post-processed. Replay-trace sampling, not evolution: a build check needs no cost model, and evolutionary
    search's initial population (thousands of post-processed schedules) took 150 s per fp16 task on 2 cores."""
    from tvm.s_tir import meta_schedule as ms

    tasks = [t for t in ms.relax_integration.extract_tasks(fused_mod, target_spec.tvm_target())
             if _task_flops(t.dispatched[0]) >= Knobs.trivial_flops]
    tasks = sorted(tasks, key=lambda t: _task_flops(t.dispatched[0]) * t.weight, reverse=True)[:max_tasks]
    space = design_space(target_spec, fused_mod)
    out = []
    for task in tasks:
        ctx = _bare_context(task, space, seed, search="replay-trace")
        spaces = ctx.generate_design_space()
        ctx.pre_tuning(max_trials=per_task, num_trials_per_iter=per_task, design_spaces=spaces,
                       database=ms.database.MemoryDatabase(), cost_model=ms.cost_model.RandomModel())
        out.append(SampledTask(task, len(spaces), list(ctx.generate_measure_candidates() or [])))
    return out


def build_candidates(fused_mod, target_spec, max_tasks: int = 2, per_task: int = 4, seed: int = 0) -> list[dict]:
    """The part of tuning that needs no device: sample candidates of the heaviest kernels (`sample_candidates`)
    and build them as the tuner would (for CUDA: each must be thread-bound). What a GPU run would then measure;
    on a machine without one this checks that the CUDA search space and builder work."""
    from tvm.s_tir import meta_schedule as ms

    target = target_spec.tvm_target()
    builder = ms.builder.LocalBuilder(f_build=fast_build, max_workers=target_spec.config.get("num-cores", 1) or 1,
                                      timeout_sec=Knobs.builder_timeout_s)
    out = []
    for sampled in sample_candidates(fused_mod, target_spec, max_tasks, per_task, seed):
        cands, spaces = sampled.candidates, sampled.design_spaces
        built = builder.build([ms.builder.BuilderInput(c.sch.mod, target) for c in cands])
        scripts = [c.sch.mod.script() for c in cands]
        out.append({"task": sampled.task.task_name, "design_spaces": spaces, "candidates": len(cands),
                    "built": sum(b.error_msg is None for b in built),
                    "errors": [b.error_msg.strip().splitlines()[-1][:200] for b in built if b.error_msg],
                    "thread_bound": (sum('"threadIdx.' in s for s in scripts) if target_spec.is_gpu else None),
                    "tensor_core": sum(bool(_TENSOR_CORE_MARK.search(s)) for s in scripts)})
    return out


@dataclass
class TaskState:
    name: str
    flops: float
    weight: int
    workload_hash: str
    trials: int = 0
    best_ms: float | None = None
    skipped: str | None = None  # why it is not tuned
    space: object = None  # the design space it is tuned in (set by _with_design_space)
    note: str | None = None  # e.g. tuned in a reduced design space

    @property
    def gflops(self) -> float | None:
        return self.flops / (self.best_ms * 1e-3) / 1e9 if self.best_ms and self.flops else None

    def to_json(self):
        return {"task": self.name, "flops": self.flops, "weight": self.weight, "trials": self.trials,
                "best_ms": self.best_ms, "gflops": self.gflops, "skipped": self.skipped, "note": self.note,
                "workload_hash": self.workload_hash}


@dataclass
class TuneResult:
    db_dir: str
    tasks: list[TaskState]
    trials_this_run: int
    trials_total: int
    wall_s: float
    stopped: str  # budget | time | early-stopping | interrupted | nothing-to-do
    shared_workloads: int = 0
    repairs: list = field(default_factory=list)


def _task_flops(mod) -> float:
    import tvm

    try:
        return float(tvm.s_tir.analysis.estimate_tir_flops(mod))
    except Exception:
        return 0.0


def _selected(name: str, knobs: Knobs) -> str | None:
    if knobs.only and not any(fnmatch.fnmatch(name, p) or p in name for p in knobs.only):
        return "not selected by --only"
    if any(fnmatch.fnmatch(name, p) or p in name for p in knobs.skip):
        return "excluded by --skip"
    return None


def tune(fused_mod, target_spec, db_dir: str, knobs: Knobs, resume: bool, model_key: str, fusion: str,
         progress=None) -> TuneResult:
    import tvm
    from filelock import FileLock, Timeout
    from tvm.s_tir import meta_schedule as ms

    from . import database as D

    os.makedirs(db_dir, exist_ok=True)
    lock = FileLock(os.path.join(db_dir, D.LOCK))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise TunerError(f"tuning database {db_dir} is in use by another tune-model run",
                         "wait for it to finish, or tune into another --db") from None
    try:
        db, manifest, repairs = D.open_database(db_dir, target_spec, create=True)
        manifest = manifest or D.new_manifest(target_spec, fusion)
        wall_before = float(manifest.get("wall_seconds", 0.0))
        target = target_spec.tvm_target()
        extracted = ms.relax_integration.extract_tasks(fused_mod, target)
        hashes = D.workload_hashes(db_dir)
        counts = D.record_counts(db_dir)
        states, tunable = [], []
        shared = 0
        for t in extracted:
            h = str(__import__('tvm_ffi').structural_hash(t.dispatched[0]))
            st = TaskState(t.task_name, _task_flops(t.dispatched[0]), int(t.weight), h)
            if h in hashes:
                c = counts.get(hashes.index(h), {})
                st.trials, st.best_ms = c.get("trials", 0), (c["best_s"] * 1e3 if c.get("best_s") else None)
                if st.trials and model_key not in manifest.get("models", {}):
                    shared += 1
            st.skipped = _selected(t.task_name, knobs) or (
                f"trivial ({st.flops:.0f} FLOPs < {knobs.trivial_flops:.0f}): default schedule"
                if st.flops < knobs.trivial_flops else None)
            states.append(st)
            if not st.skipped:
                tunable.append((t, st))
        tunable = _with_design_space(tunable, target_spec, fused_mod)
        done_before = sum(st.trials for _, st in tunable) if resume else 0
        budget = max(0, knobs.trials - done_before)
        if knobs.max_trials_per_task:
            tunable = [(t, st) for t, st in tunable if not resume or st.trials < knobs.max_trials_per_task]
        # The gradient scheduler first gives every task one iteration, in task order: with a budget smaller than
        # that, spend it on the kernels with the most work instead of the first ones.
        fits = max(1, budget // knobs.num_trials_per_iter)
        if budget and len(tunable) > fits:
            ranked = sorted(tunable, key=lambda ts: ts[1].flops * ts[1].weight, reverse=True)
            for _, st in ranked[fits:]:
                st.skipped = f"budget covers {fits} task(s); lower-FLOP kernel left on its default schedule"
            keep = {id(st) for _, st in ranked[:fits]}
            tunable = [(t, st) for t, st in tunable if id(st) in keep]
        console_level = logging.getLogger("tvm.s_tir.meta_schedule").level  # before MetaSchedule reconfigures it
        start = time.time()
        spent, stopped, stale_rounds, best_total = 0, "budget", 0, None
        cost_model = ms.cost_model.CostModel.create(knobs.cost_model, num_tuning_cores=target_spec.config.get("num-cores", 1)) \
            if knobs.cost_model != "xgb" else ms.cost_model.XGBModel(num_tuning_cores=target_spec.config.get("num-cores", 1))
        cm_path = os.path.join(db_dir, D.COST_MODEL)
        if resume and knobs.cost_model == "xgb" and os.path.exists(cm_path):
            cost_model.load(cm_path)  # resume with what the model learned, not from scratch
        builder = ms.builder.LocalBuilder(f_build=fast_build, timeout_sec=knobs.builder_timeout_s,
                                          max_workers=target_spec.config.get("num-cores", 1))
        runner = _runner(knobs)
        round_trials = knobs.round_trials or max(knobs.num_trials_per_iter * 4 * max(1, len(tunable)), 16)
        if not tunable or budget == 0:
            stopped = "nothing-to-do"
        try:
            while tunable and spent < budget:
                if knobs.time_budget_s and time.time() - start >= knobs.time_budget_s:
                    stopped = "time"
                    break
                this_round = min(round_trials, budget - spent)
                contexts, weights = _contexts(tunable, os.path.join(db_dir, "logs"), console_level=console_level,
                                              strategy=knobs.search, num_threads=target_spec.config.get("num-cores", 1),
                                              seed=knobs.seed)
                before = sum(D.record_counts(db_dir).get(i, {}).get("trials", 0) for i in range(len(D.workload_hashes(db_dir))))
                ms.tune.tune_tasks(tasks=contexts, task_weights=weights, work_dir=os.path.join(db_dir, "logs"),
                                   max_trials_global=this_round, max_trials_per_task=knobs.max_trials_per_task,
                                   num_trials_per_iter=knobs.num_trials_per_iter, builder=builder, runner=runner,
                                   database=db, cost_model=cost_model, task_scheduler="gradient")
                after_counts = D.record_counts(db_dir)
                hashes = D.workload_hashes(db_dir)
                ran = sum(c["trials"] for c in after_counts.values()) - before
                spent += max(ran, 0)
                _refresh(states, hashes, after_counts)
                _save_progress(D, db_dir, manifest, states, model_key, fusion, time.time() - start, cost_model, knobs,
                               wall_before)
                if progress:
                    progress(states, spent, budget, time.time() - start)
                total = _weighted_latency(states)
                if best_total is not None and total is not None and total >= best_total * 0.999:
                    stale_rounds += 1
                else:
                    stale_rounds, best_total = 0, total
                if knobs.early_stopping and stale_rounds >= knobs.early_stopping:
                    stopped = "early-stopping"
                    break
                if ran <= 0:
                    stopped = "search space exhausted"
                    break
        except KeyboardInterrupt:
            stopped = "interrupted"
        _refresh(states, D.workload_hashes(db_dir), D.record_counts(db_dir))
        _save_progress(D, db_dir, manifest, states, model_key, fusion, time.time() - start, cost_model, knobs,
                               wall_before)
        total_trials = sum(s.trials for s in states)
        return TuneResult(db_dir, states, spent, total_trials, time.time() - start, stopped, shared, repairs)
    finally:
        lock.release()


def reduced_space(target_spec):
    """The target's rules without multi-level tiling: parallelise, vectorise, unroll, rfactor, inline and
    compute-location only. For fused kernels whose full design space TVM cannot generate."""
    from tvm.s_tir import meta_schedule as ms

    kind = "cuda" if target_spec.is_gpu else "llvm"
    rules = [r for r in ms.schedule_rule.ScheduleRule.create(kind) if "MultiLevelTiling" not in type(r).__name__]
    return ms.space_generator.PostOrderApply(sch_rules=rules, postprocs=kind, mutator_probs=kind)


def _with_design_space(tunable, target_spec, fused_mod):
    """Choose each task's design space before tuning. MetaSchedule's multi-level tiling rule fails on some fused
    kernels (reverse_compute_at of an epilogue fed by two reductions: our LayerNorm and attention groups), and
    one such task aborts tune_tasks for every task. Those get the reduced space; a task that fails that too keeps
    its default schedule, with the reason recorded."""
    spaces = (design_space(target_spec, fused_mod), reduced_space(target_spec))
    keep = []
    for task, st in tunable:
        for reduced, space in enumerate(spaces):
            try:
                _bare_context(task, space).generate_design_space()
            except Exception as err:
                first = next((ln for ln in str(err).splitlines() if "Error" in ln), type(err).__name__).strip()
                continue
            st.space = space
            if reduced:
                st.note = f"reduced design space (no multi-level tiling: {first[:80]})"
            keep.append((task, st))
            break
        else:
            st.skipped = f"MetaSchedule cannot build a design space for this kernel ({first[:100]}): default schedule"
    return keep


def _contexts(tunable, work_dir, console_level=None, **kwargs):
    """Tune contexts for a round, each task in the design space _with_design_space chose. `console_level`:
    MetaSchedule's console log level as set before the first round (quiet_tvm_logs)."""
    from tvm.s_tir import meta_schedule as ms

    contexts, weights = [], []
    ms_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    # MetaSchedule's logging config lists the logger's handlers by name and crashes on an unnamed one
    # (one added by the host program, e.g. pytest): detach those while it reconfigures
    foreign = [h for h in ms_logger.handlers if not h.get_name()]
    for h in foreign:
        ms_logger.removeHandler(h)
    try:
        for space in {id(st.space): st.space for _, st in tunable}.values():
            tasks = [t for t, st in tunable if st.space is space]
            c, w = ms.relax_integration.extracted_tasks_to_tune_contexts(tasks, work_dir, space=space, **kwargs)
            contexts += c
            weights += w
    finally:
        for h in foreign:
            ms_logger.addHandler(h)
    # Creating the contexts re-runs logging.config with the logger's current level (DEBUG after the first
    # time) for its stdout handler: put the console back, or round 2 prints INFO lines into --json output.
    for handler in ms_logger.handlers:
        if type(handler) is logging.StreamHandler and console_level:
            handler.setLevel(console_level)
    return contexts, weights


def _refresh(states, hashes, counts):
    for st in states:
        if st.workload_hash in hashes:
            c = counts.get(hashes.index(st.workload_hash), {})
            st.trials = c.get("trials", 0)
            st.best_ms = c["best_s"] * 1e3 if c.get("best_s") else None


def _weighted_latency(states):
    vals = [s.best_ms * s.weight for s in states if s.best_ms and not s.skipped]
    return sum(vals) if vals else None


def _save_progress(D, db_dir, manifest, states, model_key, fusion, wall, cost_model, knobs, wall_before):
    manifest.setdefault("tasks", {})
    for st in states:
        manifest["tasks"][st.name] = {"workload_hash": st.workload_hash, "trials": st.trials, "best_ms": st.best_ms,
                                      "flops": st.flops, "weight": st.weight}
    manifest.setdefault("models", {})[model_key] = {"fusion": fusion, "tasks": [s.name for s in states],
                                                    "updated": D.now()}
    manifest["wall_seconds"] = wall_before + wall  # all runs into this database
    manifest["last_run_seconds"] = wall
    D.write_manifest(db_dir, manifest)
    if knobs.cost_model == "xgb":
        tmp = os.path.join(db_dir, f".cost_model.{os.getpid()}.tar")
        try:
            cost_model.save(tmp)
            os.replace(tmp, os.path.join(db_dir, D.COST_MODEL))
        except Exception:
            if os.path.exists(tmp):
                os.unlink(tmp)
