"""Index ops that cannot read outside their tensor: the ClampIndices pass before/after, and the package boundary."""

import tvm
from tvm.script import relax as R

from tuner.transform.safe_indexing import ClampIndices


def test_fast_takes_become_clipped_takes():
    @tvm.script.ir_module
    class Before:
        @R.function
        def main(table: R.Tensor((10, 4), "float32"), ids: R.Tensor((3,), "int64")):
            with R.dataflow():
                rows = R.take(table, ids, axis=0)
                wrapped = R.take(table, ids, axis=0, mode="wrap")
                y = R.add(rows, wrapped)
                R.output(y)
            return y

    @tvm.script.ir_module
    class Expected:
        @R.function
        def main(table: R.Tensor((10, 4), "float32"), ids: R.Tensor((3,), "int64")):
            with R.dataflow():
                rows = R.take(table, ids, axis=0, mode="clip")
                wrapped = R.take(table, ids, axis=0, mode="wrap")  # a mode that is safe already stays
                y = R.add(rows, wrapped)
                R.output(y)
            return y

    tvm.ir.assert_structural_equal(ClampIndices()(Before), Expected)


def test_a_module_without_takes_is_left_as_it_is():
    @tvm.script.ir_module
    class Plain:
        @R.function
        def main(x: R.Tensor((3,), "float32")):
            with R.dataflow():
                y = R.add(x, x)
                R.output(y)
            return y

    tvm.ir.assert_structural_equal(ClampIndices()(Plain), Plain)


def _gathers_model():
    """ids -> Cast -> Gather(table of 50 rows); ids -> Unsqueeze -> Gather(axis 1 of a 3x7 table);
    types -> Gather(2 rows); mask feeds no index."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.zeros((50, 4), np.float32), "table"),
             numpy_helper.from_array(np.zeros((3, 7), np.float32), "wide"),
             numpy_helper.from_array(np.zeros((2, 4), np.float32), "types_table"),
             numpy_helper.from_array(np.array([0], np.int64), "axes")]  # fmt: skip
    nodes = [
        helper.make_node("Cast", ["ids"], ["ids32"], to=TensorProto.INT32),
        helper.make_node("Gather", ["table", "ids32"], ["a"], name="word"),
        helper.make_node("Unsqueeze", ["ids", "axes"], ["ids2"]),
        helper.make_node("Gather", ["wide", "ids2"], ["b"], name="narrow", axis=1),
        helper.make_node("Gather", ["types_table", "types"], ["c"], name="type"),
        helper.make_node("Cast", ["mask"], ["m"], to=TensorProto.FLOAT),
    ]
    ints = [helper.make_tensor_value_info(n, TensorProto.INT64, [1, 5]) for n in ("ids", "types", "mask")]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("a", "b", "c", "m")]
    model = helper.make_model(helper.make_graph(nodes, "g", ints, outs, inits))
    return onnx.shape_inference.infer_shapes(model)


def test_an_index_input_takes_the_tightest_range_of_the_tables_it_reaches():
    from tuner.frontend.index_ranges import index_ranges

    ranges = index_ranges(_gathers_model())
    assert set(ranges) == {"ids", "types"}  # the mask indexes nothing
    assert (ranges["ids"].lo, ranges["ids"].hi) == (-7, 6) and "'narrow' axis 1 (7 rows)" in ranges["ids"].why
    assert (ranges["types"].lo, ranges["types"].hi) == (-2, 1)


def test_generated_inputs_stay_inside_the_range_and_masks_attend_everywhere():
    from tuner.runtime.inputs import make_inputs

    specs = [{"name": "token_type_ids", "shape": [4, 64], "dtype": "int64", "range": [-2, 1]},
             {"name": "input_ids", "shape": [4, 64], "dtype": "int64", "range": [-30522, 30521]},
             {"name": "attention_mask", "shape": [4, 64], "dtype": "int64"}]  # fmt: skip
    feed = make_inputs(specs)
    assert feed["token_type_ids"].min() >= 0 and feed["token_type_ids"].max() == 1
    assert 0 <= feed["input_ids"].min() and feed["input_ids"].max() < 100
    assert (feed["attention_mask"] == 1).all()


def test_subnormal_weights_are_flushed_counted_and_said(models_dir):
    """24% of the conv's weights are subnormal: all set to zero, counted per tensor, said in the preparation notes;
    normal weights untouched."""
    import numpy as np
    from onnx import numpy_helper

    from tuner.frontend.onnx_model import prepare_model

    path = str(models_dir / "subnormal_conv.onnx")
    kept = prepare_model(path, flush_subnormals=False)
    p = prepare_model(path)
    before = numpy_helper.to_array(next(t for t in kept.model.graph.initializer if t.name == "conv.w"))
    after = numpy_helper.to_array(next(t for t in p.model.graph.initializer if t.name == "conv.w"))
    tiny = (before != 0) & (np.abs(before) < np.finfo(np.float32).tiny)
    assert p.subnormal_weights == {"conv.w": int(tiny.sum())} and 0.2 < tiny.mean() < 0.3
    assert (after[tiny] == 0).all() and np.array_equal(after[~tiny], before[~tiny])
    assert any(f"{int(tiny.sum()):,} subnormal weights set to zero in 1 tensors" in n for n in p.notes)
    assert kept.subnormal_weights == {}
