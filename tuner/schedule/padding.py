"""Padding read in place by the convolutions that reduce over no channel (depthwise, one channel per group).

TOPI pads a conv's input in a block of its own (`pad_temp`: an `if_then_else` per element), and MetaSchedule's
llvm AutoInline keeps it there (`disallow_if_then_else`): a pass that writes the whole padded input out before
the conv reads it back. A depthwise conv does only KH x KW multiply-adds per input element, so that pass costs
about what the conv does: MobileNetV2's stride-2 depthwise conv on 112x112x96, default schedule timed alone,
0.28 ms with the pass, 0.11 with the padding inlined (a select on each load). Where the padded channel is the
output channel, each vector of the inner loop loads one contiguous row segment and the select's condition is one
pixel's: it costs a compare per vector. A conv that reduces over its input channels keeps the pass: it reads each
padded element once per output-channel tile, and inlining slowed two of light ResNet-50's four 3x3 conv kernels by
~40% (1.60 -> 2.24 ms timed alone), the other two within 2%; the stems, whose 3 input channels are a reduction too,
keep it as well, and so does an operand read again for each value of an output axis its indices lack (a matmul's
column operand padded by `padded_blocks`: inlined, its select ran in the innermost loop once per row block).
"""

from __future__ import annotations

import contextlib

from tuner.schedule.block_facts import reduces


def inline_channelwise_padding(sch) -> list[str]:
    """Inline every padding block whose only consumer is a tiled reduction that reads the padded innermost axis at
    a spatial iterator alone (no reduction iterator of extent > 1 in that index). Returns the inlined blocks'
    names; `sch` is changed in place."""
    inlined = []
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        node = sch.get(block)
        if not _is_padding(node):
            continue
        consumers = sch.get_consumers(block)
        if len(consumers) != 1 or not _reads_channelwise(sch.get(consumers[0]), node.writes[0].source):
            continue
        with contextlib.suppress(Exception):  # a consumer the primitive cannot take keeps the pass
            sch.compute_inline(block)
            inlined.append(node.name_hint)
    return inlined


def _is_padding(block) -> bool:
    """A spatial block that stores an if_then_else of one load and a constant (TOPI's pad)."""
    from tvm import ir, tirx

    if reduces(block) or len(block.writes) != 1 or len(block.reads) != 1:
        return False
    body = block.body
    if not isinstance(body, tirx.BufferStore) or not isinstance(body.value, ir.Call):
        return False
    return body.value.op.name.endswith("if_then_else")


def _reads_channelwise(consumer, padded) -> bool:
    """Does the tiled reduction `consumer` read `padded`'s innermost axis without reducing over it?"""
    import tvm.tirx.analysis as tirx_analysis

    if "meta_schedule.tiling_structure" not in consumer.annotations:
        return False
    reduced = [it.var for it in consumer.iter_vars if it.iter_type != 0 and int(it.dom.extent) > 1]
    spatial = [it.var for it in consumer.iter_vars if it.iter_type == 0]
    for region in consumer.reads:
        if not region.source.same_as(padded):
            continue
        used = list(tirx_analysis.undefined_vars(region.region[-1].min, []))
        indexed = [v for r in region.region for v in tirx_analysis.undefined_vars(r.min, [])]
        reused = [it.var for it in consumer.iter_vars if it.iter_type == 0 and int(it.dom.extent) > 1]
        if not all(_any_same([v], indexed) for v in reused):
            return False  # read again along an output axis its indices lack (a matmul's columns): keep the pass
        return _any_same(used, spatial) and not _any_same(used, reduced)
    return False


def _any_same(a, b) -> bool:
    return any(x.same_as(y) for x in a for y in b)
