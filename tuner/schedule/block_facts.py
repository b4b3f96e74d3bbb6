"""Facts about a TIR block that the hand-written schedules (row kernels, column reductions, pools, padding,
Winograd transforms) ask."""

from __future__ import annotations

MIN_WIDTH = 4  # narrower vectors than this are left scalar
MAX_VECTOR_EXTENT = 64  # MetaSchedule's llvm default for ParallelizeVectorizeUnroll: no wider loop is vectorised


def reduces(block) -> bool:
    """Does the block (a `tvm.tirx.SBlock`) have a reduction iterator?"""
    return any(int(it.iter_type) != 0 for it in block.iter_vars)


def extent(iter_var) -> int:
    """A block iterator's extent; 0 when it is not a constant (a symbolic dimension)."""
    return int(getattr(iter_var.dom.extent, "value", 0))


def vector_width(extent: int, lanes: int) -> int:
    """The widest power-of-two vector up to `lanes` that divides `extent`; 1 below MIN_WIDTH."""
    width = lanes
    while width >= MIN_WIDTH and extent % width:
        width //= 2
    return width if width >= MIN_WIDTH else 1


def whole_vectors_up_to(width: int, multiple: int, cap: int) -> int | None:
    """The largest divisor of `width` up to `cap` that is a multiple of `multiple` (a run of whole vectors), or
    None when there is none."""
    return next((c for c in range(cap - cap % multiple, 0, -multiple) if width % c == 0), None)


def shared_axes(block) -> list[bool]:
    """For each iterator of `block`: whether some input (a buffer it reads but does not write) is read at the same
    element all along it. Register-block rows along such an axis share that input's vector (a conv's weights along
    its width, a matmul's B along its rows); along any other axis each row loads its own (Winograd's transform
    axes, where every (eps, nu) pair has its own weight matrix; a batched matmul's batch)."""
    written = [w.source for w in block.writes]
    inputs = [r for r in block.reads if not any(r.source.same_as(w) for w in written)]
    return [any(not read_along(r, it.var) for r in inputs) for it in block.iter_vars]


def read_along(read, var) -> bool:
    """Whether a read region's index moves with the block iterator `var`."""
    from tvm.tirx.analysis import undefined_vars

    return any(any(v.same_as(var) for v in undefined_vars(rng.min)) for rng in read.region)
