"""Tuning: MetaSchedule search over fused kernels (`loop`), its knobs, design spaces, candidate builds, remote
measurement, and the tuning-record database beside it."""

from tuner.tuning.builder import TENSOR_CORE_BUILD_CONFIG, fast_build, uses_tensor_cores
from tuner.tuning.candidates import SampledTask, build_candidates, sample_candidates
from tuner.tuning.knobs import Knobs
from tuner.tuning.loop import tune
from tuner.tuning.rpc import check_rpc, parse_rpc
from tuner.tuning.spaces import design_space, half_precision, reduced_space
from tuner.tuning.state import TaskState, TuneResult

__all__ = [
    "TENSOR_CORE_BUILD_CONFIG",
    "Knobs",
    "SampledTask",
    "TaskState",
    "TuneResult",
    "build_candidates",
    "check_rpc",
    "design_space",
    "fast_build",
    "half_precision",
    "parse_rpc",
    "reduced_space",
    "sample_candidates",
    "tune",
    "uses_tensor_cores",
]
