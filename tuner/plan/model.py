"""The fusion plan's data model: kernels (groups of ONNX nodes), their members, and the boundaries between them."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Member:
    var: str
    primfunc: str
    pattern: str
    onnx_node: str | None
    onnx_op: str | None
    out_bytes: int
    flops: float
    # further ONNX nodes this one op stands for: the branches of a horizontal merge (CombineParallelMatmul), or
    # an op a pass folded into it (FuseTransposeMatmul's transpose)
    merged: list = field(default_factory=list)  # [(node name, op type)]


@dataclass
class Group:
    name: str  # the kernel (PrimFunc after FuseTIR)
    var: str  # binding in main
    members: list[Member]
    inputs: list[str]  # producer vars in main (kernel outputs or graph inputs)
    input_bytes: int
    output_bytes: int
    weight_bytes: int
    launched: bool = True  # False: a reshape the VM runs as a view, no kernel

    @property
    def intermediate_bytes(self) -> int:
        """Bytes of member outputs that stay inside the kernel (no global-memory round trip)."""
        return sum(m.out_bytes for m in self.members[:-1])

    @property
    def flops(self) -> float:
        return sum(m.flops for m in self.members)

    @property
    def onnx_nodes(self) -> list[str]:
        seen = []
        for m in self.members:
            for node in [m.onnx_node] + [n for n, _ in m.merged]:
                if node and node not in seen:
                    seen.append(node)
        return seen

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "launched": self.launched,
            "onnx_nodes": self.onnx_nodes,
            "onnx_ops": sorted({op for m in self.members for op in [m.onnx_op] + [o for _, o in m.merged] if op}),
            "ops": [m.primfunc for m in self.members],
            "patterns": [m.pattern for m in self.members],
            "input_bytes": self.input_bytes,
            "output_bytes": self.output_bytes,
            "weight_bytes": self.weight_bytes,
            "intermediate_bytes_saved": self.intermediate_bytes,
            "flops": self.flops,
        }


@dataclass
class Boundary:
    producer: str
    consumer: str
    tensor_bytes: int
    reason: str

    def to_json(self):
        return {"producer": self.producer, "consumer": self.consumer, "bytes": self.tensor_bytes, "reason": self.reason}


@dataclass
class FusionPlan:
    model: str
    strategy: str
    target: str
    groups: list[Group]
    boundaries: list[Boundary]
    unfused_kernels: int
    notes: list[str] = field(default_factory=list)
    precision: str = "float32"

    @property
    def kernels(self) -> int:
        return sum(g.launched for g in self.groups)

    def summary(self) -> dict:
        saved = sum(g.intermediate_bytes for g in self.groups)
        return {
            "kernels_before": self.unfused_kernels,
            "kernels_after": self.kernels,
            "launches_saved": self.unfused_kernels - self.kernels,
            "intermediate_bytes_saved": saved,
            # each saved intermediate was written once and read once unfused
            "global_traffic_saved_bytes": 2 * saved,
        }

    def to_json(self) -> dict:
        return {
            "model": self.model,
            "strategy": self.strategy,
            "target": self.target,
            "precision": self.precision,
            "summary": self.summary(),
            "kernels": self.kernels,
            "groups": [g.to_json() for g in self.groups],
            "boundaries": [b.to_json() for b in self.boundaries],
            "notes": self.notes,
        }
