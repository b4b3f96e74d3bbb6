"""The tuning tasks of a fused module: MetaSchedule's extraction, less the kernels that are written by hand.

A hand-written kernel (a recurrent sequence, tuner/frontend/converters/recurrent_sequence.py) is already scheduled
(`tirx.is_scheduled`) and has no blocks for a design space: MetaSchedule would fail on it ("Cannot find a block
with the name: root"), and there is nothing to search."""

from __future__ import annotations

from tuner.core.ir import is_scheduled


def extract_tasks(fused_mod, target_spec) -> list:
    """MetaSchedule's ExtractedTasks of `fused_mod` for `target_spec`, hand-written kernels left out."""
    from tvm.s_tir import meta_schedule as ms

    tasks = ms.relax_integration.extract_tasks(fused_mod, target_spec.tvm_target())
    return [t for t in tasks if not is_scheduled(t.dispatched[0]["main"])]  # (the lowered module: hand-written)
