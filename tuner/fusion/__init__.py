"""Fusion strategies: how operators are grouped into kernels.

Each strategy is a class in its own module, registered under a short name; `get_strategy("tvm")` returns a new
instance (each keeps its own decision log, so strategies in one process never see each other's notes). Names
compose with `+` (e.g. `horizontal+tvm`): graph passes run left to right, then the shared kernel passes.
"""

from __future__ import annotations

from tuner.core.errors import TunerError
from tuner.fusion import cost, horizontal, none, patterns, tvm_default  # noqa: F401  (registers them, in listing order)
from tuner.fusion.base import _REGISTRY, Composite, FuseOpsGrouping, FusionStrategy, register


def known_strategies() -> list[str]:
    return list(_REGISTRY)


def get_strategy(name) -> FusionStrategy:
    """A new instance of a registered strategy, or a `+`-composition of several; an instance is returned as is."""
    if isinstance(name, FusionStrategy):
        return name
    parts = [p.strip() for p in (name or "").split("+") if p.strip()]
    unknown = [p for p in parts if p not in _REGISTRY]
    if not parts or unknown:
        raise TunerError(
            f"unknown fusion strategy {name!r}",
            f"known strategies: {', '.join(_REGISTRY)} (compose with '+', e.g. horizontal+tvm)",
        )
    if len(parts) == 1:
        return _REGISTRY[parts[0]]()
    if "none" in parts:
        raise TunerError(f"fusion strategy {name!r}: 'none' cannot be combined with other strategies")
    return Composite([_REGISTRY[p]() for p in parts])


__all__ = ["Composite", "FuseOpsGrouping", "FusionStrategy", "get_strategy", "known_strategies", "register"]
