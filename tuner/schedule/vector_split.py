"""A post-processor that splits vector loops of a non-power-of-two number of registers into one loop per register.

MetaSchedule's `RewriteParallelVectorizeUnroll` fuses a block's innermost loops into one vector loop up to its
maximum extent. Behind a register block three vectors wide (24 floats on AVX2) that makes the epilogue (bias,
residual, activation) one `<24 x float>` operation, which LLVM legalises lane by lane (`vinsertps`, the
accumulators spilled to the stack): a 4 x 3 matmul block ran 4.7x slower than 4 x 2, a 64 -> 24 conv's 6x
slower than with the split (docs/performance.md, "Odd vector counts on AVX2"). Here such a loop becomes an
unrolled loop over whole vectors, each of the target's lanes. As a post-processor of the default schedule's design
space it is part of every candidate the tuner measures, and its steps are recorded in the trace a tuning record
replays.
"""

from __future__ import annotations


def wide_vector_parts(extent: int, lanes: int) -> int:
    """How many `lanes`-wide vectors a vector loop of `extent` is split into: 0 when it is left as it is (a
    power-of-two number of whole vectors, which LLVM splits cleanly, or not a whole number of vectors)."""
    if lanes <= 0 or extent <= lanes or extent % lanes:
        return 0
    parts = extent // lanes
    return 0 if parts & (parts - 1) == 0 else parts


def may_need_split(func, lanes: int) -> bool:
    """Whether any schedule of `func` can have such a vector loop: when its output's innermost extent is a whole
    number of vectors that is not a power of two (24 or 72 floats on AVX2). Tile sizes divide the extent, so with
    a power of two of vectors every vector loop is one too; the post-processor is left out of those kernels' design
    spaces (it is Python, called for every candidate of the search)."""
    from tuner.core.ir import buffer_shapes, kernel_script

    shapes = buffer_shapes(kernel_script(func))
    inner = shapes[-1][-1] if shapes and shapes[-1] else None
    return isinstance(inner, int) and wide_vector_parts(inner, lanes) > 0


def split_wide_vectors(sch, lanes: int) -> bool:
    """Splits every vectorised loop of `sch` whose extent `wide_vector_parts` names into (parts, lanes): the outer
    unrolled, the inner vectorised. Always succeeds (a schedule with no such loop is left as it is)."""
    from tvm import tirx

    for block in _blocks(sch):
        loops = sch.get_loops(block)
        if not loops:
            continue
        loop = loops[-1]  # the vector loop is a block's innermost: only it is read (this runs for every candidate)
        node = sch.get(loop)
        if node.kind != tirx.ForKind.VECTORIZED or not isinstance(node.extent, tirx.IntImm):
            continue
        parts = wide_vector_parts(int(node.extent), lanes)
        if not parts:
            continue
        try:
            outer, inner = sch.split(loop, [parts, lanes])
        except Exception:  # a primitive that fails leaves the schedule as it was: keep this loop whole
            continue
        sch.unroll(outer)
        sch.vectorize(inner)  # legal where the loop's own vectorisation was (right after it: see `postproc`)
    return True


def _blocks(sch):
    """Every block of the schedule's main function under its root, nested blocks included."""
    found, stack = [], list(sch.get_child_blocks(sch.get_sblock("root")))
    while stack:
        block = stack.pop()
        found.append(block)
        stack.extend(sch.get_child_blocks(block))
    return found


def postproc(lanes: int):
    """The post-processor for a target with `lanes` float32 lanes, for a design space's list right after
    `RewriteParallelVectorizeUnroll`: once `RewriteReductionBlock` has split a reduction into init and update
    blocks, the update block is no reduction block to the schedule's checks, and vectorising a loop over it fails
    (a pooling sum over 480 channels in vectors of 48: the candidate, and the default schedule, were lost)."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms

    @derived_object
    class SplitWideVectors(ms.postproc.PyPostproc):
        def _initialize_with_tune_context(self, context) -> None:
            pass

        def apply(self, sch) -> bool:
            try:
                return split_wide_vectors(sch, lanes)
            except Exception:  # a candidate this cannot rewrite is dropped, never the search
                return False

        def clone(self):
            return postproc(lanes)

    return SplitWideVectors()
