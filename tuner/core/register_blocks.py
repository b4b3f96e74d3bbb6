"""How many output rows a CPU register block holds, and how a row count is padded to whole blocks: the facts that
the tile rule (schedule/tiles.py), the padding of matmul rows (schedule/padded_blocks.py) and the flattening of
1x1 convs (transform/pointwise_matmul.py) share."""

from __future__ import annotations

FREE_REGISTERS = 4  # vector registers for the weights and the broadcast input beside the accumulators
MAX_PAD_WASTE = 0.0625  # rows padded to whole blocks: at most 1/16 more work


def registers_for(lanes: int) -> int:
    """Vector registers of the ISA that has `lanes` fp32 lanes: AVX-512 has 32, AVX2 16."""
    return 32 if lanes >= 16 else 16


def rows_beside_two_vectors(lanes: int, free_registers: int = FREE_REGISTERS) -> int:
    """Accumulator rows that fit beside two side-by-side vectors: 6 with AVX2, 14 with AVX-512."""
    return max(1, (registers_for(lanes) - free_registers) // 2)


def max_rows(registers: int, free_registers: int = FREE_REGISTERS) -> int:
    """The default cap on a register block's rows: as many as fit beside two vectors, but at least 8 (beside one
    vector with AVX2's 16 registers)."""
    return max(8, (registers - free_registers) // 2)


def divisor_at_most(n: int, cap: int) -> int:
    """The largest divisor of n that is at most cap."""
    return max(d for d in range(1, min(n, cap) + 1) if n % d == 0)


def row_multiple(n: int, rows_cap: int) -> int | None:
    """The row block to pad `n` rows to a multiple of, or None when a divisor of n already gives a block of at least
    half `rows_cap` rows (or n fits in one block). Among blocks from half the cap up to the cap, the one with the
    least padding; the largest of those; None when even that pads more than `MAX_PAD_WASTE`."""
    if n <= rows_cap or 2 * divisor_at_most(n, rows_cap) >= rows_cap:
        return None
    padded, block = min((-(-n // b) * b, -b) for b in range(rows_cap // 2 + 1, rows_cap + 1))
    return -block if padded - n <= MAX_PAD_WASTE * n else None


def column_multiple(n: int, lanes: int) -> int | None:
    """The multiple to pad `n` columns (the vector axis) to, or None: whole vectors where no half vector divides n
    (at least one vector's worth), and padding to them adds at most `MAX_PAD_WASTE`; else half vectors."""
    if n < lanes or n % max(lanes // 2, 1) == 0:
        return None
    for multiple in (lanes, lanes // 2):
        if multiple > 1 and -(-n // multiple) * multiple - n <= MAX_PAD_WASTE * n:
            return multiple
    return None
