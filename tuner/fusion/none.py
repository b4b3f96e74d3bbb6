"""`none`: every operator is its own kernel. The baseline that `compare` measures fusion against."""

from tuner.fusion.base import FusionStrategy, register


@register
class NoFusion(FusionStrategy):
    name = "none"
    description = "no fusion: one kernel per operator"
    fuses = False
