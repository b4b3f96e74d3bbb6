"""Our ONNX converters, tried before TVM's importer: ops TVM 0.27 lacks (one module per family).

CONVERTERS[op_type](bb, inputs, attrs) -> relax.Expr (a Tuple for several outputs), or None to leave the node to
TVM's converter. attrs[OPSET] is the model's opset (where an op's meaning changed between versions).
"""

from __future__ import annotations

from tuner.frontend.converters import (
    attention,
    elementwise,
    losses,
    normalization,
    quantized,
    recurrent,
    resize,
    shapes,
    windows,
)
from tuner.frontend.converters.attrs import OPSET  # noqa: F401  (re-exported for the importer)

CONVERTERS = {
    "Range": shapes.range_,
    "LSTM": lambda bb, inputs, attrs: recurrent.convert("LSTM", bb, inputs, attrs),
    "GRU": lambda bb, inputs, attrs: recurrent.convert("GRU", bb, inputs, attrs),
    "RNN": lambda bb, inputs, attrs: recurrent.convert("RNN", bb, inputs, attrs),
    "QLinearConv": quantized.qlinear_conv,
    "QLinearMatMul": quantized.qlinear_matmul,
    "ConvInteger": quantized.conv_integer,
    "Attention": attention.attention,
    "RotaryEmbedding": attention.rotary_embedding,
    "Swish": attention.swish,
    "IsInf": elementwise.is_inf,
    "BitShift": elementwise.bit_shift,
    "Softplus": elementwise.softplus,
    "Mish": elementwise.mish,
    "Mod": elementwise.mod,
    "Pow": elementwise.pow_,
    "RMSNormalization": normalization.rms_normalization,
    "LayerNormalization": normalization.layer_normalization,
    "LpNormalization": normalization.lp_normalization,
    "ReduceMax": elementwise.reduce_extreme("max"),
    "ReduceMin": elementwise.reduce_extreme("min"),
    "NegativeLogLikelihoodLoss": losses.negative_log_likelihood_loss,
    "SoftmaxCrossEntropyLoss": losses.softmax_cross_entropy_loss,
    "Resize": resize.resize,
    "Softmax": normalization.softmax("softmax"),
    "LogSoftmax": normalization.softmax("log_softmax"),
    "Celu": elementwise.celu,
    "Elu": elementwise.elu,
    "Dropout": elementwise.dropout,
    "OneHot": elementwise.one_hot,
    "SwiGLU": elementwise.swiglu,
    "CumProd": elementwise.cumprod,
    **{kind: windows.window(kind) for kind in ("HannWindow", "HammingWindow", "BlackmanWindow")},
}
