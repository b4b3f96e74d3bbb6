"""A representative subset of the ONNX backend node tests must pass through check -> import -> build -> run.

The full suite (scripts/conformance.py) is recorded in the README; these cases passed there and cover the op
families real models use: conv/pool/norm, matmul/gemm, activations, reductions, shape ops, indexing, logic.
"""

import numpy as np
import pytest

from devtools.conformance import collect_cases, run_case

SUBSET = [
    "test_qlinearconv",
    "test_qlinearmatmul_2D_uint8_float32",
    "test_qlinearmatmul_3D_int8_float16",
    "test_convinteger_with_padding",
    "test_quantizelinear",
    "test_dequantizelinear",
    "test_rotary_embedding_interleaved",
    "test_rotary_embedding_3d_input",
    "test_rotary_embedding_with_rotary_dim",
    "test_swish",
    # our Attention converter (opset 23/24): GQA, causal, masks, KV cache, nonpad lengths, sliding window, softcap
    "test_attention_4d",
    "test_attention_3d_gqa",
    "test_attention_4d_causal",
    "test_attention_4d_attn_mask_bool",
    "test_attention_4d_with_past_and_present_qk_matmul_bias_3d_mask_causal",
    "test_attention_4d_gqa_causal_nonpad_decode",
    "test_attention_local_window",
    "test_attention_4d_softcap",
    "test_attention_4d_fp16",  # float16 scores and softmax in float32, rounded once
    "test_attention_23_boolmask_fullymasked_row_nan_robustness",  # a fully masked row is zeros
    "test_attention_24_qk_matmul_output_mode3_softmax_precision",
    # run-time axes/shape/sizes inputs, bound from the case's data as --const would (devtools.conformance)
    "test_reduce_sum_do_not_keepdims_example",
    "test_reshape_reordered_all_dims",
    "test_resize_upsample_sizes_nearest",
    "test_top_k",
    "test_split_variable_parts_1d_opset13",
    "test_edge_pad",
    # shape subgraphs folded once input shapes are bound (Shape -> Size -> Div chains)
    "test_layer_normalization_4d_axis0_expanded",
    "test_add",
    "test_add_uint32",  # uint16/32/64 inputs were refused as non-numeric
    "test_equal_uint16",
    "test_cast_FLOAT_to_FLOAT16",  # the loader hands float16 data over as TensorProtos
    "test_cast_FLOAT16_to_FLOAT",
    "test_sub_example",
    "test_mul_example",
    "test_div_example",
    "test_pow_example",
    "test_relu",
    "test_sigmoid_example",
    "test_tanh_example",
    "test_erf",
    "test_gelu_tanh_1",
    "test_hardswish",
    "test_leakyrelu_example",
    "test_elu_example",
    "test_softmax_example",
    "test_logsoftmax_example_1",
    "test_basic_conv_with_padding",
    "test_convtranspose",
    "test_averagepool_2d_precomputed_pads",
    "test_globalaveragepool",
    "test_batchnorm_example",
    "test_instancenorm_example",
    "test_lrn",
    "test_matmul_2d",
    "test_gemm_default_zero_bias",
    "test_einsum_transpose",
    "test_reduce_max_default_axes_keepdim_example",
    "test_concat_1d_axis_0",
    "test_transpose_default",
    "test_squeeze",
    "test_unsqueeze_axis_0",
    "test_flatten_axis0",
    "test_slice",
    "test_tile",
    "test_gather_0",
    "test_gather_elements_0",
    "test_scatternd",
    "test_where_example",
    "test_equal",
    "test_greater",
    "test_and2d",
    "test_clip_default_inbounds",
    "test_depthtospace_example",
    "test_dequantizelinear_axis",
    "test_triu",
    # our recurrent converters (tuner/converters/recurrent.py): every ONNX backend case of LSTM, GRU and RNN
    "test_lstm_defaults",
    "test_lstm_with_initial_bias",
    "test_lstm_with_peepholes",
    "test_lstm_batchwise",
    "test_lstm_reverse",
    "test_lstm_bidirectional",
    "test_gru_defaults",
    "test_gru_with_initial_bias",
    "test_gru_seq_length",
    "test_gru_batchwise",
    "test_gru_reverse",
    "test_gru_bidirectional",
    "test_simple_rnn_defaults",
    "test_simple_rnn_with_initial_bias",
    "test_rnn_seq_length",
    "test_simple_rnn_batchwise",
    "test_simple_rnn_reverse",
    "test_simple_rnn_bidirectional",
    # edge cases of TVM's converters that ours replace (tuner/converters/elementwise.py)
    "test_isinf_positive",
    "test_isinf_negative",
    "test_bitshift_left_int32_shift_ge_width",
    "test_bitshift_right_int32_shift_ge_width",
    "test_bitshift_left_int32_negative_shift",
    "test_mish",  # inputs down to -10: log(1 + e^x) cancels in float32 there
    "test_mish_expanded",
    "test_softplus",
    "test_mod_float_edge_cases_fmod_0_float32",  # numpy's modulo with infinities and signed zeros
    "test_pow_types_int32_int32",
    "test_pow_types_float32_int64",
    "test_pow_types_int64_float32",
    "test_rms_normalization_4d_axis0",
    "test_rms_normalization_3d_axis0_epsilon",
    "test_reduce_max_bool_inputs",
    "test_reduce_min_empty_set",
    "test_reduce_max_keepdims_example",  # the ordinary case still goes to TVM's converter
    # normalizations, losses, windows and the rest (tuner/converters/{normalization,losses,windows}.py)
    "test_layer_normalization_4d_axis0",  # Mean and InvStdDev outputs (TVM's are placeholders)
    "test_layer_normalization_3d_axis1_epsilon",
    "test_l1normalization_axis_last",
    "test_l2normalization_axis_0",  # a zero norm gives 0
    "test_nllloss_NCd1_weight_ii",
    "test_nllloss_NCd1d2d3_sum_weight_high_ii",  # an ignore index outside the classes
    "test_nllloss_NCd1_mean_weight_negative_ii",
    "test_sce_mean_weight_ii_3d_log_prob",  # both outputs
    "test_sce_NCd1d2d3d4d5_none_no_weight",
    "test_hannwindow_symmetric",  # the size pinned as --const would
    "test_blackmanwindow_expanded",  # Constant value_int/value_float forms, a size pinned through a Cast
    "test_celu",
    "test_celu_float16_expanded",  # through our Elu: TVM's makes float32 constants
    "test_swiglu_float16",
    "test_cumprod_1d_reverse_exclusive",
    "test_onehot_negative_indices",
    "test_onehot_out_of_range_indices",
    "test_constant_pad_axes",  # the pad value pinned
    "test_nonmaxsuppression_two_batches",  # box count and thresholds pinned (TVM's converter read 0 boxes)
    "test_training_dropout_zero_ratio",  # training mode that drops nothing: the identity
    # Resize as per-axis matrices from ONNX's reference (tuner/converters/resize.py) where TVM's is wrong
    "test_resize_downsample_scales_linear",  # 0.6 of 4 is not whole: TVM samples with 2/4
    "test_resize_downsample_scales_cubic_antialias",
    "test_resize_upsample_scales_linear_half_pixel_symmetric",
    "test_resize_downsample_scales_linear_align_corners",  # onto one pixel: TVM divides by zero
    "test_resize_upsample_sizes_nearest_axes_3_2",
    "test_resize_upsample_scales_nearest",
    # half precision: matmul/conv accumulate and softmax compute in float32 (tuner/precision.py, normalization.py)
    "test_attention_4d_fp16_expanded",
    "test_causal_conv_with_state_silu_fp16_expanded",
]


@pytest.fixture(scope="module")
def cases():
    found = {c.name: c for c in collect_cases(set(SUBSET))}
    missing = set(SUBSET) - set(found)
    assert not missing, f"cases not in this onnx version: {missing}"
    return found


@pytest.mark.parametrize("name", SUBSET)
def test_node_case(cases, name):
    r = run_case(cases[name])
    assert r.status == "pass", r.detail


def test_unsupported_is_reported_not_failed():
    (case,) = collect_cases({"test_col2im"})
    r = run_case(case)
    assert r.status == "unsupported" and "Col2Im" in r.detail


@pytest.mark.parametrize(
    "name, words",
    [
        # computed wrong before (float8 casts neither rounded nor saturated as ONNX says): now refused, by name
        ("test_cast_FLOAT_to_FLOAT8E4M3FN", "attribute to has element type FLOAT8E4M3FN"),
        ("test_cast_FLOAT_to_UINT4", "element type UINT4"),  # crashed TVM's runtime
        ("test_cast_INT4_to_FLOAT", "input 'input' has element type INT4"),
        ("test_batchnorm_example_training_mode", "training_mode=1"),
        ("test_training_dropout", "Dropout node 'Dropout_0': training_mode=1 with ratio 0.75 drops elements at random"),
        ("test_not_2d", "predates ONNX's numpy-style broadcasting"),
        ("test_split_to_sequence_2", "(SplitToSequence) works on a tensor sequence"),  # computed wrong before
        ("test_if_seq", "(SequenceConstruct) works on a tensor sequence"),  # inside an If branch
    ],
)
def test_what_cannot_be_built_right_is_refused_as_unsupported(name, words):
    (case,) = collect_cases({name})
    r = run_case(case)
    assert r.status == "unsupported" and words in r.detail, r.detail


def test_resize_takes_the_matrix_path_only_where_tvm_is_wrong():
    from tuner.frontend.converters.resize import axis_matrix, resize_plan

    shape = [1, 3, 4, 4]
    assert resize_plan(shape, {}, np.array([1, 1, 2, 2.0]), None) is None  # YOLO's upsampling: TVM's kernel
    assert resize_plan(shape, {"mode": b"linear"}, None, np.array([1, 3, 8, 8])) is None
    assert resize_plan(shape, {}, np.array([1, 1, 0.6, 0.6]), None) == [(2, 4, 2, 0.6), (3, 4, 2, 0.6)]
    assert resize_plan(shape, {"antialias": 1}, np.array([1, 1, 0.5, 0.5]), None) is not None
    m = axis_matrix(4, 8, 2.0, {"mode": b"linear"})  # rows are interpolation weights: they sum to 1
    assert m.shape == (8, 4) and np.allclose(m.sum(axis=1), 1)
