"""The lowering pipeline from an imported Relax module to fused TIR kernels, and kernel accounting.

    GraphAlgebra (BN folding, Sum -> add) -> (CPU) ConvertConvLayout (+ transpose sinking) -> PadConvChannels
    -> (NHWC) GroupConvsByGroup -> FlattenPointwiseConvs -> DecomposeOpsForInference -> CanonicalizeBindings
    -> (CPU) PadAttentionKeys -> [strategy graph passes]
    -> (CPU) FastMath -> LegalizeOps (3x3 NHWC convs: Winograd where it pays)
    -> AnnotateTIROpPattern -> FoldConstant (also the Winograd weight transforms)
    -> [strategy kernel passes] -> FuseTIR
    -> (CPU) AttachAttrLayoutFreeBuffers -> AnchorWeightsOnly      (after scheduling: pack_weights)

Decomposing batch-norm first is what lets Conv+BN+ReLU become one kernel. With `none`, the pipeline stops
before grouping, so each operator is its own kernel.
"""

from __future__ import annotations

from tuner.core.ir import is_scheduled, region_buffer_name
from tuner.core.target import vector_lanes
from tuner.fusion import FusionStrategy
from tuner.legalize.conv_maps import legalize_map
from tuner.legalize.fast_math import FastMath
from tuner.legalize.grouped_conv import GroupConvsByGroup
from tuner.transform.algebra import GraphAlgebra
from tuner.transform.channel_padding import PadConvChannels
from tuner.transform.layout import ConvertConvLayout, resolve_layout
from tuner.transform.padded_attention import PadAttentionKeys, attention_note, padded_attentions
from tuner.transform.pointwise_matmul import FlattenPointwiseConvs, flattened_maps, flattening_note
from tuner.transform.safe_indexing import ClampIndices


def lower(
    mod,
    target_spec,
    strategy: FusionStrategy,
    fuse_tir: bool = True,
    params: dict | None = None,
    algebra: bool = True,
    fast_math: bool = True,
    layout: str = "auto",
    sink_transposes: bool = True,
    pad_channels: bool = True,
    winograd: bool = True,
    flatten_pointwise: bool = True,
    pad_attention: bool = True,
):
    """Lower and group; with fuse_tir=False, groups stay Relax functions (for the fusion plan). `algebra=False`,
    `fast_math=False`, `sink_transposes=False`, `pad_channels=False`, `winograd=False`, `flatten_pointwise=False`
    and `pad_attention=False` skip those levers (for their ablation in scripts/bench_levers.py)."""
    import tvm
    from tvm import relax

    if params and not strategy.needs_params:  # weights kept as parameters are constants to everyone else
        mod = relax.transform.BindParams("main", params)(mod)
        params = None
    target = target_spec.tvm_target()
    passes = [GraphAlgebra()] if algebra else []
    layout = resolve_layout(layout, target_spec)
    if layout != "nchw":
        passes += [ConvertConvLayout(layout, vector_lanes(target_spec), sink=sink_transposes)]
    if pad_channels and not target_spec.is_gpu:  # channels-last convs and matmuls vectorise their output channels
        passes += [PadConvChannels(vector_lanes(target_spec))]
    if layout != "nchw":
        # grouped NHWC convs: the group an axis of the kernel's result, its channels padded as the convs' are
        passes += [GroupConvsByGroup(vector_lanes(target_spec) if pad_channels else None)]
        if flatten_pointwise and not target_spec.is_gpu:  # 1x1 convs on 13 x 13 maps: matmuls over 169 pixels
            passes += [FlattenPointwiseConvs(vector_lanes(target_spec))]
    passes += [relax.transform.DecomposeOpsForInference(), relax.transform.CanonicalizeBindings()]
    if pad_attention and not target_spec.is_gpu:  # 197 keys: softmax rows in whole vectors
        passes += [PadAttentionKeys(vector_lanes(target_spec))]
    passes += strategy.graph_passes(target, params)
    if fast_math and not target_spec.is_gpu:  # CUDA has fast intrinsics for these already
        passes += [FastMath()]
    passes += [
        ClampIndices(),  # no index a user controls may read outside its table
        relax.transform.LegalizeOps(legalize_map(winograd)),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
    ]
    passes += strategy.kernel_passes(target)
    if fuse_tir and strategy.fuses:
        passes += [relax.transform.FuseTIR()]
    passes += [relax.transform.DeadCodeElimination()]
    if fuse_tir and not target_spec.is_gpu:
        # weights (constants) are layout-free: a tuned schedule may pack them (MetaSchedule's RewriteLayout), and
        # `pack_weights` folds the packing into the constants at build time
        passes += [relax.transform.AttachAttrLayoutFreeBuffers(), AnchorWeightsOnly()]
    with target, tvm.transform.PassContext(opt_level=3):
        return tvm.transform.Sequential(passes)(mod)


def pack_weights(mod, target_spec):
    """After tuned schedules are applied: split each kernel's weight-layout rewrite into its own function and fold
    it into the constants, so packed weights are computed once at build time, not per inference. Modules with
    nothing to pack are returned as they are (SplitLayoutRewritePreproc also fails on some of them, e.g. a
    strided Slice kernel, in TVM 0.27)."""
    import tvm
    from tvm import relax

    if not any(
        isinstance(f, tvm.tirx.PrimFunc) and f.attrs is not None and list(f.attrs.get("layout_free_buffers", []))
        for f in mod.functions.values()
    ):
        return mod
    seq = tvm.transform.Sequential(
        [
            relax.transform.SplitLayoutRewritePreproc(),
            relax.transform.FoldConstant(),
            relax.transform.DeadCodeElimination(),  # the folded weight transforms
        ]
    )
    mod, hand_written = _stand_ins_for_hand_kernels(mod)
    with target_spec.tvm_target(), tvm.transform.PassContext(opt_level=3):
        mod = seq(mod)
    for name, func in hand_written.items():
        mod[mod.get_global_var(name)] = func
    return mod


def _stand_ins_for_hand_kernels(mod):
    """(module, {name: kernel}): hand-written kernels without a root block (the recurrent sequences) replaced by
    stand-ins of the same signature that have one, as SplitLayoutRewritePreproc requires of every PrimFunc."""
    import tvm

    hand = {
        gv.name_hint: f
        for gv, f in mod.functions.items()
        if isinstance(f, tvm.tirx.PrimFunc) and is_scheduled(f) and not isinstance(f.body, tvm.s_tir.SBlockRealize)
    }
    if not hand:
        return mod, {}
    out = mod.clone()
    for name, f in hand.items():
        out[out.get_global_var(name)] = _stand_in(f)
    return out, hand


def _stand_in(func):
    """A PrimFunc with func's parameters whose body is one block writing zeros into the last one."""
    import tvm
    from tvm import te

    *inputs, (shape, dtype) = [(p.ty.shape, p.ty.dtype) for p in func.params]
    tensors = [te.placeholder(s, d) for s, d in inputs]
    zeros = te.compute(shape, lambda *i: tvm.tirx.const(0, dtype), name="stand_in")
    return te.create_prim_func(tensors + [zeros]).with_attrs(dict(func.attrs))


def import_model(prepared, keep_params: bool = False, target_spec=None):
    """The ONNX import with the model's precision applied: (mod, params or None, provenance). With keep_params the
    weights come back as parameters of main (a strategy that reads them binds them again). For a CPU
    `target_spec`, recurrent ops become one sequence kernel each (tuner/frontend/converters/recurrent_sequence.py)."""
    from tvm import relax

    from tuner.frontend.importer import import_to_relax
    from tuner.transform.precision import apply_precision

    # (float16 stays unrolled: TVM's mixed-precision pass cannot retype a hand-written kernel's call)
    cpu = target_spec is not None and not target_spec.is_gpu and prepared.precision == "float32"
    mod, prov = import_to_relax(prepared, keep_params, sequence_lanes=vector_lanes(target_spec) if cpu else None)
    mod = apply_precision(mod, prepared.precision, prepared.path)
    params = None
    if keep_params:
        mod, params = relax.frontend.detach_params(mod)
    return mod, params, prov


def import_for(prepared, strategy: FusionStrategy, target_spec=None):
    """Import for a strategy: (mod, params keyed by their Relax Var or None, provenance).

    Keyed by Var, not by name: imported weights can share a name (light_bvlc_alexnet has two "OC2_DUMMY_1"),
    and BindParams refuses an ambiguous name. The passes before the bind keep parameter Vars as they are."""
    mod, params, prov = import_model(prepared, keep_params=strategy.needs_params, target_spec=target_spec)
    if params:
        main = mod["main"]
        params = dict(zip(main.params[int(main.attrs["num_input"]) :], params["main"]))
    return mod, params or None, prov


def AnchorWeightsOnly():  # noqa: N802  (a pass, named as TVM names its passes)
    """The pass form of `anchor_weights_only`."""
    import tvm

    return tvm.transform.module_pass(lambda mod, ctx: anchor_weights_only(mod), opt_level=0, name="AnchorWeightsOnly")


def anchor_weights_only(mod):
    """Keep weight packing to the buffers a reduction (the conv or matmul itself) reads. AttachAttrLayoutFreeBuffers
    marks every constant argument, epilogue biases included; MetaSchedule's RewriteLayout then repacks a bias read
    by the fused epilogue, and the result is wrong (PP-OCRv4 det: max abs error 1.0 against ONNX Runtime)."""
    import tvm
    from tvm.s_tir import Schedule

    out = mod
    for gv, func in mod.functions.items():
        if not isinstance(func, tvm.tirx.PrimFunc) or not func.attrs or "layout_free_buffers" not in func.attrs:
            continue
        if is_scheduled(func):  # (after lower: a hand-written kernel, a recurrent sequence) nothing to repack
            out = out.clone() if out is mod else out
            out[gv] = func.without_attr("layout_free_buffers")
            continue
        read_by_reduction = set()
        try:
            sch = Schedule(func)
            for block_rv in sch.get_child_blocks(sch.get_sblock("root")):
                block = sch.get(block_rv)
                if any(int(iv.iter_type) == 2 for iv in block.iter_vars):  # CommReduce
                    read_by_reduction |= {region_buffer_name(region) for region in block.reads}
        except Exception:  # no schedulable blocks to read (an opaque kernel): pack nothing
            read_by_reduction = set()
        names = [p.name for p in func.params]
        keep = [int(i) for i in func.attrs["layout_free_buffers"] if names[int(i)] in read_by_reduction]
        if len(keep) != len(func.attrs["layout_free_buffers"]):
            out = out.clone() if out is mod else out
            out[gv] = func.with_attr("layout_free_buffers", keep)
    return out


def rewrite_notes(mod) -> list[str]:
    """What the graph rewrites that change a model's shapes inside it did, one line each (compile output, manifest,
    plan)."""
    notes = []
    if maps := flattened_maps(mod):
        notes.append(flattening_note(maps))
    if keys := padded_attentions(mod):
        notes.append(attention_note(keys))
    return notes
