"""`tvm`: TVM's own FuseOps (the pipeline adds FuseTIR), as upstream ships them (op-pattern based, max depth from PassContext)."""

from . import FusionStrategy, register


def _kernel_passes(target):
    from tvm import relax

    return [relax.transform.FuseOps()]


STRATEGY = register(FusionStrategy(name="tvm", description="TVM FuseOps + FuseTIR", kernel_passes=_kernel_passes))
