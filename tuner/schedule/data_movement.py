"""Data movement: a kernel that only rearranges one input (an attention head's split, its merge, the transposed
K of QK^T), scheduled as a copy in vectors or, where the input's contiguous axis is not the output's, as a
transpose in square tiles.

MetaSchedule's CPU rules vectorise such a kernel along the output's innermost axis whatever the input's layout:
a BERT encoder's K transpose, [128, 4 x 64] -> [4, 64, 128], then gathered every lane 1 KB apart, with the
reshape's index arithmetic (`x[((h*64 + d) // 256 + s) % 128, ...]` as TOPI writes it) per lane: 31.8 us per
call. Tiled 16 x 16, each tile's 16 input rows and 16 output rows stay in L1: 5.2 us (each kernel timed alone,
2 cores; MiniLM's K transpose 30.5 -> 7.7 us, its heads' merge 15.8 -> 3.8).

    copy:       for rows in parallel(...):  y[rows, v:v+16] = x[f(rows), v:v+16]     # both contiguous
    transpose:  for tiles in parallel(...):                                         # a: the input's contiguous axis
                    for a_i in 16:  y[..., a_o*16 + a_i, s_o*16 : s_o*16+16] = x[...]   # vector along y's last axis

A transpose whose value is its one input times or plus a scalar, maybe under a padding select (a torch attention's K,
scaled by the square root of the attention scale and padded to whole-vector keys by transform/padded_attention.py)
is tiled the same way, 8 x 8 where 16 does not divide (200 keys). Its contiguous axis is found by probing the
input's last index (the iterator that moves it by 1), since the padded keys run past the reshape's range and its
index arithmetic keeps every iterator: ViT-B/16's K, 0.25-0.30 ms a call gathered one lane at a time, 0.08 tiled.

A concat along the innermost axis (NHWC channels: a detector's FPN, YOLO's C2f and SPPF blocks), its inputs'
producers inlined (an upsampling resize), reads each element through a chain of `if_then_else` on the channel,
which no rule vectorises: PP-OCRv4's 80 x 80 x (4 x 24) FPN concat ran one scalar select chain per element.
Its channel loop is now split into vectors and partitioned at the inputs' boundaries, so each part reads one
input in whole vectors (the conditions fold once each part's range is known). The same holds under an element-wise
epilogue (DenseNet's concat -> batch norm -> ReLU, one kernel per dense layer: 10-24x ONNX Runtime's time as select
chains; the whole of DenseNet-121 53 -> 28 ms untuned on Zen 3):

    concat:     for pixels in parallel(...):
                    for part in inputs:  for chunk in part:  y[pixel, chunk*8 : chunk*8+8] = x_part[...]
"""

from __future__ import annotations

from tuner.schedule.block_facts import reduces, vector_width

TILE = 16  # a transpose's square tile: 16 rows of 64 bytes in and out
LOADS = ("TensorLoad", "BufferLoad")


def movement_schedule(func, lanes: int):
    """A `tvm.s_tir.Schedule` of `func` as above, or None when `func` is not pure data movement (one output block
    after inlining, no reduction, one input) or a step does not apply (the schedule primitives check every
    dependence, so a schedule returned is a correct one)."""
    from tvm.s_tir import Schedule

    sch = Schedule(func)
    root = sch.get_sblock("root")
    blocks = sch.get_child_blocks(root)
    if any(reduces(sch.get(b)) for b in blocks) or len(sch.get_output_blocks(root)) != 1:
        return None
    try:
        for block in blocks[:-1]:
            sch.compute_inline(block)
        (block,) = sch.get_child_blocks(root)
        _schedule(sch, block, lanes)
    except Exception:  # not inlinable, or a primitive refused: the generic rules take it
        return None
    return sch


def _concat_bounds(value, last) -> list[int]:
    """Where the parts of a concat along `last` (the innermost iterator) start: its `if_then_else` chain as TOPI
    writes it, `if c <= last then x_k[..] else (...)`, down to a load. Raises on anything else."""
    bounds = []
    while type(value).__name__ == "Call":
        cond = value.args[0] if value.op.name == "prim.if_then_else" else None
        if type(cond).__name__ != "LE" or type(cond.a).__name__ != "IntImm" or not cond.b.same_as(last):
            raise ValueError("not a concat along the innermost axis")
        bounds.append(int(cond.a.value))
        if type(value.args[1]).__name__ not in LOADS:
            raise ValueError("a concat part computes")
        value = value.args[2]
    if type(value).__name__ not in LOADS:
        raise ValueError("a concat part computes")
    return sorted(bounds)


def _concat_chain(value):
    """The `if_then_else` chain of a concat in an element-wise expression (DenseNet's concat under its batch norm
    and ReLU: `max(chain * scale[c] + shift[c], 0)`), or None."""
    if type(value).__name__ == "Call":
        return value if value.op.name == "prim.if_then_else" else None
    found = [
        c for c in (_concat_chain(getattr(value, f)) for f in ("a", "b", "value") if hasattr(value, f)) if c is not None
    ]
    return found[0] if len(found) == 1 else None


def _concat(sch, loops, bounds: list[int], lanes: int) -> None:
    import math

    extent = int(sch.get(loops[-1]).extent)
    parts = [b - a for a, b in zip([0, *bounds], [*bounds, extent])]
    width = math.gcd(lanes, *parts)
    if width < min(4, lanes) or any(p <= 0 for p in parts):
        raise ValueError("parts not in whole vectors")  # scalar parts: the generic rules
    if len(loops) > 1:
        sch.parallel(sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0])
    chunks, _ = sch.split(loops[-1], [None, width])
    for part in sch.loop_partition(chunks, [p // width for p in parts[:-1]] + [None]):
        (inner,) = sch.get_child_blocks(part)
        sch.vectorize(sch.get_loops(inner)[-1])


def _schedule(sch, block, lanes: int) -> None:
    from tvm.tirx.analysis import undefined_vars

    node = sch.get(block)
    body = node.body  # a load node's class is TensorLoad in TVM 0.27 (tirx.BufferLoad is a factory): by name
    if type(body).__name__ != "BufferStore":
        raise ValueError("computes, not only moves")
    loops = sch.get_loops(block)
    if len(loops) != len(node.iter_vars):
        raise ValueError("loops and iterators differ")
    chain = _concat_chain(body.value)
    if chain is not None and not _scalar_value(chain.args[2]):  # a concat (not padding), maybe under an epilogue
        _concat(sch, loops, _concat_bounds(chain, node.iter_vars[-1].var), lanes)
        return
    plain = type(body.value).__name__ in LOADS
    if not plain:
        _scaled_or_padded_load(body.value)  # raises on a kernel that computes (an activation, a cast)
    inputs = [r for r in node.reads if not r.source.same_as(node.writes[0].source) and not _scalar_read(r)]
    if len(inputs) != 1:
        raise ValueError("not a rearrangement of one input")
    index = inputs[0].region[-1].min  # the input's contiguous axis, read at ...
    used = undefined_vars(index)
    if plain:
        contiguous = max(
            (k for k, it in enumerate(node.iter_vars) if any(v.same_as(it.var) for v in used)), default=None
        )
    else:  # padded keys run past the reshape's range, so its `(d // 64 + s) // 197` keeps s in the index
        contiguous = _unit_stride_axis(index, node.iter_vars)
    last = len(loops) - 1
    extents = [int(it.dom.extent) for it in node.iter_vars]
    if contiguous is None:
        raise ValueError("the input's last axis does not move with the output")
    if contiguous == last and not plain:
        raise ValueError("a scaled copy: the generic rules vectorise it as well")
    if contiguous == last:  # a copy: vectors along both
        width = vector_width(extents[last], lanes)
        outer = sch.fuse(*loops[:last]) if last > 1 else loops[0]
        sch.parallel(outer)
        if width > 1:
            sch.vectorize(sch.split(loops[last], [None, width])[1])
        return
    tile = next((t for t in (TILE, TILE // 2) if extents[last] % t == 0 and extents[contiguous] % t == 0), None)
    if tile is None:
        raise ValueError("no square tiles")
    a_o, a_i = sch.split(loops[contiguous], [None, tile])
    s_o, s_i = sch.split(loops[last], [None, tile])
    rest = [lp for k, lp in enumerate(loops) if k not in (contiguous, last)]
    sch.reorder(*rest, a_o, s_o, a_i, s_i)
    sch.parallel(sch.fuse(*rest, a_o, s_o))
    sch.vectorize(s_i)


def _scaled_or_padded_load(value) -> None:
    """Accept a transpose's value that is one load times or plus scalars (a torch attention's K scaled by the
    square root of its scale), maybe under a padding select (`if_then_else(cond, x, 0)`: keys padded to whole
    vectors); raise on anything else."""
    kind = type(value).__name__
    if kind in LOADS:
        return
    if (
        kind == "Call"
        and value.op.name == "prim.if_then_else"
        and type(value.args[2]).__name__ in ("FloatImm", "IntImm")
    ):
        return _scaled_or_padded_load(value.args[1])
    if kind in ("Mul", "Add", "Sub", "Div"):
        scalars = [x for x in (value.a, value.b) if _scalar_value(x)]
        if len(scalars) == 1:
            return _scaled_or_padded_load(value.b if scalars[0] is value.a else value.a)
    raise ValueError("computes, not only moves")


def _scalar_value(expr) -> bool:
    """A constant, or a load of one element at constant indices (a scale kept as a one-element tensor)."""
    kind = type(expr).__name__
    if kind in ("FloatImm", "IntImm"):
        return True
    return kind in LOADS and all(type(i).__name__ == "IntImm" for i in expr.indices)


def _scalar_read(region) -> bool:
    """A read region of one element at constant indices."""
    return all(type(r.min).__name__ == "IntImm" and int(r.extent) == 1 for r in region.region)


def _unit_stride_axis(index, iter_vars) -> int | None:
    """The last iterator that moves `index` by exactly 1 from the origin (the others at 0), or None."""
    from tvm.sym.analyzer import Analyzer
    from tvm.tirx import const

    def at(point: dict):
        analyzer = Analyzer()
        for it in iter_vars:
            analyzer.bind(it.var, const(point.get(it.var.name, 0), str(it.dom.extent.ty)))
        value = analyzer.simplify(index)
        return int(value.value) if type(value).__name__ == "IntImm" else None

    origin = at({})
    moving = [k for k, it in enumerate(iter_vars) if origin is not None and at({it.var.name: 1}) == origin + 1]
    return moving[-1] if moving else None
