"""How the default schedule tiles, orders and unrolls: `TileRecipe`, the recipe in use (`RECIPE`) and the earlier
ones (`EARLIER_RECIPES`), each a lever measured side by side by `scripts/bench_levers.py` (docs/performance.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from tuner.core.register_blocks import FREE_REGISTERS, max_rows


@dataclass(frozen=True)
class TileRecipe:
    """How the default schedule tiles, orders and unrolls. The register block: rows x vectors accumulators stay in
    vector registers (32 with AVX-512, 16 with AVX2; `free_registers` for the weights and the broadcast input), 8+
    of them for FMA latency x issue width (Zen 4: 4 rows x 1 vector ran ResNet-50's late stages at ~55-105
    GFLOP/s, 8 x 2 at ~200). Each field's lever is measured in docs/performance.md."""

    # rows of the register block; None: as many as the registers hold beside two vectors (14 with AVX-512), but at
    # least 8. 14 against 8 on AVX-512, untuned, in the model: ResNet-50 1.07 -> 1.02 x ORT, Inception v1 0.73 ->
    # 0.70, YOLOv8n 0.91 -> 0.86 (docs/performance.md); 28 rows beside one vector ran ResNet-50 at 1.15
    max_rows: int | None = None
    max_vectors: int = 2  # side-by-side vectors of the contiguous axis
    free_registers: int = FREE_REGISTERS
    pow2_width: bool = True  # 24 channels on AVX-512: 8 lanes, not a 12-lane vector LLVM splits
    fill_outer_axes: bool = True  # a 7-wide axis leaves rows to the axis before it
    fit_spatial_vectors: bool = True  # spatial-only kernels: vectors along the output's innermost axis
    vector_axis_divisible: bool = True  # the vector on the last axis a vector divides (an NCHW conv whose W is 1)
    grow_vectors: bool = True  # up to 4 vectors side by side when the rows are 4 or fewer
    # ... and only 1, 2 or 4 of them: 3 vectors (48 floats wide) with 1-5 rows ran 10-20x slower, LLVM building
    # vectors lane by lane (648 vinsertps in one kernel); 3 x 6 rows, 5 or 4 vectors were fine (timed alone)
    pow2_vectors: bool = True
    whole_odd_rows: bool = True  # a row extent without a divisor near the cap (13, 17) whole, when registers allow
    weights_outer: bool = True  # reductions: the vector axis's tiles outermost, rows inside (see `_weights_outer`)
    jobs_per_core: int = 4  # parallel jobs that `weights_outer` leaves at least, per core
    weights_outer_bytes: int = 1 << 20  # ... for weights (reduction x vector axis, fp32) of at least this size
    # explicit unroll of the loops inside the parallel one, up to this many steps, instead of MetaSchedule's draw
    # from 0/16/64/512: a draw of 0 left loops to LLVM (light ResNet-50 kernels 10-25% slower), 512 blew up the 7x7
    # stem (0.93 ms against 0.63); 16 and 64 were within 3% of each other (each kernel timed alone, 2 cores)
    unroll: int | None = 64
    # the epilogue (bias, residual, activation) on each output tile right after its reduction, not in a second pass
    # over the output: the rules in TVM's order (inlining first, so the epilogue is one block when tiling places it
    # at a tile) and the sketch that places it innermost. Tiling first left the bias add alone at the tile, and
    # inlining then moved it into the next op, at the top level
    fuse_epilogue: bool = True
    # pooling blocks scheduled by `custom_rules.channels_innermost_pool` (NHWC: padding inlined, channels vectorised)
    # where they were left to ParallelizeVectorizeUnroll alone: the window innermost, scalar
    vector_pools: bool = True
    # normalisations over the innermost axis (softmax, layer norm) row by row (`row_kernels.row_schedule`): each row
    # in one parallel iteration, reductions vectorised through partial results, softmax's exp computed once
    row_kernels: bool = True
    # depthwise convs read their input's padding in place (a select per load) instead of a padded copy written by
    # a pass of its own (`padding.inline_channelwise_padding`)
    channelwise_padding_inline: bool = True
    # sums, means and maxima over outer axes (NHWC global pooling) with the kept innermost axis in vectors,
    # innermost (`column_reductions.column_schedule`), not one scalar column walk per element
    column_reductions: bool = True
    # sums and means over the innermost axes (NCHW global pooling) with vectors of partial results
    # (`inner_reductions.inner_reduction_schedule`), not one scalar loop per element
    inner_reductions: bool = True
    # kernels that only rearrange one input (attention heads' split and merge, K's transpose, layout transposes) as
    # vector copies or 16 x 16 tiled transposes (`data_movement.movement_schedule`), not gathers along the output
    data_movement: bool = True
    # rows of the register block whose input rows lie a multiple of 4 KB apart (an NHWC conv over 1024 channels, a
    # matmul with K = 3072) share one L1 set: at most `l1_ways - 1` of them (`aliasing_rows`). ResNet-50's 1x1
    # conv 1024 -> 256 on 14x14, timed alone: 14 rows 0.93-1.00 ms, 7 rows 0.63-0.65. 8 ways: Zen 3/4 and older
    # Intel cores (newer Intel cores have 12; 8 is the safe side)
    alias_rows: bool = True
    l1_ways: int = 8
    # a row extent with no divisor near the cap that fits whole only beside one vector (7 with AVX2's 16 registers,
    # where 2 vectors leave room for 6 rows): 7 rows x 1 vector, not 1 row x 4 vectors (4 accumulators for an FMA
    # latency x 2 ports). 7 x 2 spills (14 accumulators, 2 weights and a broadcast in 16 registers). Zen 3, each
    # conv of ResNet-50's 7 x 7 stage alone: 3x3 512 -> 512 4.0-4.3 -> 2.3-2.4 ms, 1x1 2048 -> 512 2.36 -> 1.77
    odd_rows_one_vector: bool = True
    # with 16 registers, register-block rows only along an axis some input is shared on (not Winograd's transform
    # axes, not a batch): `tiles._may_hold_rows`
    rows_share_inputs: bool = True
    # with 16 registers, an odd number of vectors along the contiguous axis (24, 72, 120 channels) as blocks of 3
    # vectors x 4 rows (12 accumulators; 7 loads per 12 FMAs) instead of 1 vector x 8 rows (9 loads per 8 FMAs),
    # or of 5 x 2 (40, 200 channels); wants the epilogue's vectors split to the lanes (`split_wide_vectors`).
    # Zen 3, single 1x1 convs, kernel time in the VM profile: 64 -> 24 on 56x56 0.120 -> 0.078 ms, 72 -> 24 with
    # a residual 0.13-0.22 -> 0.09-0.10, 40 -> 120 on 28x28 0.10 -> 0.07; 120 -> 40 (5 x 2) ~0.09 -> ~0.08
    odd_vector_blocks: bool = True
    # vector loops of 3, 5, ... registers (a 3-vector block's epilogue) as one unrolled loop per register:
    # `vector_split.split_wide_vectors`, a post-processor of the design space
    split_wide_vectors: bool = True

    def rows(self, registers: int) -> int:
        """The cap on the register block's rows for an ISA with `registers` vector registers."""
        return self.max_rows or max_rows(registers, self.free_registers)

    def aliasing_rows(self, row_bytes: int) -> int | None:
        """The most register-block rows whose loads, `row_bytes` apart, stay within the L1's ways: None when any
        number does (no cap). x86 L1 data caches map addresses 4096 bytes apart to the same set."""
        if not self.alias_rows or row_bytes <= 0:
            return None
        period = 4096 // math.gcd(row_bytes, 4096)  # rows before the set index repeats
        return (self.l1_ways - 1) * period


RECIPE = TileRecipe()
FOUR_ROW_TILES = TileRecipe(  # before 2026-12
    max_rows=4, max_vectors=1, pow2_width=False, fill_outer_axes=False, vector_axis_divisible=False
)
SPATIAL_64 = TileRecipe(fit_spatial_vectors=False)  # spatial kernels vectorised 64 wide, as before 2026-12-04
TWO_VECTORS = TileRecipe(grow_vectors=False)  # at most 2 vectors side by side, as before 2026-12-05
ROWS_OUTER = TileRecipe(weights_outer=False)  # row blocks outermost, every weight block inside, as before 2026-12-05
DRAWN_UNROLL = TileRecipe(unroll=None)  # MetaSchedule's random unroll depth, as before 2026-12-05
EPILOGUE_APART = TileRecipe(fuse_epilogue=False)  # the epilogue as a second pass over the output
# pooling windows innermost and scalar, as before 2026-12-05: without ApplyCustomRule, which also leaves Winograd's
# transforms (tuning/winograd_transforms.py) to the root's parallelise/vectorise rule alone in this variant
SCALAR_POOLS = TileRecipe(vector_pools=False)
DIVISOR_ROWS = TileRecipe(whole_odd_rows=False)  # 13 rows as 13 blocks of 1, as before 2026-12-05
THREE_VECTORS = TileRecipe(pow2_vectors=False)  # 96 channels as 3 side-by-side vectors, as before 2026-12-05
GENERIC_ROW_KERNELS = TileRecipe(row_kernels=False)  # softmax, layer norm by the generic rules, as before 2026-12-06
EIGHT_ROWS = TileRecipe(max_rows=8)  # at most 8 rows with AVX-512 as well, as before 2026-12-06
PADDING_PASS = TileRecipe(channelwise_padding_inline=False)  # depthwise convs' padding as a pass of its own, as before
SCALAR_COLUMNS = TileRecipe(column_reductions=False)  # global means as scalar column walks, as before
ALIASED_ROWS = TileRecipe(alias_rows=False)  # 14 rows whatever their inputs' stride, as before 2026-12-06
SCALAR_INNER = TileRecipe(inner_reductions=False)  # NCHW global means as one scalar loop each, as before 2026-12-06
GATHERED_MOVES = TileRecipe(data_movement=False)  # transposes vectorised along the output only, as before 2026-12-06
FOUR_VECTOR_ODD_ROWS = TileRecipe(odd_rows_one_vector=False)  # AVX2's 7-wide rows as 1 x 4 vectors, before 2026-12-07
UNSHARED_ROWS = TileRecipe(rows_share_inputs=False)  # AVX2 rows along any axis (Winograd's eps, nu), before 2026-12-07
ONE_VECTOR_ODD = TileRecipe(odd_vector_blocks=False)  # AVX2: 24 or 72 channels as 1 vector x 8 rows, until 2026-12-07
WIDE_VECTORS = TileRecipe(split_wide_vectors=False)  # 24-float epilogue vectors left to LLVM, until 2026-12-07
EARLIER_RECIPES = {
    "4-row tiles": FOUR_ROW_TILES,
    "spatial-64": SPATIAL_64,
    "2-vector tiles": TWO_VECTORS,
    "rows-outer tiles": ROWS_OUTER,
    "drawn unroll": DRAWN_UNROLL,
    "epilogue apart": EPILOGUE_APART,
    "scalar pools": SCALAR_POOLS,
    "divisor rows": DIVISOR_ROWS,
    "3-vector tiles": THREE_VECTORS,
    "8-row tiles": EIGHT_ROWS,
    "generic row kernels": GENERIC_ROW_KERNELS,
    "padding pass": PADDING_PASS,
    "scalar columns": SCALAR_COLUMNS,
    "aliased rows": ALIASED_ROWS,
    "scalar inner reductions": SCALAR_INNER,
    "gathered moves": GATHERED_MOVES,
    "4-vector odd rows": FOUR_VECTOR_ODD_ROWS,
    "unshared rows": UNSHARED_ROWS,
    "one-vector odd blocks": ONE_VECTOR_ODD,
    "wide vectors": WIDE_VECTORS,
}

# The template's knobs, one moved at a time from `RECIPE`: the default schedule's neighbours, each a whole schedule
# by the same rules (vectors of full lanes, blocks that fit the registers), measured per kernel before the search
# (tuning/neighbours.py). Mutating the default's tile sizes at random mostly breaks its vectors: a Winograd conv's
# 97 candidates in a 5-minute tune ran at a median 4x the default, and no record beat it.
NEIGHBOURS = {
    "4-row blocks": replace(RECIPE, max_rows=4),
    "one vector wide": replace(RECIPE, max_vectors=1),
    "up to 4 vectors": replace(RECIPE, max_vectors=4, grow_vectors=True),
    "rows outermost": replace(RECIPE, weights_outer=False),
    "weights outermost": replace(RECIPE, weights_outer_bytes=0),
    "2 jobs per core": replace(RECIPE, jobs_per_core=2, weights_outer_bytes=0),
    "16 jobs per core": replace(RECIPE, jobs_per_core=16, weights_outer_bytes=0),
    "unroll 16": replace(RECIPE, unroll=16),
    "unroll 512": replace(RECIPE, unroll=512),
    "no L1 alias cap": replace(RECIPE, alias_rows=False),
    "epilogue apart": replace(RECIPE, fuse_epilogue=False),
}
