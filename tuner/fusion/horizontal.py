"""`horizontal`: merge parallel MatMuls that share an input (Q/K/V projections) into one wider MatMul + split,
then group with TVM's FuseOps. One launch instead of three, and the shared input is read once.

TVM's CombineParallelMatmul only merges MatMuls whose weights are parameters, so this strategy imports weights
as parameters, merges, then binds them back as constants (the concatenated weights fold at build time).
A model with no parallel MatMuls builds exactly as `tvm` does.
"""

from tuner.fusion.base import FuseOpsGrouping, register


@register
class HorizontalFusion(FuseOpsGrouping):
    name = "horizontal"
    description = "CombineParallelMatmul, then TVM FuseOps"
    needs_params = True

    def graph_passes(self, target, params) -> list:
        from tvm import relax

        passes = [relax.transform.CombineParallelMatmul()]
        if params:
            passes.append(relax.transform.BindParams("main", params))
        return passes + [relax.transform.FoldConstant()]
