"""How candidates are built: MetaSchedule's default build without importing every tensor intrinsic per worker,
and the TVM 0.27 workaround for tensor-core kernels."""

from __future__ import annotations

import re

from tuner.legalize import fast_math  # noqa: F401  (registers the llvm tanh/erf rules in every build worker)

# TVM 0.27: StorageRewrite lets an fp32 accumulator stage reuse an fp16 shared buffer, and the typed
# tvm_access_ptr of the WMMA store then fails its dtype check ("tvm_access_ptr element type must match the source
# buffer"): 6 of 8 sampled f16f16f32 schedules failed to build. Tensorized kernels build without that rewrite.
TENSOR_CORE_BUILD_CONFIG = {"tirx.disable_storage_rewrite": True}
_TENSOR_CORE_MARK = re.compile(r"tensorize|mma_sync|wmma|ldmatrix")


def uses_tensor_cores(mod) -> bool:
    """Does any kernel use WMMA/MMA (tensorized, or lowered to the intrinsics' calls)?"""
    from tuner.core.ir import kernel_scripts

    return any(_TENSOR_CORE_MARK.search(script) for script in kernel_scripts(mod).values())


def fast_build(mod, target, _params):
    """MetaSchedule's default build, minus importing every tensor intrinsic (13-16 s) in each fresh worker: the
    target's intrinsics are registered only when the candidate was tensorized (tuning/intrinsics.py)."""
    import tvm
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    script = mod.script(show_meta=False)
    if "tensorize" in script:
        from tuner.schedule.intrinsics import register

        register(target.kind.name)
    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    with tvm.transform.PassContext(config=TENSOR_CORE_BUILD_CONFIG if _TENSOR_CORE_MARK.search(script) else {}):
        return tvm_build(mod, target=target)
