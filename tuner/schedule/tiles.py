"""The default schedule's tile rule: register blocks for multi-level tiling's tile sizes, chosen from the block's
extents and the ISA's vector registers instead of drawn at random (`heuristic_tiles`)."""

from __future__ import annotations

from tuner.core.register_blocks import divisor_at_most as _divisor_at_most
from tuner.core.register_blocks import registers_for  # noqa: F401  (the schedule's callers import it from here)
from tuner.schedule.recipes import RECIPE, TileRecipe


def _pow2_divisor_at_most(n: int, cap: int) -> int:
    return max(d for d in (1, 2, 4, 8, 16) if d <= cap and n % d == 0)


def heuristic_tiles(
    decisions: list[list[int]],
    lanes: int,
    registers: int = 32,
    recipe: TileRecipe = RECIPE,
    cores: int = 1,
    shares: list[bool] | None = None,
) -> list[list[int]]:
    """Tile sizes for one block's SSRSRS tiling (spatial axes: 4 factors, reduction axes: 2, in loop order),
    replacing random draws with the usual CPU recipe: the last spatial axis (contiguous in memory) gets a vector
    of `lanes` innermost and up to `max_vectors` of them side by side; the axes before it a register block of
    rows (the second-last first, then the one before when a small extent leaves room), as many as the vector
    registers hold; everything else of the spatial extents goes to the outermost loops, which are fused and
    parallel (with `weights_outer`, the row blocks one level inside); reductions run whole in the outer loop.
    Rows whose inputs alias in L1 are capped (`TileRecipe.aliasing_rows`); a row of the input is taken to be the
    innermost reduction's extent of float32 (the channels of an NHWC conv, K of a matmul), and for a conv a row
    of the output as well: ResNet-50's 256 -> 1024 convs with their residual, 7 rows, 0.973-0.981 of 14 in the
    model (a 128 x 1024 matmul's 4 x 4 tile under the same cap measured 1.01-1.02: matmuls keep theirs). With 16
    registers, rows only along axes an input is shared on (`shares`, see `_may_hold_rows`), and an extent that
    fits whole only beside one vector (7) as that many rows of one vector (`TileRecipe.odd_rows_one_vector`)."""
    spatial = [k for k, d in enumerate(decisions) if len(d) == 4]
    extents = [_product(d) for d in decisions]
    inner, block = {}, {}
    if spatial:
        last = _vector_axis(spatial, extents, lanes) if recipe.vector_axis_divisible else spatial[-1]
        inner[last] = (
            _vector_width(extents[last], lanes) if recipe.pow2_width else _divisor_at_most(extents[last], lanes)
        )
        if len(spatial) > 1 and inner[last] == lanes:  # side-by-side vectors only of full width
            block[last] = _side_by_side(extents[last] // inner[last], registers, recipe)
        budget = (registers - recipe.free_registers) // block.get(last, 1)  # accumulator rows that fit
        max_rows = recipe.rows(registers)
        rows_cap = min(max_rows, max(1, budget))
        alias_cap = None
        if reductions := [k for k, d in enumerate(decisions) if len(d) == 2]:  # the innermost one: contiguous
            alias_cap = recipe.aliasing_rows(4 * extents[reductions[-1]])
            if len(reductions) > 1:  # a conv's epilogue (a residual read, the output written) on rows as far apart
                alias_cap = min(alias_cap or max_rows, recipe.aliasing_rows(4 * extents[last]) or max_rows)
            rows_cap = min(rows_cap, alias_cap or rows_cap)
        first_cap = rows_cap
        row_axes = [k for k in reversed(spatial) if k != last and _may_hold_rows(k, shares, registers, recipe)]
        for i, k in enumerate(row_axes):  # the axis before the vector first
            block[k] = _divisor_at_most(extents[k], rows_cap)
            if recipe.whole_odd_rows and i == 0 and 2 * block[k] < rows_cap and extents[k] <= budget:
                block[k] = extents[k]  # an odd extent (13) has no divisor near the cap: all 13 rows, not 1
            rows_cap //= block[k]
            if rows_cap < 2 or not recipe.fill_outer_axes:
                break
        rows = _product(block.get(k, 1) for k in spatial if k != last)
        one_vector_rows = min(max_rows, registers - recipe.free_registers, alias_cap or max_rows)
        if recipe.odd_rows_one_vector and row_axes and 2 * rows < first_cap:
            # AVX2's 7-wide stage (or Winograd's 49 tiles): 7 rows fit beside one vector only; 7 x 1, not 1 x 4
            if (rows_one := _divisor_at_most(extents[row_axes[0]], one_vector_rows)) > first_cap:
                block.update({k: 1 for k in row_axes})
                block[row_axes[0]], block[last], rows = rows_one, 1, rows_one
        grow = block.get(last, 1) <= recipe.max_vectors  # an odd block of 3 or 5 vectors stays as it is
        if grow and recipe.grow_vectors and rows <= max_rows // 2 and inner[last] == lanes and len(spatial) > 1:
            # few rows (508 = 4 x 127): more vectors side by side keep more accumulators in flight; each vector
            # column needs rows accumulators and one weight register
            cap = min(max_rows // 2, (registers - recipe.free_registers) // (rows + 1))
            divisor = _pow2_divisor_at_most if recipe.pow2_vectors else _divisor_at_most
            block[last] = divisor(extents[last] // inner[last], cap)
    outer = {k: extents[k] // inner.get(k, 1) // block.get(k, 1) for k in spatial}
    second = {}
    reduction = _product(extents[k] for k in range(len(decisions)) if k not in spatial)
    weight_bytes = 4 * reduction * extents[last] if spatial and reduction > 1 else 0  # fp32 assumed
    if recipe.weights_outer and weight_bytes and weight_bytes >= recipe.weights_outer_bytes:
        second = _weights_outer(outer, [k for k in spatial if k != last], recipe.jobs_per_core * cores)
    out = []
    for k, d in enumerate(decisions):
        if len(d) != 4:
            out.append([extents[k]] + [1] * (len(d) - 1))
            continue
        out.append([outer[k], second.get(k, 1), block.get(k, 1), inner.get(k, 1)])
    return out


def _side_by_side(vectors: int, registers: int, recipe: TileRecipe) -> int:
    """Vectors side by side in the register block, of `vectors` along the contiguous axis: up to `max_vectors`;
    with 16 registers an odd count as 3 vectors beside 4 rows when 3 divides it (24, 72, 120 channels on AVX2),
    else as 5 beside 2 rows when 5 does (40, 200), where the cap of 2 would leave 1 vector beside 8 rows
    (`TileRecipe.odd_vector_blocks`)."""
    if recipe.odd_vector_blocks and registers <= 16 and vectors % 2:
        for width in (3, 5):
            if vectors % width == 0:
                return width
    return _divisor_at_most(vectors, recipe.max_vectors)


def _may_hold_rows(axis: int, shares: list[bool] | None, registers: int, recipe: TileRecipe) -> bool:
    """Whether register-block rows may run along `axis`: with 16 registers only along an axis some input is shared
    on (`block_facts.shared_axes`), else each row loads its own weight vectors. A 3 x 3 256 -> 256 conv on 14 x 14
    (Winograd), single-conv packages on Zen 3: rows along (eps, nu) 1.95-1.98 ms, along the tiles 1.09-1.10."""
    if shares is None or not recipe.rows_share_inputs or registers > 16:
        return True  # AVX-512 keeps such rows (Winograd measured that way on Intel); not re-measured without
    return shares[axis]


def _weights_outer(outer: dict[int, int], rows: list[int], min_jobs: int) -> dict[int, int]:
    """Moves the row axes' outer tiles (innermost axis first) from the parallel loops to the loop level inside them,
    while the parallel loops keep `min_jobs` iterations; returns {axis: tiles moved} and updates `outer`. The
    parallel loops then walk the weight columns' blocks outermost and every row block inside: one block of packed
    weights, K x 32 floats, stays in L2 while all rows use it (in the other order each row block streams all the
    weights: 2.4 MB for a 3x3x256x256 conv). Only for weights of `weights_outer_bytes` or more: with small weights
    the rows-outer order reads the input and a residual once, not once per column block. Measured in
    docs/performance.md ("Large weights stay put")."""
    moved = {}
    for k in reversed(rows):
        if _product(n for j, n in outer.items() if j != k) < min_jobs:
            break
        moved[k], outer[k] = outer[k], 1
    return moved


def _vector_axis(spatial: list[int], extents: list[int], lanes: int) -> int:
    """The last spatial axis, the contiguous one, unless it is shorter than a quarter vector; then the last axis
    that half a vector divides: an NCHW conv whose output width is 1 (magika's 5x1 convs: (1, 512, 508, 1))
    vectorises its 512 channels, not the unit axis (scalar code) or 508 rows (4 lanes). The weights are packed in
    that order, and the output is stored once per reduction. A last axis of 12 or 42 channels is vectorised as
    it is: moving the vector to the width (PP-OCRv4 detector's 48 -> 12 1x1 conv on 80x80) made every load a
    gather, 1.22 ms for 7.4 MFLOP, against 0.054 ms on the channels."""
    if extents[spatial[-1]] >= max(lanes // 4, 2):
        return spatial[-1]
    return next((k for k in reversed(spatial) if extents[k] % max(lanes // 2, 1) == 0), spatial[-1])


def _vector_width(extent: int, lanes: int) -> int:
    """The innermost tile of the contiguous axis: a power-of-two vector of at least half the lanes when one divides
    the extent, else the largest divisor up to the lanes."""
    width = lanes
    while width >= max(4, lanes // 2):
        if extent % width == 0:
            return width
        width //= 2
    return _divisor_at_most(extent, lanes)


def _product(factors) -> int:
    n = 1
    for f in factors:
        n *= int(f)
    return n
