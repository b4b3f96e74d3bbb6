"""ONNX backend node tests (onnx.backend.test) through our pipeline: check -> import -> build (llvm) -> run.

Each case ends as `pass`, `fail` (built but wrong, or the build/run broke) or `unsupported` (the frontend has
no converter, or rejected the node). The expected outputs and tolerances are the suite's own.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np


@dataclass
class CaseResult:
    name: str
    op: str
    status: str  # pass | fail | unsupported
    detail: str = ""
    pinned: int = 0  # run-time shape/axes inputs bound from the test's data, as --const would

    def to_json(self):
        return {"name": self.name, "op": self.op, "status": self.status, "detail": self.detail, "pinned": self.pinned}


def collect_cases(names: set[str] | None = None) -> list:
    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = node.collect_testcases()
    cases = [c for c in cases if c.model is not None and c.data_sets]
    if names is not None:
        cases = [c for c in cases if c.name in names]
    return cases


def case_data(case) -> tuple[list, list]:
    """(inputs, expected outputs) of the case's first data set as numpy arrays: the loader hands some dtypes
    (float16, bfloat16, float8, int4, strings) over as TensorProtos."""
    from onnx import TensorProto, numpy_helper

    def array(x):
        return numpy_helper.to_array(x) if isinstance(x, TensorProto) else x

    inputs, expected = case.data_sets[0]
    return [array(x) for x in inputs], [array(x) for x in expected]


def case_op(case) -> str:
    return case.model.graph.node[0].op_type if case.model.graph.node else "?"


def run_case(case, target: str = "llvm", fusion: str = "tvm") -> CaseResult:
    from tuner.core.errors import TunerError, UnsupportedModelError

    op = case_op(case)
    model = case.model
    for vi in model.graph.input:
        if not vi.type.HasField("tensor_type"):
            return CaseResult(case.name, op, "unsupported", "non-tensor input (sequence/optional)")
    inputs, _ = case_data(case)
    try:
        from tuner.build.executable import build_prepared
        from tuner.core.target import resolve_target
        from tuner.frontend.onnx_model import prepare_model
        from tuner.frontend.shape_inputs import static_inputs
        from tuner.fusion import get_strategy

        init_names = {t.name for t in model.graph.initializer}
        data = dict(zip((vi.name for vi in model.graph.input if vi.name not in init_names), inputs))
        # a shape, axes or pads input is pinned from the test's data, as a user would with --const
        pinned = {name: np.asarray(data[name]) for name in static_inputs(model) if name in data}
        inputs = [x for name, x in data.items() if name not in pinned]
        shapes = {name: tuple(np.asarray(x).shape) for name, x in data.items() if name not in pinned}
        prepared = prepare_model(model, shapes, pinned or None)
        result = build_prepared(prepared, resolve_target(target), get_strategy(fusion))
    except UnsupportedModelError as err:
        return CaseResult(case.name, op, "unsupported", err.message.splitlines()[0][:300])
    except TunerError as err:
        return CaseResult(case.name, op, "fail", "build: " + err.message.splitlines()[0][:300])
    except Exception as err:  # TVM internals: a failure, not a crash of the suite
        return CaseResult(case.name, op, "fail", f"build: {type(err).__name__}: {str(err).strip()[:300]}")
    outcome = _run_and_compare(case, op, result, inputs)
    outcome.pinned = len(pinned)
    return outcome


def _run_and_compare(case, op, result, inputs) -> CaseResult:
    from tuner.report.reference import compare_outputs

    model = case.model
    expected = case_data(case)[1]
    try:
        import tvm
        from tvm.runtime.vm import VirtualMachine

        vm = VirtualMachine(result.executable, tvm.cpu())
        args = [tvm.runtime.tensor(np.asarray(x, order="C")) for x in inputs]  # ascontiguousarray makes 0-d 1-d
        out = vm["main"](*args)
        flat = []

        def walk(x):
            if hasattr(x, "numpy"):
                flat.append(x.numpy())
            elif isinstance(x, (int, float, bool)):
                flat.append(np.asarray(x))
            else:
                for y in x:
                    walk(y)

        walk(out)
    except Exception as err:
        return CaseResult(case.name, op, "fail", f"run: {type(err).__name__}: {str(err).strip()[:300]}")
    names = [o.name for o in model.graph.output]
    exp = {n: np.asarray(e) for n, e in zip(names, expected)}
    got = {n: g for n, g in zip(names, flat)}
    rep = compare_outputs(got, exp, rtol=case.rtol, atol=0.0)
    # The suite's own rule: allclose(rtol, atol) elementwise.
    ok = len(flat) == len(expected) and all(
        g.shape == e.shape
        and (
            np.array_equal(g, e)
            if e.dtype.kind in "iubSUO"
            else np.allclose(g, e, rtol=case.rtol, atol=case.atol, equal_nan=True)
        )
        for g, e in zip(flat, exp.values())
    )
    return CaseResult(
        case.name, op, "pass" if ok else "fail", "" if ok else f"outputs differ (max_abs_err {rep['max_abs_err']:.3g})"
    )
