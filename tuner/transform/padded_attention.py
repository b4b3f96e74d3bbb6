"""Attention over a key count no vector divides, computed over keys padded to whole vectors.

ViT's 197 tokens are prime: its attention scores have 197 columns, and the softmax over them reduces each row in
scalar steps (`schedule.row_kernels` splits a reduction into vector-wide partial results only where a vector
divides the row), 3x ONNX Runtime's time for that node on Zen 3. The keys are padded instead, once, in the graph:

    s = matmul(q, kt)               kt (..., d, n): n keys, n ragged
    e = f(s, c, ...)                element-wise ops (a scale; a mask over the keys, padded with zeros; not a
                                    divisor over the keys, which the zeros would divide by)
    p = softmax(e, axis=-1)
    o = matmul(p, v)                v (..., n, dv)
->
    s = matmul(q, pad(kt))          zero keys up to n_pad (`core.register_blocks.column_multiple`: 200 on AVX2)
    p = softmax(f(s, ...) + m)      m: 0 on the n keys, -1e30 on the padding
    o = matmul(p, pad(v))           zero values

`exp` of the padding is exactly 0 (the fast `exp` clamps its argument to -88.38, where its power of two is 0), so
the padded keys add nothing to a row's sum and p is 0 there; the zero rows of v multiply nothing. `o` is the same
tensor, so nothing after it changes. The pads are injective and FuseOps puts them into the kernels that produce kt
and v (a head transpose), the mask add into the scores' kernel. Only where s, every op after it, and p are each
read once (attention weights returned as an output keep the model's shape), and only on CPU.
"""

from __future__ import annotations

from tuner.transform.dataflow_facts import static_shape, use_counts

PADDED_KEYS_ATTR = "fusion_tuner.padded_attention"  # module attribute: {"197 -> 200": softmaxes rewritten}
MASKED = -1e30  # a padded key's score: below any real score, finite (no inf - inf)
_ELEMENTWISE = {"relax.add", "relax.subtract", "relax.multiply", "relax.divide"}
_MAX_CHAIN = 4  # element-wise ops between the scores and the softmax


def PadAttentionKeys(lanes: int):  # noqa: N802  (a TVM pass name)
    """The module pass: every attention whose key count no vector divides, over padded keys."""
    import tvm

    def run(mod, _ctx):
        return pad_attention_keys(mod, lanes)

    return tvm.transform.module_pass(run, opt_level=0, name="PadAttentionKeys")


def pad_attention_keys(mod, lanes: int):
    """`mod` with each such attention rewritten (see the module's docstring), the count per size in
    `PADDED_KEYS_ATTR`; the same module when none matched."""
    from tuner.core.ir import rewrite_counting

    return rewrite_counting(mod, lambda func: _rewrite_function(func, lanes), PADDED_KEYS_ATTR)


def padded_attentions(mod) -> dict[str, int]:
    """{"197 -> 200": softmaxes} for the attentions `PadAttentionKeys` rewrote."""
    from tuner.core.ir import counted

    return counted(mod, PADDED_KEYS_ATTR)


def attention_note(padded: dict[str, int]) -> str:
    """One line for the compile output, the manifest and the plan."""
    parts = ", ".join(f"{size} in {n} softmax(es)" for size, n in padded.items())
    return f"attention keys padded to whole vectors: {parts}"


def _rewrite_function(func, lanes: int):
    from tvm import relax
    from tvm.relax import PyExprMutator, expr_functor

    bound = {b.var: b.value for block in func.body.blocks for b in block.bindings if isinstance(b, relax.VarBinding)}
    uses = use_counts(func)
    readers: dict = {}
    for var, value in bound.items():
        for read in relax.analysis.free_vars(value):
            readers.setdefault(read, []).append(var)
    plans, claimed = [], set()
    for var in bound:
        plan = _plan(var, bound, uses, readers, lanes)
        owned = {plan["keys"], *plan["chain"], plan["softmax"], plan["output"]} if plan else set()
        if plan and not owned & claimed:  # one attention's output the scores of another: the first only
            plans.append(plan)
            claimed |= owned
    if not plans:
        return None, {}
    keys = {plan["keys"]: plan for plan in plans}  # the scores' matmul -> its plan
    chain = {var: plan for plan in plans for var in plan["chain"]}
    softmaxes = {plan["softmax"]: plan for plan in plans}
    outputs = {plan["output"]: plan for plan in plans}

    @expr_functor.mutator
    class Pad(PyExprMutator):
        def visit_var_binding_(self, binding):
            var, value = binding.var, binding.value
            if var in keys:
                plan = keys[var]
                kt = _pad_last(self, self.visit_expr(value.args[1]), plan, -1, f"{var.name}_keys")
                self._emit(var, relax.op.matmul(self.visit_expr(value.args[0]), kt))
            elif var in chain:
                args = [self._operand(a, chain[var]) for a in value.args]
                self._emit(var, relax.Call(value.op, args, value.attrs))
            elif var in softmaxes:
                plan = softmaxes[var]
                masked = self.builder_.emit(
                    relax.op.add(self.visit_expr(value.args[0]), relax.const(_mask(plan), "float32")),
                    f"{var.name}_masked",
                )
                self._emit(var, relax.op.nn.softmax(masked, axis=-1))
            elif var in outputs:
                plan = outputs[var]
                v = _pad_last(self, self.visit_expr(value.args[1]), plan, -2, f"{var.name}_values")
                self._emit(var, relax.op.matmul(self.visit_expr(value.args[0]), v))
            else:
                super().visit_var_binding_(binding)

        def _operand(self, arg, plan):
            """A chain op's operand: the padded scores as they are, one that spans the keys padded with zeros."""
            new = self.visit_expr(arg)
            shape = static_shape(arg)
            if isinstance(arg, relax.Var) and (arg in keys or arg in chain):  # the padded scores already
                return new
            return _pad_last(self, new, plan, -1, None) if shape and shape[-1] == plan["n"] else new

        def _emit(self, var, call):
            call = self.builder_.normalize(call)
            new = type(var)(var.name, call.ty)  # the model's name; a Var when it leaves the dataflow block
            self.builder_.emit_normalized(relax.VarBinding(new, call))
            self.set_var_remap(var, new)

    sizes: dict[str, int] = {}
    for plan in plans:
        size = f"{plan['n']} -> {plan['padded']}"
        sizes[size] = sizes.get(size, 0) + 1
    return Pad().visit_expr(func), sizes


def _plan(var, bound, uses, readers, lanes: int) -> dict | None:
    """The attention whose scores `var` is (the matmul of the module's docstring), as a dict of its variables and
    sizes; None when `var` is not such a matmul or a condition of the docstring fails."""

    from tuner.core.register_blocks import column_multiple

    value = bound[var]
    if _op(value) != "relax.matmul" or uses.get(var, 0) != 1:
        return None
    shape, kt_shape = static_shape(var), static_shape(value.args[1])
    if not shape or not kt_shape or len(kt_shape) < 2 or shape[-1] != kt_shape[-1]:
        return None
    n = shape[-1]
    multiple = column_multiple(n, lanes)
    if multiple is None or str(var.ty.dtype) != "float32":
        return None
    chain, current = [], var
    for _ in range(_MAX_CHAIN + 1):
        reader = _only_reader(current, bound, uses, readers)
        if reader is None:
            return None
        current, read = reader
        if _op(read) == "relax.nn.softmax":
            break
        if _op(read) not in _ELEMENTWISE or static_shape(current) != shape or not _broadcasts_keys(read, n):
            return None
        chain.append(current)
    else:
        return None
    axis = int(read.attrs.axis)
    if axis not in (-1, len(shape) - 1) or uses.get(current, 0) != 1:
        return None
    reader = _only_reader(current, bound, uses, readers)
    if reader is None or _op(reader[1]) != "relax.matmul" or not reader[1].args[0].same_as(current):
        return None
    v_shape = static_shape(reader[1].args[1])
    if not v_shape or len(v_shape) < 2 or v_shape[-2] != n:
        return None
    return {
        "keys": var,
        "chain": chain,
        "softmax": current,
        "output": reader[0],
        "n": n,
        "padded": -(-n // multiple) * multiple,
    }


def _only_reader(var, bound, uses, readers):
    """(variable, value) of the one binding that reads `var`, or None when it is read elsewhere or more than once."""
    found = readers.get(var, [])
    if uses.get(var, 0) != 1 or len(found) != 1:
        return None
    return found[0], bound[found[0]]


def _broadcasts_keys(call, n: int) -> bool:
    """Every operand of the element-wise op has a static shape whose last axis is 1, n, or absent (a scalar); a
    divisor that spans the keys is refused (padded with zeros, it would divide by zero)."""
    for k, arg in enumerate(call.args):
        shape = static_shape(arg)
        if shape is None or (shape and shape[-1] not in (1, n)):
            return False
        if k == 1 and _op(call) == "relax.divide" and shape and shape[-1] == n:
            return False
    return True


def _pad_last(mutator, expr, plan, axis: int, name: str | None):
    """`expr` zero-padded from n to the padded count along `axis` (-1 or -2)."""
    from tvm import relax

    rank = len(static_shape(expr))
    widths = [0] * (2 * rank)
    widths[2 * (rank + axis) + 1] = plan["padded"] - plan["n"]
    call = relax.op.nn.pad(expr, widths, "constant", 0.0)
    return mutator.builder_.emit(call, name) if name else mutator.builder_.emit(call)


def _mask(plan):
    import numpy as np

    mask = np.zeros(plan["padded"], "float32")
    mask[plan["n"] :] = MASKED
    return mask


def _op(value) -> str:
    from tvm import relax

    return getattr(value.op, "name", "") if isinstance(value, relax.Call) else ""
