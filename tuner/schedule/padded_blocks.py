"""Iteration domains padded to whole register blocks: a matmul over 197 rows computed over 198.

The default schedule and the tuner's multi-level tiling split each loop into exact factors, so a row count with no
divisor near the register block (ViT's 197 tokens: prime) gets register blocks of one row. ViT-B/16's matmuls then
ran at 38-46% of the CPU's peak, twice ONNX Runtime's time. Padded to 198 rows (6-row blocks on AVX2), each ran in
about half the time (scratch measurement on Zen 3: the FFN's 197 x 3072 x 768 matmul 9.79 -> 5.05 ms), the extra
row and the copy of the padded input included.

`PadRegisterBlocks` pads, in every kernel with one reduction block of the einsum form (TVM's `pad_einsum`) that
multiplies two operands (one read at the same element along the rows, the other along the columns, as a matmul):
- the rows (the last spatial axis of more than one element before the innermost one: a sequence-first (197, 1,
  768) projection pads its 197) to a multiple of a register block's rows, when no divisor of their count makes a
  block of at least half the rows that fit beside two vectors; only when that costs at most 1/16 more work
  (`core.register_blocks.row_multiple`);
- the columns (the vector axis) to whole vectors, when no half vector divides them (`column_multiple`). ViT's
  attention scores, 197 x 197 per head, ran in scalar one-column blocks: 1.67 ms a call alone on Zen 3, 0.60
  with rows and columns padded. (An earlier try measured 2.66 padded: the column operand's padding had been
  inlined into the innermost loop as a select; `padding.inline_channelwise_padding` now keeps a copy for an
  operand read again along another output axis.)
Neither is padded where a weight is read along it (padding a weight would copy it in every call). The kernel gets
padded input copies and a cropped output inside itself; its name and signature stay, so the plan and the package
see the same kernel. A kernel `pad_einsum` refuses (a conv, whose input indices are sums) is left as it was; 1x1
convs on such maps reach this pass as matmuls over their pixels (transform/pointwise_matmul.py). The decision is
kept on the kernel as `PADDED_ATTR`.
"""

from __future__ import annotations

from tuner.core.register_blocks import column_multiple, row_multiple
from tuner.schedule.recipes import RECIPE

PADDED_ATTR = "fusion_tuner.padded"  # "rows 197 -> 198, columns 197 -> 200" on a padded kernel


def PadRegisterBlocks(lanes: int, registers: int, free_registers: int = RECIPE.free_registers):  # noqa: N802  (a TVM pass name)
    """The module pass: pad every matmul-like kernel whose rows or columns make no whole register blocks."""
    import tvm

    def run(mod, _ctx):
        return pad_register_blocks(mod, lanes, registers, free_registers)

    return tvm.transform.module_pass(run, opt_level=0, name="PadRegisterBlocks")


def pad_register_blocks(mod, lanes: int, registers: int, free_registers: int = RECIPE.free_registers):
    import tvm

    out = mod
    for gv, func in mod.functions.items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        padded = pad_kernel(func, lanes, registers, free_registers)
        if padded is not None:
            out = out.clone() if out is mod else out
            out[gv] = padded
    return out


def pad_kernel(func, lanes: int, registers: int, free_registers: int = RECIPE.free_registers):
    """`func` with its reduction block padded (see the module's docstring), or None when nothing is padded."""
    from tvm.s_tir import Schedule

    from tuner.core.ir import is_scheduled
    from tuner.schedule.block_facts import extent, reduces, shared_axes

    if is_scheduled(func):
        return None
    try:
        sch = Schedule(func)
        blocks = [b for b in sch.get_child_blocks(sch.get_sblock("root")) if reduces(sch.get(b))]
    except Exception:  # an opaque kernel (no root block to read): nothing to pad
        return None
    if len(blocks) != 1:
        return None
    block = sch.get(blocks[0])
    spatial = [k for k, it in enumerate(block.iter_vars) if int(it.iter_type) == 0]
    extents = [extent(it) for it in block.iter_vars]
    if len(spatial) < 2 or any(extents[k] <= 0 for k in spatial):
        return None  # a symbolic extent (a ranged package) or no rows
    vector = spatial[-1]
    row = next((k for k in reversed(spatial[:-1]) if extents[k] > 1), spatial[-2])  # past unit axes: (197, 1, C)
    shares = shared_axes(block)
    if not (shares[row] and shares[vector]):
        return None  # not a product of two operands (a mean over rows): no register block to fill
    weights = _axes_read_on_weights(func, block)
    rows = row_multiple(extents[row], max(1, (registers - free_registers) // 2))  # rows beside two vectors
    rows = None if weights[row] else rows
    columns = None if weights[vector] else column_multiple(extents[vector], lanes)
    if not (rows or columns):
        return None
    factors = [1] * len(extents)
    factors[row], factors[vector] = rows or 1, columns or 1
    try:
        sch.pad_einsum(blocks[0], factors)
    except Exception:  # not of the einsum form (a conv reads its input at sums of indices): left as it is
        return None
    changes = [(what, extents[k], m) for what, k, m in (("rows", row, rows), ("columns", vector, columns)) if m]
    note = ", ".join(f"{what} {n} -> {-(-n // m) * m}" for what, n, m in changes)
    return sch.mod["main"].with_attr(PADDED_ATTR, note)


def padded_kernels(mod) -> dict[str, str]:
    """{kernel name: what was padded} for the kernels `PadRegisterBlocks` padded."""
    import tvm

    return {
        gv.name_hint: str(f.attrs[PADDED_ATTR])
        for gv, f in mod.functions.items()
        if isinstance(f, tvm.tirx.PrimFunc) and f.attrs is not None and PADDED_ATTR in f.attrs
    }


def padding_note(padded: dict[str, str]) -> str:
    """One line for the compile output and the manifest: what was padded, in how many kernels."""
    by_change: dict[str, list[str]] = {}
    for name, change in padded.items():
        by_change.setdefault(change, []).append(name)
    parts = [
        f"{change} in {len(names)} kernel(s) ({', '.join(names[:2])}{', ...' if len(names) > 2 else ''})"
        for change, names in by_change.items()
    ]
    return "register blocks: padded " + "; ".join(parts)


def _axes_read_on_weights(func, block) -> list[bool]:
    """For each iterator: whether a layout-free buffer (a weight) is read along it."""
    from tuner.core.ir import region_buffer_name
    from tuner.schedule.block_facts import read_along

    names = [p.name for p in func.params]
    free = func.attrs.get("layout_free_buffers", []) if func.attrs is not None else []
    weights = {names[int(i)] for i in free}  # a read region's buffer carries its parameter's name
    reads = [r for r in block.reads if region_buffer_name(r) in weights]
    return [any(read_along(r, it.var) for r in reads) for it in block.iter_vars]
