"""check: can this ONNX model be built? Everything wrong is listed before any build starts."""

from __future__ import annotations

from dataclasses import dataclass, field

from tuner.core.errors import TunerError
from tuner.frontend.onnx_model import default_opset, graph_inputs, graph_outputs, load_onnx, op_histogram, prepare_model


@dataclass
class CheckReport:
    path: str
    opset: int
    ir_version: int
    producer: str
    ops: dict
    inputs: list
    outputs: list
    dynamic_inputs: list = field(default_factory=list)  # inputs whose dims still need --input-shape
    unsupported: list = field(default_factory=list)  # [{op, nodes, reason}]
    preparation: list = field(default_factory=list)  # what was folded or frozen
    folded: dict = field(default_factory=dict)
    problems: list = field(default_factory=list)

    @property
    def buildable(self) -> bool:
        return not self.problems and not self.unsupported and not self.dynamic_inputs

    def to_json(self) -> dict:
        return {
            "model": self.path,
            "opset": self.opset,
            "ir_version": self.ir_version,
            "producer": self.producer,
            "ops": self.ops,
            "nodes": sum(self.ops.values()),
            "inputs": [i.to_json() for i in self.inputs],
            "outputs": [o.to_json() for o in self.outputs],
            "dynamic_inputs": self.dynamic_inputs,
            "unsupported": self.unsupported,
            "preparation": self.preparation,
            "folded": self.folded,
            "problems": self.problems,
            "buildable": self.buildable,
        }


def check_model(path: str, shapes: dict | None = None, consts: dict | None = None) -> CheckReport:
    from tuner.frontend.importer import unsupported_nodes
    from tuner.frontend.trial_import import conversion_errors

    model = load_onnx(path)
    shapes = dict(shapes or {})
    report = CheckReport(
        path=path,
        opset=default_opset(model),
        ir_version=model.ir_version,
        producer=f"{model.producer_name} {model.producer_version}".strip(),
        ops=op_histogram(model),
        inputs=graph_inputs(model),
        outputs=graph_outputs(model),
    )
    consts = dict(consts or {})
    names = [i.name for i in report.inputs]
    for name in list(shapes) + list(consts):
        if name not in names:
            raise TunerError(f"{path} has no input named {name!r}", f"inputs are: {', '.join(names) or '(none)'}")
    report.dynamic_inputs = [
        {"name": i.name, "shape": i.shape, "dynamic_dims": i.dynamic_dims}
        for i in report.inputs
        if (i.dynamic_dims or i.shape == [None]) and i.name not in shapes and i.name not in consts
    ]
    from tuner.frontend.if_folding import inputs_that_choose_branches

    for name, node in inputs_that_choose_branches(model).items():
        if name not in consts:
            report.problems.append(
                f"If node {node!r} branches on the value of input {name!r}: TVM imports both branches; pin it with "
                f"--const {name}=VALUE to build the branch you run"
            )
    prepared = None
    if not report.dynamic_inputs:
        try:
            prepared = prepare_model(path, shapes, consts)
        except TunerError as err:
            report.problems.append(str(err))
    # Judge ops on the prepared graph when there is one: folding can remove branches that never run.
    for op, nodes in unsupported_nodes(prepared.model if prepared else model).items():
        report.unsupported.append({"op": op, "nodes": nodes, "reason": "no converter in TVM's Relax ONNX frontend"})
    if prepared is None:
        return report
    report.preparation = prepared.notes
    report.folded = prepared.folded
    report.inputs = prepared.inputs
    if report.unsupported:
        return report  # a trial import would only repeat these
    from tuner.frontend.checks import attribute_problems

    report.unsupported += attribute_problems(prepared.model)
    if report.unsupported:
        return report
    # A trial import finds what the op table cannot: converters that reject attributes or dynamic shapes. Every
    # rejected node is listed, not only the first (the import goes on past each one).
    errors, complete = conversion_errors(prepared)
    for op, node, reason in errors:
        report.unsupported.append({"op": op, "nodes": [node], "reason": reason})
    if errors:
        from tuner.frontend.shape_inputs import static_inputs

        for name, where in static_inputs(prepared.model).items():
            report.problems.append(
                f"input {name!r} feeds {where}, which TVM's importer needs as a constant: pin it with "
                f"--const {name}=V1,V2,... (the values it always has)"
            )
    if errors and not complete:
        report.problems.append(
            f"nodes after {errors[-1][1]!r} were not tried: its output shapes are unknown, so nothing could stand in"
        )
    return report
