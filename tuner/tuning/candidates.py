"""Tuning up to measurement, for machines without the target device: sample the design space the tuner would
search for the heaviest kernels and build the candidates (used by `scripts/gpu_check.py --build-only`)."""

from __future__ import annotations

from dataclasses import dataclass

from tuner.core.ir import flops
from tuner.tuning.builder import _TENSOR_CORE_MARK, fast_build
from tuner.tuning.knobs import Knobs
from tuner.tuning.spaces import bare_context, design_space
from tuner.tuning.tasks import extract_tasks


@dataclass
class SampledTask:
    task: object  # MetaSchedule ExtractedTask
    design_spaces: int
    candidates: list  # MeasureCandidate, post-processed as the tuner would measure them


def sample_candidates(
    fused_mod, target_spec, max_tasks: int = 2, per_task: int = 4, seed: int = 0
) -> list[SampledTask]:
    """For the heaviest kernels: schedules drawn at random from the design space the tuner would search, and
    post-processed. Replay-trace sampling, not evolution: a build check needs no cost model, and evolutionary
    search's initial population (thousands of post-processed schedules) took 150 s per fp16 task on 2 cores."""
    from tvm.s_tir import meta_schedule as ms

    tasks = [t for t in extract_tasks(fused_mod, target_spec) if flops(t.dispatched[0]) >= Knobs.trivial_flops]
    tasks = sorted(tasks, key=lambda t: flops(t.dispatched[0]) * t.weight, reverse=True)[:max_tasks]
    space = design_space(target_spec, fused_mod)
    out = []
    for task in tasks:
        ctx = bare_context(task, space, seed, search="replay-trace")
        spaces = ctx.generate_design_space()
        ctx.pre_tuning(
            max_trials=per_task,
            num_trials_per_iter=per_task,
            design_spaces=spaces,
            database=ms.database.MemoryDatabase(),
            cost_model=ms.cost_model.RandomModel(),
        )
        out.append(SampledTask(task, len(spaces), list(ctx.generate_measure_candidates() or [])))
    return out


def build_candidates(fused_mod, target_spec, max_tasks: int = 2, per_task: int = 4, seed: int = 0) -> list[dict]:
    """The part of tuning that needs no device: sample candidates of the heaviest kernels (`sample_candidates`)
    and build them as the tuner would (for CUDA: each must be thread-bound). What a GPU run would then measure;
    on a machine without one this checks that the CUDA search space and builder work."""
    from tvm.s_tir import meta_schedule as ms

    target = target_spec.tvm_target()
    builder = ms.builder.LocalBuilder(
        f_build=fast_build, max_workers=target_spec.config.get("num-cores", 1) or 1, timeout_sec=Knobs.builder_timeout_s
    )
    out = []
    for sampled in sample_candidates(fused_mod, target_spec, max_tasks, per_task, seed):
        cands, spaces = sampled.candidates, sampled.design_spaces
        built = builder.build([ms.builder.BuilderInput(c.sch.mod, target) for c in cands])
        scripts = [c.sch.mod.script() for c in cands]
        out.append(
            {
                "task": sampled.task.task_name,
                "design_spaces": spaces,
                "candidates": len(cands),
                "built": sum(b.error_msg is None for b in built),
                "errors": [b.error_msg.strip().splitlines()[-1][:200] for b in built if b.error_msg],
                "thread_bound": (sum('"threadIdx.' in s for s in scripts) if target_spec.is_gpu else None),
                "tensor_core": sum(bool(_TENSOR_CORE_MARK.search(s)) for s in scripts),
            }
        )
    return out
