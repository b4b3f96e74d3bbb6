"""Row kernels: a normalisation over the innermost axis (softmax, layer norm, RMS norm) scheduled row by row.

MetaSchedule's CPU rules give such a kernel one parallel loop per block and a scalar loop for each reduction, and
inline the element-wise blocks into every consumer: MiniLM-L3's softmax computed its fast `exp` polynomial twice
per element, both times scalar (0.37 ms a call, ONNX Runtime 0.095). Here each row is one parallel iteration that
runs every block of the kernel on that row, while it is in L1: element-wise blocks vectorised along the row, each
reduction split into vector-wide partial results (`rfactor`) that are combined once per row, and a block used by
two others (the `exp` of softmax) computed once into a row-sized buffer.

    for row in parallel(rows):                 # every axis but the innermost, fused
        max  = reduce(x[row, :])                # lanes partial maxima, vectorised, then one combine
        e[:] = exp(x[row, :] - max)             # vectorised, kept for the two uses below
        sum  = reduce(e[:])
        y[row, :] = e[:] / sum                  # vectorised
"""

from __future__ import annotations

from tuner.schedule.block_facts import MIN_WIDTH, reduces, vector_width


def row_schedule(func, lanes: int):
    """A `tvm.s_tir.Schedule` of `func` row by row, or None when `func` is not a row kernel or a step does not
    apply (the schedule primitives check every dependence, so a schedule returned is a correct one)."""
    from tvm.s_tir import Schedule

    sch = Schedule(func)
    if not is_row_kernel(sch):
        return None
    try:
        _schedule(sch, lanes)
    except Exception:  # a primitive refused this kernel: it keeps the generic rules
        return None
    return sch


def is_row_kernel(sch) -> bool:
    """One output block; every reduction reduces the output's innermost axis alone, per row; every other block
    runs over whole rows or per row (a mean, a scale). Unit axes are ignored (a mean kept as (1, 16, 1))."""
    root = sch.get_sblock("root")
    blocks = sch.get_child_blocks(root)
    if len(blocks) < 2 or len(sch.get_output_blocks(root)) != 1:
        return False
    out = _extents(sch.get(blocks[-1]))
    if out is None or len(out) < 2 or any(kind != 0 for kind, _ in out) or out[-1][1] == 1:
        return False
    row, inner = [n for _, n in out[:-1] if n != 1], out[-1][1]
    reductions = 0
    for block in blocks[:-1]:
        iters = _extents(sch.get(block))
        if iters is None or len(sch.get_loops(block)) != len(iters):
            return False
        spatial = [n for kind, n in iters if kind == 0 and n != 1]
        reduced = [n for kind, n in iters if kind != 0]
        if reduced:
            reductions += 1
            if iters[-1][0] == 0 or reduced != [inner] or spatial != row:  # the last axis, reduced alone
                return False
        elif spatial not in ([*row, inner], row):
            return False
    return reductions > 0


def _extents(block) -> list[tuple[int, int]] | None:
    """(iterator kind, extent) of each block iterator; None when an extent is not a constant."""
    out = []
    for it in block.iter_vars:
        extent = getattr(it.dom.extent, "value", None)
        if extent is None:
            return None
        out.append((int(it.iter_type), int(extent)))
    return out


def _schedule(sch, lanes: int) -> None:
    root = sch.get_sblock("root")
    for block in sch.get_child_blocks(root)[:-1]:  # a subtract used once: computed where it is used
        if len(sch.get_consumers(block)) == 1 and not reduces(sch.get(block)):
            sch.compute_inline(block)
    partials = []
    for block in sch.get_child_blocks(root)[:-1]:
        inner = sch.get_loops(block)[-1]
        width = _partial_width(int(sch.get(inner).extent), lanes)
        if reduces(sch.get(block)) and width > 1:
            _, lane = sch.split(inner, [None, width])
            partials.append(sch.rfactor(lane, 0))
    blocks = sch.get_child_blocks(root)
    *rows, inner = sch.get_loops(blocks[-1])
    row = sch.fuse(*rows) if len(rows) > 1 else rows[0]
    sch.parallel(row)
    for block in reversed(blocks[:-1]):
        sch.compute_at(block, row, preserve_unit_loops=True)
    _vectorize_innermost(sch, inner, lanes)  # after compute_at: a partitioned loop hides the rows it covers
    partial_blocks = [sch.get(p) for p in partials]
    for block in blocks[:-1]:
        loops = sch.get_loops(block)[1:]
        if any(sch.get(block).same_as(p) for p in partial_blocks):  # the lane axis innermost, vectorised
            lane = next(lp for lp in loops if _binds_spatial(sch, block, lp))
            sch.reorder(*[lp for lp in loops if not sch.get(lp).same_as(sch.get(lane))], lane)
            sch.vectorize(lane)
        elif loops and not reduces(sch.get(block)):
            _vectorize_innermost(sch, loops[-1], lanes)


def _partial_width(extent: int, lanes: int) -> int:
    """The lanes of a reduction's partial results: a power of two that divides the row, else its largest divisor
    of at least MIN_WIDTH lanes (a CTC head's 6,625 classes: 5; BERT's 30,522-word vocabulary: 6), else 1. A split
    that does not divide would need a predicate, which `compute_at` drops from the partial results' block."""
    width = vector_width(extent, lanes)
    if width > 1:
        return width
    return next((d for d in range(lanes, MIN_WIDTH - 1, -1) if extent % d == 0), 1)


def _vectorize_innermost(sch, loop, lanes: int) -> None:
    """Vectors along an element-wise loop; a row no power of two divides (6,625) in full vectors and a scalar tail,
    as two loops (a predicated vector loop is run lane by lane: 0.23 ms for a 40 x 6,625 softmax, 0.09 this way)."""
    extent = int(sch.get(loop).extent)
    width = vector_width(extent, lanes)
    if width == 1 and extent >= 2 * lanes:
        loop, _ = sch.loop_partition(loop, [extent - extent % lanes, None])
        width = lanes
    if width > 1:
        sch.vectorize(sch.split(loop, [None, width])[1])


def _binds_spatial(sch, block, loop) -> bool:
    """Whether `loop`'s variable appears in a spatial iterator's binding of `block` (the rfactored lane axis)."""
    from tvm.tirx.analysis import undefined_vars

    var = sch.get(loop).loop_var
    realize = sch.get(sch.get_loops(block)[-1]).body  # the block's realize, under its innermost loop
    return any(
        any(v.same_as(var) for v in undefined_vars(value))
        for it, value in zip(sch.get(block).iter_vars, realize.iter_values)
        if int(it.iter_type) == 0
    )
