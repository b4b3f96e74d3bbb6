"""The lowering pipeline from an imported Relax module to fused TIR kernels, and kernel accounting.

    DecomposeOpsForInference -> CanonicalizeBindings -> [strategy graph passes] -> LegalizeOps
    -> AnnotateTIROpPattern -> FoldConstant -> [strategy kernel passes] -> FuseTIR

Decomposing batch-norm first is what lets Conv+BN+ReLU become one kernel. With `none`, the pipeline stops
before grouping, so each operator is its own kernel.
"""

from __future__ import annotations

from .fusion import FusionStrategy


def lower(mod, target_spec, strategy: FusionStrategy, fuse_tir: bool = True, params: dict | None = None):
    """Lower and group; with fuse_tir=False, groups stay Relax functions (for the fusion plan)."""
    import tvm
    from tvm import relax

    if params and not strategy.needs_params:  # weights kept as parameters are constants to everyone else
        mod = relax.transform.BindParams("main", params)(mod)
        params = None
    target = target_spec.tvm_target()
    passes = [relax.transform.DecomposeOpsForInference(), relax.transform.CanonicalizeBindings()]
    passes += strategy.graph_passes(target, params)
    passes += [relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(), relax.transform.FoldConstant()]
    passes += strategy.kernel_passes(target)
    if fuse_tir and strategy.fuses:
        passes += [relax.transform.FuseTIR()]
    passes += [relax.transform.DeadCodeElimination()]
    if fuse_tir and not target_spec.is_gpu:
        # weights (constants) are layout-free: a tuned schedule may pack them (MetaSchedule's RewriteLayout), and
        # `pack_weights` folds the packing into the constants at build time
        passes += [relax.transform.AttachAttrLayoutFreeBuffers()]
    with target, tvm.transform.PassContext(opt_level=3):
        return tvm.transform.Sequential(passes)(mod)


def pack_weights(mod, target_spec):
    """After tuned schedules are applied: split each kernel's weight-layout rewrite into its own function and fold
    it into the constants, so packed weights are computed once at build time, not per inference."""
    import tvm
    from tvm import relax

    seq = tvm.transform.Sequential([relax.transform.SplitLayoutRewritePreproc(), relax.transform.FoldConstant()])
    with target_spec.tvm_target(), tvm.transform.PassContext(opt_level=3):
        return seq(mod)


def import_for(prepared, strategy: FusionStrategy):
    """Import for a strategy: (mod, params keyed by their Relax Var or None, provenance).

    Keyed by Var, not by name: imported weights can share a name (light_bvlc_alexnet has two "OC2_DUMMY_1"),
    and BindParams refuses an ambiguous name. The passes before the bind keep parameter Vars as they are."""
    from .frontend import import_to_relax

    mod, params, prov = import_to_relax(prepared, keep_params=strategy.needs_params)
    if params:
        main = mod["main"]
        params = dict(zip(main.params[int(main.attrs["num_input"]) :], params["main"]))
    return mod, params or None, prov
