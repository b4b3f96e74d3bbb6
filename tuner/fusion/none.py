"""`none`: every operator is its own kernel. The baseline that `compare` measures fusion against."""

from . import FusionStrategy, register

STRATEGY = register(FusionStrategy(name="none", description="no fusion: one kernel per operator", fuses=False))
