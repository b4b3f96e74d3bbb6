"""The schedule rules TOPI's pooling computes ask for by name.

TOPI marks its pooling blocks `schedule_rule="meta_schedule.pool_max"` (also pool_avg, adaptive_pool_max,
adaptive_pool_avg), naming rules that TVM 0.27 does not ship. MetaSchedule's ApplyCustomRule looks each name up
as a global function `s_tir.meta_schedule.<target key>.<name>`; when none exists it writes a warning through TVM's
C++ log (straight to the terminal, past `-q`), drops the annotation and lets the generic rules schedule the block.
Registering the names as that same fall-through silences the warning at its source and changes no schedule.
"""

from __future__ import annotations

POOL_RULES = ("pool_max", "pool_avg", "adaptive_pool_max", "adaptive_pool_avg")
TARGET_KEYS = ("cpu", "gpu")  # llvm targets carry the key "cpu"; cuda targets "cuda" and "gpu"


def _generic_rules(sch, block):
    """What ApplyCustomRule does for an unknown rule, without the warning: the block goes to the other rules."""
    sch.unannotate(block, "schedule_rule")
    return [sch]


def register() -> None:
    import tvm_ffi

    for key in TARGET_KEYS:
        for rule in POOL_RULES:
            name = f"s_tir.meta_schedule.{key}.meta_schedule.{rule}"
            if tvm_ffi.get_global_func(name, allow_missing=True) is None:
                tvm_ffi.register_global_func(name, _generic_rules)


register()
