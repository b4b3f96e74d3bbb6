#!/usr/bin/env python3
"""Build the small synthetic models into models/ with onnx.helper (seeded, so files are reproducible).

cnn.onnx          Conv-BN-ReLU blocks, a residual Add, MaxPool, Conv-BN-Clip(ReLU6), GAP, Gemm, Softmax
transformer.onnx  one encoder block: Q/K/V MatMuls, attention (QK^T * scale + mask -> Softmax -> V),
                  residual Add + LayerNorm (decomposed, as older exporters write it), FFN with Erf-GELU
bert_ids.onnx     a BERT-style encoder as exporters write it: input_ids, attention_mask and token_type_ids (int64,
                  1x16) through word (1000 rows), position and token-type (2 rows) embeddings, LayerNorm,
                  one attention block with the mask as an additive bias, pooled output
mlp.onnx          Gemm+ReLU, Gemm+SiLU, Gemm; dynamic batch dim (needs --input-shape x:BxK)
cuda_edges.onnx   the two kernels dlight could not schedule on real models: an HGNet-style stem (Conv + bias + ReLU
                  whose epilogue ends in the next op's explicit Pad, then a 2x2 Conv) and a Conv + bias + swish +
                  residual Add
subnormal_conv.onnx  a 768->384 1x1 conv on a 10x10 map whose weights are 24% subnormal, as a trained text
                  detector's were (the subnormal-weights lever)
crnn_lstm.onnx    a classic CRNN text recognizer at real scale: a VGG-style conv stack over a 32x320 grey crop down to
                  80 columns, two bidirectional LSTM layers (hidden 256, as EasyOCR's and chineseocr's CRNNs) and
                  a per-column classifier (the recurrent-steps lever)
resnext_blocks.onnx  three ResNeXt-50 (32x4d) stage-1 bottlenecks at 56x56: 1x1, grouped 3x3 (32 groups of 4),
                  1x1, residual Add (the grouped conv of tuner/banded_conv.py; no real ResNeXt is available here)
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class GraphBuilder:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []
        self.count = 0

    def weight(self, name, shape, scale=None):
        scale = scale if scale is not None else 1.0 / np.sqrt(max(1, int(np.prod(shape[1:])) or shape[0]))
        self.inits.append(numpy_helper.from_array((self.rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def const(self, name, array):
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def op(self, op_type, inputs, name=None, **attrs):
        self.count += 1
        name = name or f"{op_type.lower()}_{self.count}"
        out = f"{name}_out"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=name, **attrs))
        return out

    def model(self, name, inputs, outputs):
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="fusion-tuner")
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m


def conv_bn(g, x, cin, cout, name, act="relu", k=3):
    w = g.weight(f"{name}.w", (cout, cin, k, k))
    b = g.weight(f"{name}.b", (cout,), 0.1)
    y = g.op("Conv", [x, w, b], name=f"{name}/conv", pads=[k // 2] * 4, kernel_shape=[k, k])
    scale = g.const(f"{name}.bn.scale", (1 + 0.1 * g.rng.standard_normal(cout)).astype(np.float32))
    bias = g.const(f"{name}.bn.bias", (0.1 * g.rng.standard_normal(cout)).astype(np.float32))
    mean = g.const(f"{name}.bn.mean", (0.1 * g.rng.standard_normal(cout)).astype(np.float32))
    var = g.const(f"{name}.bn.var", (1 + 0.1 * g.rng.random(cout)).astype(np.float32))
    y = g.op("BatchNormalization", [y, scale, bias, mean, var], name=f"{name}/bn", epsilon=1e-5)
    if act == "relu":
        return g.op("Relu", [y], name=f"{name}/relu")
    lo, hi = g.const(f"{name}.clip.lo", np.float32(0)), g.const(f"{name}.clip.hi", np.float32(6))
    return g.op("Clip", [y, lo, hi], name=f"{name}/relu6")


def make_mobilenet_block(c=16, hw=16) -> onnx.ModelProto:
    """A MobileNetV3-style inverted-residual block: 1x1 expand + BN + HardSwish, depthwise 3x3 + BN + HardSwish,
    squeeze-excitation (GlobalAveragePool, 1x1 + Relu, 1x1 + HardSigmoid, Mul), 1x1 project + BN, residual add."""
    g = GraphBuilder(3)

    def bn(y, cout, name):
        ones = (1 + 0.1 * g.rng.standard_normal(cout)).astype(np.float32)
        consts = [g.const(f"{name}.{k}", v) for k, v in (("scale", ones), ("bias", 0.1 * ones), ("mean", 0.1 * ones))]
        var = g.const(f"{name}.var", (1 + 0.1 * g.rng.random(cout)).astype(np.float32))
        return g.op("BatchNormalization", [y, *consts, var], name=name, epsilon=1e-3)

    e = 2 * c
    y = g.op("Conv", ["x", g.weight("expand.w", (e, c, 1, 1))], name="expand/conv", kernel_shape=[1, 1])
    y = g.op("HardSwish", [bn(y, e, "expand/bn")], name="expand/hswish")
    y = g.op("Conv", [y, g.weight("dw.w", (e, 1, 3, 3))], name="dw/conv", kernel_shape=[3, 3], pads=[1] * 4, group=e)
    y = g.op("HardSwish", [bn(y, e, "dw/bn")], name="dw/hswish")
    s = g.op("GlobalAveragePool", [y], name="se/pool")
    s = g.op("Conv", [s, g.weight("se.w1", (c // 2, e, 1, 1)), g.weight("se.b1", (c // 2,))], name="se/fc1")
    s = g.op("Relu", [s], name="se/relu")
    s = g.op("Conv", [s, g.weight("se.w2", (e, c // 2, 1, 1)), g.weight("se.b2", (e,))], name="se/fc2")
    s = g.op("HardSigmoid", [s], name="se/hsigmoid", alpha=1 / 6, beta=0.5)
    y = g.op("Mul", [y, s], name="se/scale")
    y = g.op("Conv", [y, g.weight("project.w", (c, e, 1, 1))], name="project/conv", kernel_shape=[1, 1])
    y = g.op("Add", ["x", bn(y, c, "project/bn")], name="residual")
    return g.model(
        "mobilenet_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, c, hw, hw])],
    )


def make_cnn() -> onnx.ModelProto:
    g = GraphBuilder(1)
    x = conv_bn(g, "input", 3, 16, "stem")
    y = conv_bn(g, x, 16, 16, "block1")
    y = g.op("Add", [x, y], name="block1/residual")
    y = g.op("MaxPool", [y], name="pool", kernel_shape=[2, 2], strides=[2, 2])
    y = conv_bn(g, y, 16, 32, "block2", act="relu6")
    y = g.op("GlobalAveragePool", [y], name="gap")
    y = g.op("Flatten", [y], name="flatten")
    y = g.op("Gemm", [y, g.weight("fc.w", (10, 32)), g.weight("fc.b", (10,), 0.1)], name="fc", transB=1)
    y = g.op("Softmax", [y], name="softmax", axis=-1)
    g.nodes[-1].output[0] = "probs"
    return g.model(
        "cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 10])],
    )


def layer_norm(g, x, d, name):
    mean = g.op("ReduceMean", [x], name=f"{name}/mean", axes=[-1], keepdims=1)
    xc = g.op("Sub", [x, mean], name=f"{name}/center")
    sq = g.op("Pow", [xc, g.const(f"{name}.two", np.float32(2))], name=f"{name}/square")
    var = g.op("ReduceMean", [sq], name=f"{name}/var", axes=[-1], keepdims=1)
    std = g.op(
        "Sqrt",
        [g.op("Add", [var, g.const(f"{name}.eps", np.float32(1e-5))], name=f"{name}/add_eps")],
        name=f"{name}/sqrt",
    )
    y = g.op("Div", [xc, std], name=f"{name}/normalize")
    y = g.op(
        "Mul",
        [y, g.const(f"{name}.gamma", (1 + 0.1 * g.rng.standard_normal(d)).astype(np.float32))],
        name=f"{name}/scale",
    )
    return g.op(
        "Add", [y, g.const(f"{name}.beta", (0.1 * g.rng.standard_normal(d)).astype(np.float32))], name=f"{name}/shift"
    )


def make_transformer(seq=16, d=64, heads=4, ffn=128) -> onnx.ModelProto:
    g = GraphBuilder(2)
    hd = d // heads
    x = "x"
    heads_shape = g.const("heads_shape", np.array([1, seq, heads, hd], np.int64))

    def proj(name):
        y = g.op("MatMul", [x, g.weight(f"{name}.w", (d, d))], name=f"attn/{name}/matmul")
        y = g.op("Add", [y, g.weight(f"{name}.b", (d,), 0.1)], name=f"attn/{name}/bias")
        y = g.op("Reshape", [y, heads_shape], name=f"attn/{name}/split_heads")
        return g.op("Transpose", [y], name=f"attn/{name}/transpose", perm=[0, 2, 1, 3])

    q, k, v = proj("q"), proj("k"), proj("v")
    kt = g.op("Transpose", [k], name="attn/k_t", perm=[0, 1, 3, 2])
    s = g.op("MatMul", [q, kt], name="attn/scores")
    s = g.op("Mul", [s, g.const("attn.scale", np.float32(1 / np.sqrt(hd)))], name="attn/scale")
    s = g.op("Add", [s, "mask"], name="attn/mask")
    p = g.op("Softmax", [s], name="attn/softmax", axis=-1)
    o = g.op("MatMul", [p, v], name="attn/context")
    o = g.op("Transpose", [o], name="attn/merge_transpose", perm=[0, 2, 1, 3])
    o = g.op("Reshape", [o, g.const("merge_shape", np.array([1, seq, d], np.int64))], name="attn/merge_heads")
    o = g.op("MatMul", [o, g.weight("out.w", (d, d))], name="attn/out/matmul")
    o = g.op("Add", [o, g.weight("out.b", (d,), 0.1)], name="attn/out/bias")
    h = layer_norm(g, g.op("Add", [x, o], name="attn/residual"), d, "ln1")
    f = g.op("MatMul", [h, g.weight("ffn1.w", (d, ffn))], name="ffn/fc1/matmul")
    f = g.op("Add", [f, g.weight("ffn1.b", (ffn,), 0.1)], name="ffn/fc1/bias")
    e = g.op(
        "Erf", [g.op("Div", [f, g.const("sqrt2", np.float32(np.sqrt(2)))], name="ffn/gelu/div")], name="ffn/gelu/erf"
    )
    e = g.op("Add", [e, g.const("one", np.float32(1))], name="ffn/gelu/add")
    f = g.op("Mul", [g.op("Mul", [f, e], name="ffn/gelu/mul"), g.const("half", np.float32(0.5))], name="ffn/gelu/half")
    f = g.op("MatMul", [f, g.weight("ffn2.w", (ffn, d))], name="ffn/fc2/matmul")
    f = g.op("Add", [f, g.weight("ffn2.b", (d,), 0.1)], name="ffn/fc2/bias")
    layer_norm(g, g.op("Add", [h, f], name="ffn/residual"), d, "ln2")
    g.nodes[-1].output[0] = "y"
    return g.model(
        "transformer",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, d]),
            helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 1, seq, seq]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, d])],
    )


def make_bert_ids(seq=16, d=32, vocab=1000, heads=2) -> onnx.ModelProto:
    g = GraphBuilder(5)
    hd = d // heads
    words = g.op("Gather", [g.weight("word_embeddings", (vocab, d), 0.5), "input_ids"], name="embeddings/word")
    types = g.op("Gather", [g.weight("token_type_embeddings", (2, d), 0.5), "token_type_ids"], name="embeddings/type")
    positions = g.const("position_ids", np.arange(seq, dtype=np.int64)[None])
    pos = g.op("Gather", [g.weight("position_embeddings", (64, d), 0.5), positions], name="embeddings/position")
    x = g.op("Add", [g.op("Add", [words, types], name="embeddings/add_type"), pos], name="embeddings/add_position")
    x = layer_norm(g, x, d, "embeddings/ln")
    # the mask as BERT exporters write it: (1 - mask) * -10000, broadcast over heads and query positions
    m = g.op("Cast", [g.op("Unsqueeze", ["attention_mask", g.const("mask_axes", np.array([1, 2], np.int64))],
                           name="mask/unsqueeze")], name="mask/cast", to=TensorProto.FLOAT)  # fmt: skip
    m = g.op("Sub", [g.const("mask_one", np.float32(1)), m], name="mask/invert")
    m = g.op("Mul", [m, g.const("mask_big", np.float32(-10000))], name="mask/bias")
    heads_shape = g.const("heads_shape", np.array([1, seq, heads, hd], np.int64))

    def proj(name):
        y = g.op("MatMul", [x, g.weight(f"{name}.w", (d, d))], name=f"attn/{name}/matmul")
        y = g.op("Reshape", [g.op("Add", [y, g.weight(f"{name}.b", (d,), 0.1)], name=f"attn/{name}/bias"),
                             heads_shape], name=f"attn/{name}/split")  # fmt: skip
        return g.op("Transpose", [y], name=f"attn/{name}/transpose", perm=[0, 2, 1, 3])

    q, k, v = proj("q"), proj("k"), proj("v")
    s = g.op("MatMul", [q, g.op("Transpose", [k], name="attn/k_t", perm=[0, 1, 3, 2])], name="attn/scores")
    s = g.op("Mul", [s, g.const("attn.scale", np.float32(1 / np.sqrt(hd)))], name="attn/scale")
    p = g.op("Softmax", [g.op("Add", [s, m], name="attn/mask")], name="attn/softmax", axis=-1)
    o = g.op("Transpose", [g.op("MatMul", [p, v], name="attn/context")], name="attn/merge", perm=[0, 2, 1, 3])
    o = g.op("Reshape", [o, g.const("merge_shape", np.array([1, seq, d], np.int64))], name="attn/merge_heads")
    o = g.op("MatMul", [o, g.weight("out.w", (d, d))], name="attn/out/matmul")
    h = layer_norm(g, g.op("Add", [x, o], name="attn/residual"), d, "ln1")
    g.op("ReduceMean", [h], name="pool", axes=[1], keepdims=0)
    g.nodes[-1].output[0] = "pooled"
    ids = [helper.make_tensor_value_info(n, TensorProto.INT64, [1, seq])
           for n in ("input_ids", "attention_mask", "token_type_ids")]  # fmt: skip
    return g.model("bert_ids", ids, [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, [1, d])])


def make_mlp() -> onnx.ModelProto:
    g = GraphBuilder(3)
    y = g.op("Gemm", ["x", g.weight("fc1.w", (64, 32)), g.weight("fc1.b", (64,), 0.1)], name="fc1", transB=1)
    y = g.op("Relu", [y], name="fc1/relu")
    y = g.op("Gemm", [y, g.weight("fc2.w", (64, 64)), g.weight("fc2.b", (64,), 0.1)], name="fc2", transB=1)
    y = g.op("Mul", [y, g.op("Sigmoid", [y], name="fc2/silu/sigmoid")], name="fc2/silu/mul")
    y = g.op("Gemm", [y, g.weight("fc3.w", (10, 64)), g.weight("fc3.b", (10,), 0.1)], name="fc3", transB=1)
    g.nodes[-1].output[0] = "logits"
    return g.model(
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
    )


def make_resnext_blocks(blocks=3, c=256, width=128, groups=32, hw=56) -> onnx.ModelProto:
    g = GraphBuilder(4)

    def conv(x, cout, cin_per_group, k, name, group=1, relu=True):
        w, b = g.weight(f"{name}.w", (cout, cin_per_group, k, k)), g.weight(f"{name}.b", (cout,), 0.1)
        y = g.op("Conv", [x, w, b], name=f"{name}/conv", group=group, pads=[k // 2] * 4, kernel_shape=[k, k])
        return g.op("Relu", [y], name=f"{name}/relu") if relu else y

    x = "x"
    for i in range(blocks):
        y = conv(x, width, c, 1, f"b{i}.a")
        y = conv(y, width, width // groups, 3, f"b{i}.b", group=groups)
        y = conv(y, c, width, 1, f"b{i}.c", relu=False)
        x = g.op("Relu", [g.op("Add", [y, x], name=f"b{i}/add")], name=f"b{i}/out")
    g.nodes[-1].output[0] = "y"
    return g.model(
        "resnext_blocks",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, hw, hw])],
    )


def make_cuda_edges(c=16, hw=32) -> onnx.ModelProto:
    g = GraphBuilder(6)
    w, b = g.weight("stem.w", (c, 3, 3, 3)), g.weight("stem.b", (c,), 0.1)
    y = g.op("Relu", [g.op("Conv", ["x", w, b], name="stem/conv", pads=[1] * 4, kernel_shape=[3, 3])], name="stem/relu")
    y = g.op("Pad", [y, g.const("stem.pads", np.array([0, 0, 0, 0, 0, 0, 1, 1], np.int64))], name="stem/pad")
    w2, b2 = g.weight("stem2.w", (c, c, 2, 2)), g.weight("stem2.b", (c,), 0.1)
    y = g.op("Conv", [y, w2, b2], name="stem2/conv", kernel_shape=[2, 2])  # hw x hw again
    w3, b3 = g.weight("swish.w", (c, c, 3, 3)), g.weight("swish.b", (c,), 0.1)
    z = g.op("Conv", [y, w3, b3], name="swish/conv", pads=[1] * 4, kernel_shape=[3, 3])
    z = g.op("Mul", [z, g.op("Sigmoid", [z], name="swish/sigmoid")], name="swish/mul")
    g.op("Add", [z, y], name="residual")
    g.nodes[-1].output[0] = "y"
    return g.model(
        "cuda_edges",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, hw, hw])],
    )


def make_subnormal_conv(cin=768, cout=384, hw=10, share=0.24) -> onnx.ModelProto:
    g = GraphBuilder(7)
    w = (g.rng.standard_normal((cout, cin, 1, 1)) / np.sqrt(cin)).astype(np.float32)
    tiny = g.rng.random(w.shape) < share
    w[tiny] = (g.rng.standard_normal(int(tiny.sum())) * 1e-39).astype(np.float32)  # subnormal in fp32
    g.inits.append(numpy_helper.from_array(w, "conv.w"))
    y = g.op("Conv", ["x", "conv.w", g.weight("conv.b", (cout,), 0.1)], name="conv", kernel_shape=[1, 1])
    g.op("Relu", [y], name="relu")
    g.nodes[-1].output[0] = "y"
    return g.model(
        "subnormal_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, hw, hw])],
    )


def make_line_reader(c=16, h=16, classes=12) -> onnx.ModelProto:
    """A text-line recognizer in miniature: any width ("width"), convs, a max-pool, and a classifier per column
    (the CRNN shape of PP-OCR's recognizer, whose crops are 48 high and 30 to 2,000 wide)."""
    g = GraphBuilder(6)
    y = conv_bn(g, "image", 3, c, "stem")
    y = g.op("MaxPool", [y], name="pool", kernel_shape=[2, 2], strides=[2, 2])
    y = conv_bn(g, y, c, 2 * c, "block1", act="relu6")
    y = g.op("ReduceMean", [y], name="collapse_height", axes=[2], keepdims=0)  # (1, 2c, width / 2)
    y = g.op("Transpose", [y], name="columns", perm=[0, 2, 1])
    y = g.op("MatMul", [y, g.weight("head.w", (2 * c, classes))], name="head/matmul")
    y = g.op("Add", [y, g.weight("head.b", (classes,), 0.1)], name="head/bias")
    g.op("Softmax", [y], name="head/softmax", axis=-1)
    g.nodes[-1].output[0] = "probs"
    return g.model(
        "line_reader",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, h, "width"])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, "columns", classes])],
    )


def make_seq_encoder(d=32, vocab=500, ffn=64) -> onnx.ModelProto:
    """A one-head encoder layer over any number of tokens ("tokens"): embedding, attention with a mask, softmax
    over the tokens, layer norm, a GELU feed-forward; the sentence-encoder shape without fixed reshapes."""
    g = GraphBuilder(7)
    x = g.op("Gather", [g.weight("word_embeddings", (vocab, d), 0.5), "input_ids"], name="embeddings/word")
    q, k, v = (g.op("MatMul", [x, g.weight(f"{n}.w", (d, d))], name=f"attn/{n}") for n in "qkv")
    s = g.op("MatMul", [q, g.op("Transpose", [k], name="attn/k_t", perm=[0, 2, 1])], name="attn/scores")
    s = g.op("Mul", [s, g.const("attn.scale", np.float32(1 / np.sqrt(d)))], name="attn/scale")
    m = g.op("Cast", [g.op("Unsqueeze", ["attention_mask", g.const("axis1", np.array([1], np.int64))],
                           name="mask/unsqueeze")], name="mask/cast", to=TensorProto.FLOAT)  # fmt: skip
    bias = g.op("Mul", [g.op("Sub", [g.const("one_f", np.float32(1)), m], name="mask/invert"),
                        g.const("neg", np.float32(-1e4))], name="mask/bias")  # fmt: skip
    p = g.op("Softmax", [g.op("Add", [s, bias], name="attn/mask")], name="attn/softmax", axis=-1)
    o = g.op("MatMul", [p, v], name="attn/context")
    h = layer_norm(g, g.op("Add", [x, o], name="attn/residual"), d, "ln1")
    f = g.op("MatMul", [h, g.weight("ffn1.w", (d, ffn))], name="ffn/fc1")
    f = g.op("Relu", [f], name="ffn/relu")
    f = g.op("MatMul", [f, g.weight("ffn2.w", (ffn, d))], name="ffn/fc2")
    layer_norm(g, g.op("Add", [h, f], name="ffn/residual"), d, "ln2")
    g.nodes[-1].output[0] = "hidden"
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, "tokens"])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, "tokens"])
    hidden = helper.make_tensor_value_info("hidden", TensorProto.FLOAT, [1, "tokens", d])
    return g.model("seq_encoder", [ids, mask], [hidden])


def make_crnn_lstm(h=32, w=320, hidden=256, classes=97) -> onnx.ModelProto:
    """Conv stack -> [seq=w/4, 1, 256] -> BiLSTM x2 (hidden 256) -> per-column classifier."""
    g = GraphBuilder(8)
    y, c = "image", 1
    for i, (cout, pool) in enumerate([(64, (2, 2)), (128, (2, 2)), (256, (2, 1)), (256, (2, 1)), (256, (2, 1))]):
        y = conv_bn(g, y, c, cout, f"conv{i}")
        y = g.op("MaxPool", [y], name=f"pool{i}", kernel_shape=list(pool), strides=list(pool))
        c = cout
    seq = w // 4  # height 32 -> 1 after five halvings; width 320 -> 80 after two
    y = g.op("Squeeze", [y, g.const("height_axis", np.array([2], np.int64))], name="collapse_height")
    y = g.op("Transpose", [y], name="time_major", perm=[2, 0, 1])  # [seq, 1, 256]
    for layer in range(2):
        cin = c if layer == 0 else 2 * hidden
        weights = [
            g.weight(f"lstm{layer}.W", (2, 4 * hidden, cin)),
            g.weight(f"lstm{layer}.R", (2, 4 * hidden, hidden)),
        ]
        lstm_in = [y, *weights, g.weight(f"lstm{layer}.B", (2, 8 * hidden), 0.1)]
        y = g.op("LSTM", lstm_in, name=f"lstm{layer}", hidden_size=hidden, direction="bidirectional")
        y = g.op("Transpose", [y], name=f"lstm{layer}/dirs_last", perm=[0, 2, 1, 3])  # [seq, 1, 2, H]
        y = g.op(
            "Reshape",
            [y, g.const(f"lstm{layer}.merge", np.array([seq, 1, 2 * hidden], np.int64))],
            name=f"lstm{layer}/merge_dirs",
        )
    y = g.op("MatMul", [y, g.weight("head.w", (2 * hidden, classes))], name="head/matmul")
    y = g.op("Add", [y, g.weight("head.b", (classes,), 0.1)], name="head/bias")
    g.op("Softmax", [y], name="head/softmax", axis=-1)
    g.nodes[-1].output[0] = "probs"
    return g.model(
        "crnn_lstm",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 1, h, w])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [seq, 1, classes])],
    )


MODELS = {
    "crnn_lstm": make_crnn_lstm,
    "line_reader": make_line_reader,
    "seq_encoder": make_seq_encoder,
    "cnn": make_cnn,
    "transformer": make_transformer,
    "mlp": make_mlp,
    "bert_ids": make_bert_ids,
    "cuda_edges": make_cuda_edges,
    "subnormal_conv": make_subnormal_conv,
    "mobilenet_block": make_mobilenet_block,
    "resnext_blocks": make_resnext_blocks,
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--out-dir", default=os.path.join(os.path.dirname(__file__), "..", "models"))
    ap.add_argument("names", nargs="*", default=list(MODELS))
    args = ap.parse_args(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    for name in args.names:
        path = os.path.join(args.out_dir, f"{name}.onnx")
        onnx.save(MODELS[name](), path)
        print(f"wrote {os.path.normpath(path)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
