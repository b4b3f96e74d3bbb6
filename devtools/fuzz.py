"""A seeded mutation fuzzer for ONNX input: small valid models, damaged in the ways real files are damaged.

    cases(seed, n)  -> [(case id, mutation name, bytes of an .onnx file)]

Used by tests/test_fuzz.py (in the default run) and by `python -m devtools.fuzz --n 500` for longer campaigns.
Every case must end in a verdict (buildable or not, exit 0/1) or a clear error (exit 2): never a traceback, a
signal, a hang or a file left behind.
"""

from __future__ import annotations

import random

import onnx
from onnx import TensorProto, helper


def base_models() -> dict[str, onnx.ModelProto]:
    """Small valid models covering conv/pool/BN/gemm and matmul/softmax/reshape graphs."""
    import numpy as np

    rng = np.random.default_rng(0)

    def init(name, *shape):
        return helper.make_tensor(name, TensorProto.FLOAT, shape, rng.standard_normal(shape).astype("float32").ravel())

    cnn_nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "g", "beta", "m", "v"], ["n"], name="bn", epsilon=1e-5),
        helper.make_node("Relu", ["n"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten", axis=1),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], name="fc", transB=1),
    ]
    cnn = helper.make_graph(
        cnn_nodes,
        "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        [
            init("w", 4, 3, 3, 3),
            init("b", 4),
            init("g", 4),
            init("beta", 4),
            init("m", 4),
            helper.make_tensor("v", TensorProto.FLOAT, [4], [1.0] * 4),
            init("fw", 10, 64),
            init("fb", 10),
        ],
    )
    att_nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"], name="q_proj"),
        helper.make_node("Transpose", ["q"], ["qt"], name="qt", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "qt"], ["s"], name="scores"),
        helper.make_node("Softmax", ["s"], ["a"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["a", "x"], ["o"], name="mix"),
        helper.make_node("Reshape", ["o", "shape"], ["y"], name="reshape"),
    ]
    att = helper.make_graph(
        att_nodes,
        "attention",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 48])],
        [init("wq", 8, 8), helper.make_tensor("shape", TensorProto.INT64, [2], [1, 48])],
    )
    opset = [helper.make_opsetid("", 17)]
    return {
        "cnn": helper.make_model(cnn, opset_imports=opset, ir_version=8),
        "attention": helper.make_model(att, opset_imports=opset, ir_version=8),
    }


def _nodes_with_ints(m):
    return [
        (n, a)
        for n in m.graph.node
        for a in n.attribute
        if a.type in (onnx.AttributeProto.INT, onnx.AttributeProto.INTS)
    ]


def attr_int(m, r):
    choices = _nodes_with_ints(m)
    if not choices:
        return m
    node, a = r.choice(choices)
    value = r.choice([-1, 0, 100, 1000, 2**31, -(2**40)])
    if a.type == onnx.AttributeProto.INT:
        a.i = value
    elif a.ints:
        a.ints[r.randrange(len(a.ints))] = value
    return m


def input_dim(m, r):
    dims = m.graph.input[0].type.tensor_type.shape.dim
    d = dims[r.randrange(len(dims))]
    d.dim_value = r.choice([0, 2, 1000, 2**40, 2**63 - 1])
    if r.random() < 0.3:
        d.Clear()
        d.dim_value = 1  # a clean 1 somewhere: some mutations must stay valid
    return m


def negative_dim(m, r):
    # dim_value is int64: -1 is what the exporters of the campaign's models wrote
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = -1
    return m


def elem_type(m, r):
    m.graph.input[0].type.tensor_type.elem_type = r.choice(
        [TensorProto.STRING, TensorProto.UNDEFINED, 999, TensorProto.FLOAT16, TensorProto.INT64, TensorProto.BOOL]
    )
    return m


def drop_outputs(m, r):
    del m.graph.output[:]
    return m


def opset(m, r):
    m.opset_import[0].version = r.choice([1, 6, 11, 13, 99])
    return m


def drop_node(m, r):
    del m.graph.node[r.randrange(len(m.graph.node))]
    return m


def op_type(m, r):
    m.graph.node[r.randrange(len(m.graph.node))].op_type = r.choice(["Foo", "Relu", "Conv", "Softmax", "Identity"])
    return m


def drop_attributes(m, r):
    n = m.graph.node[r.randrange(len(m.graph.node))]
    del n.attribute[:]
    return m


def initializer_dims(m, r):
    if not m.graph.initializer:
        return m
    t = m.graph.initializer[r.randrange(len(m.graph.initializer))]
    if t.dims:
        t.dims[r.randrange(len(t.dims))] = r.choice([0, 1, 3, 1000])
    return m


def rename_edge(m, r):
    n = m.graph.node[r.randrange(len(m.graph.node))]
    if n.input:
        n.input[r.randrange(len(n.input))] = r.choice(["", "missing", n.output[0]])
    return m


MODEL_MUTATIONS = {
    f.__name__: f
    for f in (
        attr_int,
        input_dim,
        negative_dim,
        elem_type,
        drop_outputs,
        opset,
        drop_node,
        op_type,
        drop_attributes,
        initializer_dims,
        rename_edge,
    )
}


def truncate(data: bytes, r) -> bytes:
    return data[: r.randrange(1, len(data))]


def byte_flip(data: bytes, r) -> bytes:
    b = bytearray(data)
    for _ in range(r.randint(1, 4)):
        b[r.randrange(len(b))] ^= 1 << r.randrange(8)
    return bytes(b)


def name_byte(data: bytes, r) -> bytes:
    """A byte of a node name replaced by one that is not UTF-8 (what broke onnx.checker's messages)."""
    for name in (b"conv", b"softmax", b"relu", b"q_proj", b"mix"):
        i = data.find(name)
        if i >= 0:
            b = bytearray(data)
            b[i + r.randrange(len(name))] = 0xFF
            return bytes(b)
    return byte_flip(data, r)


BYTE_MUTATIONS = {f.__name__: f for f in (truncate, byte_flip, name_byte)}


def cases(seed: int, n: int) -> list[tuple[str, str, bytes]]:
    """n mutated models, the same for the same seed."""
    r = random.Random(seed)
    bases = base_models()
    names = sorted(MODEL_MUTATIONS) + sorted(BYTE_MUTATIONS)
    out = []
    for k in range(n):
        base = r.choice(sorted(bases))
        mutation = names[k % len(names)] if k < len(names) else r.choice(names)
        m = onnx.ModelProto()
        m.CopyFrom(bases[base])
        if mutation in MODEL_MUTATIONS:
            for _ in range(1 if r.random() < 0.8 else 2):
                m = MODEL_MUTATIONS[mutation](m, r)
            data = m.SerializeToString()
        else:
            data = BYTE_MUTATIONS[mutation](m.SerializeToString(), r)
        out.append((f"{seed}-{k}-{base}-{mutation}", mutation, data))
    return out


def main(argv=None) -> int:
    """A longer campaign through `check` in this process: prints any case that raised something else than a
    TunerError, and the verdict counts."""
    import argparse
    import collections
    import os
    import tempfile

    from tuner.commands.check import check_model
    from tuner.core.errors import TunerError

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--compile", type=int, default=0, help="also compile this many of the buildable cases")
    args = ap.parse_args(argv)
    from tuner.commands.compile import compile_model

    compiled = 0
    verdicts = collections.Counter()
    bugs = 0
    with tempfile.TemporaryDirectory() as tmp:
        for case_id, _mutation, data in cases(args.seed, args.n):
            path = os.path.join(tmp, f"{case_id}.onnx")
            with open(path, "wb") as f:
                f.write(data)
            try:
                buildable = check_model(path).buildable
                verdicts["buildable" if buildable else "not buildable"] += 1
                if buildable and compiled < args.compile:
                    compiled += 1
                    try:
                        compile_model(path, os.path.join(tmp, "m.ftpkg"), target="llvm")
                    except Exception as err:  # check said buildable: compile must get past import
                        bugs += 1
                        print(f"{case_id}: check: buildable, compile: {type(err).__name__}: {str(err)[:300]}")
            except TunerError:
                verdicts["error"] += 1
            except Exception as err:  # a bug: what the test must never see
                bugs += 1
                print(f"{case_id}: {type(err).__name__}: {str(err).strip().splitlines()[-1][:200]}")
    print(dict(verdicts), f"bugs: {bugs}")
    return 1 if bugs else 0


if __name__ == "__main__":
    raise SystemExit(main())
