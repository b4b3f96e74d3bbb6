"""Fusion strategies: how operators are grouped into kernels.

Each strategy is a module with a `STRATEGY` object, registered under a short name; `get_strategy("tvm")`
returns it. A strategy contributes passes at two points of the lowering pipeline:

- `graph_passes(target, params)`: on the high-level Relax graph (before LegalizeOps), where patterns and
  horizontal merges see operators such as `relax.nn.conv2d`; `params` holds the weights when the strategy
  asked for them as parameters (`needs_params`), and the strategy binds them back;
- `kernel_passes`: on the legalised graph (after AnnotateTIROpPattern), where FuseOps-style grouping runs.

Names compose with `+` (e.g. `horizontal+tvm`): graph passes run left to right, then kernel passes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..errors import TunerError


@dataclass
class FusionStrategy:
    name: str
    description: str
    graph_passes: Callable[[object, dict | None], list] = field(default=lambda target, params: [])
    kernel_passes: Callable[[object], list] = field(default=lambda target: [])
    fuses: bool = True  # False: every operator stays its own kernel
    needs_params: bool = False  # import weights as parameters (bound back after graph passes)
    # (candidate, binding name, why) for every fusion the strategy considered and refused in its last lowering
    decisions: Callable[[], list] = field(default=lambda: [])


_REGISTRY: dict[str, FusionStrategy] = {}


def register(strategy: FusionStrategy) -> FusionStrategy:
    _REGISTRY[strategy.name] = strategy
    return strategy


def _load_builtin() -> None:
    # import order = listing order; importing a strategy module directly first must not hide the others
    from . import none, tvm_default, patterns, cost, horizontal  # noqa: F401


def known_strategies() -> list[str]:
    _load_builtin()
    return list(_REGISTRY)


def get_strategy(name: str) -> FusionStrategy:
    """A registered strategy, or a `+`-composition of several."""
    _load_builtin()
    parts = [p.strip() for p in (name or "").split("+") if p.strip()]
    unknown = [p for p in parts if p not in _REGISTRY]
    if not parts or unknown:
        raise TunerError(f"unknown fusion strategy {name!r}",
                         f"known strategies: {', '.join(_REGISTRY)} (compose with '+', e.g. horizontal+tvm)")
    if len(parts) == 1:
        return _REGISTRY[parts[0]]
    chosen = [_REGISTRY[p] for p in parts]
    if "none" in parts:
        raise TunerError(f"fusion strategy {name!r}: 'none' cannot be combined with other strategies")
    # kernel-level grouping can run once: strategies sharing the same grouping (FuseOps) share it
    groupers = {}
    for s in chosen:
        if s.kernel_passes(None):
            groupers.setdefault(s.kernel_passes, s.name)
    if len(groupers) > 1:
        raise TunerError(f"fusion strategy {name!r}: {' and '.join(groupers.values())} group kernels differently; "
                         "keep one")
    kernel_passes = next(iter(groupers), lambda target: [])
    return FusionStrategy(
        name="+".join(parts),
        description=" then ".join(s.description for s in chosen),
        graph_passes=lambda target, params: [p for s in chosen for p in s.graph_passes(target, params)],
        kernel_passes=kernel_passes,
        needs_params=any(s.needs_params for s in chosen),
        decisions=lambda: [d for s in chosen for d in s.decisions()],
    )
