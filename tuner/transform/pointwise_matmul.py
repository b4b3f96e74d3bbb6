"""1x1 convs over maps no register block divides, as matmuls over their flattened pixels.

A channels-last 1x1 conv with stride 1 and no padding is a matmul of its N x H x W pixels by its weights. The
default schedule's register block takes the conv's rows along the width, then the height, in exact divisors, so a
13 x 13 map (SqueezeNet's last stage) or a 7 x 7 one on AVX2 (6 rows beside two vectors) got blocks of one row:
SqueezeNet 1.1's 512 -> 1000 classifier ran at 46% of the CPU's peak, 1.9x ONNX Runtime's time for that node. As a
matmul over H*W rows, `PadRegisterBlocks` (schedule/padded_blocks.py) pads 169 rows to 170 (5-row blocks), 49 to
50. Timed alone (Zen 3, default schedules; the matmul with a bias + ReLU epilogue): the classifier 1.77 -> 1.00 ms,
SqueezeNet's 13 x 13 squeeze convs 1.7-2.8x faster, EfficientNet-B0's and MobileNetV3's 7 x 7 ones 13-27%.

    y = conv2d(x, W)      NHWC / OHWI, 1x1, stride 1, no padding, one group, W constant, rows as above
 -> y = reshape(matmul(reshape(x, (N, H*W, C)), W'), (N, H, W, F))      W' = W as (C, F), folded at build time

Both reshapes only relabel a contiguous tensor, and are written as the VM's view (`vm.builtin.reshape`, what
RewriteDataflowReshape makes of a reshape at build time) so that FuseOps cannot fuse one into a neighbour's kernel:
a reshape fused into DenseNet's concat + batch norm + ReLU kernels made them index through a division by the width
and run 2x slower. The element-wise ops that read the conv's result (bias, activation, hard-swish's two reads, a
residual add, a squeeze-excite scale) are rewritten over the flattened pixels too, their other operands reshaped
the same way (a view, or a constant folded at build time), so FuseOps keeps them in the matmul's kernel; the view
back to the map comes after the last of them, before the first op that needs the map (a pool, a concat, the next
conv). Only convs whose map the conv's register block
divides badly (fewer than half the rows that fit) and whose flattened pixels divide, or pad, into blocks of at
least half are rewritten; every other conv keeps its kernel as it was.
"""

from __future__ import annotations

from tuner.core.register_blocks import divisor_at_most, max_rows, registers_for, row_multiple, rows_beside_two_vectors
from tuner.transform.dataflow_facts import constant_vars, out_dtype, static_shape
from tuner.transform.transpose_sinking import BINARY, UNARY

FLATTENED_ATTR = "fusion_tuner.flattened_convs"  # module attribute: {"13x13": convs rewritten on such maps}


def FlattenPointwiseConvs(lanes: int):  # noqa: N802  (a pass, named as TVM names its passes)
    """The module pass for an ISA with `lanes` fp32 lanes."""
    import tvm

    return tvm.transform.module_pass(
        lambda mod, _ctx: flatten_pointwise_convs(mod, lanes), opt_level=0, name="FlattenPointwiseConvs"
    )


def flatten_pointwise_convs(mod, lanes: int):
    """`mod` with its 1x1 convs on badly divided maps as matmuls over their pixels (see the module's docstring),
    the count per map size in `FLATTENED_ATTR`; `mod` itself when no conv qualifies."""
    from tuner.core.ir import rewrite_counting

    return rewrite_counting(mod, lambda func: _flatten_function(func, lanes), FLATTENED_ATTR)


def flattened_maps(mod) -> dict[str, int]:
    """{"13x13": convs} for the convs `FlattenPointwiseConvs` rewrote."""
    from tuner.core.ir import counted

    return counted(mod, FLATTENED_ATTR)


def flattening_note(maps: dict[str, int]) -> str:
    """One line for the compile output and the manifest."""
    parts = ", ".join(f"{n} on {size} maps" for size, n in maps.items())
    return f"1x1 convs as matmuls over their pixels (whole register blocks): {parts}"


def pixel_rows(height: int, width: int, rows_cap: int) -> tuple[int, int]:
    """(rows of the conv's register block, rows of the flattened matmul's block): the conv fills the width's best
    divisor, then the height's within what is left (as schedule/tiles.py does); the matmul the best divisor of
    H*W, or the block `PadRegisterBlocks` pads it to."""
    along_width = divisor_at_most(width, rows_cap)
    conv = along_width
    if rows_cap // along_width >= 2:
        conv *= divisor_at_most(height, rows_cap // along_width)
    pixels = height * width
    flat = divisor_at_most(pixels, rows_cap)
    if 2 * flat < rows_cap:
        flat = row_multiple(pixels, rows_cap) or flat
    return conv, flat


def worth_flattening(height: int, width: int, channels_out: int, lanes: int) -> bool:
    """Whether a 1x1 conv on a height x width map gets a fuller register block as a matmul over its pixels: the
    conv's rows fill less than half of what fits beside two vectors, the matmul's at least half. Where the conv
    instead holds the whole width beside one vector (7 rows on AVX2: `TileRecipe.odd_rows_one_vector`), only when
    the output channels are an even number of vectors, so that the matmul's block has two side by side (5 x 2
    against 7 x 1); with an odd number it would get 5 x 1 or 2 x 3 (ShuffleNetV2's 232 channels on 7 x 7: 4%
    slower in the model)."""
    rows_cap = rows_beside_two_vectors(lanes)
    conv, flat = pixel_rows(height, width, rows_cap)
    if not (2 * conv < rows_cap and 2 * flat >= rows_cap and flat > conv):
        return False
    if divisor_at_most(width, max_rows(registers_for(lanes))) > rows_cap:  # the width's rows beside one vector
        return channels_out % (2 * lanes) == 0
    return True


def _pointwise_map(call, lanes: int, constant) -> tuple[int, int, int, int, int] | None:
    """(N, H, W, C, F) when `call` is a conv2d this pass rewrites, else None."""
    from tvm import relax

    if not isinstance(call, relax.Call) or getattr(call.op, "name", "") != "relax.nn.conv2d":
        return None
    a = call.attrs
    out_layout = str(a.out_layout) if a.out_layout else str(a.data_layout)
    if (str(a.data_layout), str(a.kernel_layout), out_layout) != ("NHWC", "OHWI", "NHWC") or int(a.groups) != 1:
        return None
    if any(int(s) != 1 for s in a.strides) or any(int(d) != 1 for d in a.dilation) or any(int(p) for p in a.padding):
        return None
    x, w = call.args
    xs, ws = static_shape(x), static_shape(w)
    if xs is None or ws is None or len(xs) != 4 or ws[1:3] != [1, 1]:
        return None
    if not _is_constant(w, constant):
        return None  # a weight computed at run time would be transposed in every call
    n, h, wd, c = xs
    return (n, h, wd, c, ws[0]) if worth_flattening(h, wd, ws[0], lanes) else None


def _is_constant(expr, constant: set) -> bool:
    """A constant, or a variable computed from constants alone (folded at build time)."""
    import tvm

    return isinstance(expr, tvm.ir.expr.Constant) or expr in constant


def view(expr, shape: list[int]):
    """`expr` (a tensor computed at run time) relabelled to `shape`: the VM's reshape, a view, which FuseOps leaves
    alone."""
    from tvm import relax

    ty = relax.TensorType(shape, str(expr.ty.dtype))
    return relax.call_pure_packed("vm.builtin.reshape", expr, relax.ShapeExpr(shape), ty_args=ty)


def _flat_operand(operand, n: int, h: int, w: int, is_constant: bool):
    """The other operand of an element-wise op over an (n, h, w, f) map, for the op over (n, h*w, f); None when it
    broadcasts along the height but not the width (or the other way), or has more axes."""
    from tvm import relax

    shape = static_shape(operand)
    if shape is None or len(shape) > 4:
        return None
    if len(shape) <= 1:
        return operand  # a scalar or a per-channel vector broadcasts the same way over either shape
    full = [1] * (4 - len(shape)) + shape
    if full[0] not in (1, n) or full[1:3] not in ([h, w], [1, 1]):
        return None
    flat = [full[0], h * w if full[1] == h else 1, full[3]]
    return relax.op.reshape(operand, flat) if is_constant else view(operand, flat)  # a constant: folded


def _flatten_function(func, lanes: int):
    """(`func` rewritten, {map size: convs}), or (None, {}) when no conv qualifies."""
    from tvm import relax
    from tvm.relax import PyExprMutator, expr_functor

    constant = constant_vars(func)
    elementwise = {f"relax.{name}" for name in (*UNARY, *BINARY)}
    binary = {f"relax.{name}" for name in BINARY}
    counts: dict[str, int] = {}
    flat: dict = {}  # original 4-D var -> (its value over the pixels, (n, h, w))

    @expr_functor.mutator
    class Flatten(PyExprMutator):
        def visit_var_binding_(self, binding):
            value = binding.value
            if (dims := _pointwise_map(value, lanes, constant)) is not None:
                return self._conv(binding, dims)
            op = getattr(getattr(value, "op", None), "name", "")
            if op in elementwise and any(a in flat for a in value.args[: 2 if op in binary else 1]):
                if self._elementwise(binding, op in binary):
                    return None
            return super().visit_var_binding_(binding)

        def _conv(self, binding, dims):
            n, h, w, c, f = dims
            source, weight = binding.value.args
            name = binding.var.name
            if source in flat and flat[source][1] == (n, h, w):  # already over the pixels: no view
                pixels = flat[source][0]
            else:
                pixels = self.builder_.emit(view(self.visit_expr(source), [n, h * w, c]), f"{name}.pixels")
            weight = relax.op.permute_dims(relax.op.reshape(self.visit_expr(weight), [f, c]), [1, 0])  # (C, F), folded
            product = relax.op.matmul(pixels, weight, out_dtype=out_dtype(binding.value))
            self._emit_flat(binding, self.builder_.emit(product, name), (n, h, w))
            counts[f"{h}x{w}"] = counts.get(f"{h}x{w}", 0) + 1

        def _elementwise(self, binding, is_binary: bool) -> bool:
            value = binding.value
            k = next(i for i, a in enumerate(value.args) if a in flat)
            flat_k, (n, h, w) = flat[value.args[k]]
            if static_shape(binding.var) != [n, h, w, static_shape(flat_k)[-1]]:
                return False  # the other operand broadcasts the map larger
            args = [self.visit_expr(a) for a in value.args]
            args[k] = flat_k
            if is_binary:
                other = value.args[1 - k]
                if other in flat:
                    if flat[other][1] != (n, h, w):
                        return False
                    args[1 - k] = flat[other][0]
                else:
                    args[1 - k] = _flat_operand(args[1 - k], n, h, w, _is_constant(other, constant))
                    if args[1 - k] is None:
                        return False
            call = relax.Call(value.op, args, value.attrs, value.ty_args)
            self._emit_flat(binding, self.builder_.emit(call, binding.var.name), (n, h, w))
            return True

        def _emit_flat(self, binding, flat_var, dims):
            """Record `flat_var` as the pixels' form of `binding.var`, and bind the var itself to the map again
            for any reader that is not rewritten (unread ones are removed afterwards)."""
            flat[binding.var] = (flat_var, dims)
            back = type(binding.var)(binding.var.name, binding.var.ty)  # a Var when it leaves the block
            shape = static_shape(binding.var)
            self.builder_.emit_normalized(relax.VarBinding(back, self.builder_.normalize(view(flat_var, shape))))
            self.set_var_remap(binding.var, back)

    new = Flatten().visit_expr(func)
    if not counts:
        return None, {}
    return relax.analysis.remove_all_unused(new), counts
