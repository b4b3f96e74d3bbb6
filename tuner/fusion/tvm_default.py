"""`tvm`: TVM's own FuseOps (the pipeline adds FuseTIR), as upstream ships them (op-pattern based, max depth from
PassContext)."""

from tuner.fusion.base import FuseOpsGrouping, register


@register
class TVMFusion(FuseOpsGrouping):
    name = "tvm"
    description = "TVM FuseOps + FuseTIR"
