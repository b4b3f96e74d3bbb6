"""The fusion plan: which ONNX nodes went into which kernel, what each kernel moves and computes, and why each
boundary between kernels was drawn (`provenance` matches, `reasons` explains, `render` draws)."""

from tuner.plan.model import Boundary, FusionPlan, Group, Member
from tuner.plan.provenance import build_plan
from tuner.plan.render import render_svg, to_dot

__all__ = ["Boundary", "FusionPlan", "Group", "Member", "build_plan", "render_svg", "to_dot"]
