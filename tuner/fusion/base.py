"""The strategy interface and the registry of strategy classes."""

from __future__ import annotations

from tuner.core.errors import TunerError


class FusionStrategy:
    """How operators are grouped into kernels. One instance per lowering: it keeps its own decision log.

    A strategy contributes passes at two points of the lowering pipeline:
    - `graph_passes(target, params)`: on the high-level Relax graph (before LegalizeOps), where patterns and
      horizontal merges see operators such as `relax.nn.conv2d`; `params` holds the weights when the strategy
      asked for them as parameters (`needs_params`), and the strategy binds them back;
    - `kernel_passes(target)`: on the legalised graph (after AnnotateTIROpPattern), where FuseOps-style grouping
      runs. Strategies that name the same `grouping` share it when composed.
    """

    name = ""
    description = ""
    fuses = True  # False: every operator stays its own kernel
    needs_params = False  # import weights as parameters (bound back after graph passes)
    grouping: str | None = None  # the kernel-level grouping the strategy relies on (e.g. "FuseOps")

    def __init__(self):
        # (candidate, binding name, why) for every fusion considered in the last lowering with this instance
        self.log: list[tuple[str, str, str]] = []

    def graph_passes(self, target, params) -> list:
        return []

    def kernel_passes(self, target) -> list:
        return []

    def decisions(self) -> list[tuple[str, str, str]]:
        """(candidate, binding, why) for every fusion this instance considered and refused."""
        return list(self.log)


class FuseOpsGrouping(FusionStrategy):
    """Leftover operators are grouped by TVM's FuseOps (FuseTIR is added by the lowering pipeline)."""

    grouping = "FuseOps"

    def kernel_passes(self, target) -> list:
        from tvm import relax

        return [relax.transform.FuseOps()]


class Composite(FusionStrategy):
    """Strategies run left to right at the graph level, then their shared kernel-level grouping."""

    def __init__(self, parts: list[FusionStrategy]):
        super().__init__()
        self.parts = parts
        self.name = "+".join(p.name for p in parts)
        self.description = " then ".join(p.description for p in parts)
        self.needs_params = any(p.needs_params for p in parts)
        groupers = {p.grouping: p for p in parts if p.grouping}
        if len(groupers) > 1:
            names = " and ".join(p.name for p in groupers.values())
            raise TunerError(f"fusion strategy {self.name!r}: {names} group kernels differently; keep one")
        self.grouper = next(iter(groupers.values()), None)

    def graph_passes(self, target, params) -> list:
        return [p for s in self.parts for p in s.graph_passes(target, params)]

    def kernel_passes(self, target) -> list:
        return self.grouper.kernel_passes(target) if self.grouper else []

    def decisions(self) -> list:
        return [d for s in self.parts for d in s.decisions()]


_REGISTRY: dict[str, type[FusionStrategy]] = {}


def register(cls: type[FusionStrategy]) -> type[FusionStrategy]:
    """Class decorator: make a strategy available under its `name`."""
    _REGISTRY[cls.name] = cls
    return cls
