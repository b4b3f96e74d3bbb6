"""Where and how candidates are measured: here or on remote devices (`--rpc TRACKER_HOST:PORT:KEY`, checked before
tuning starts), and how each is timed (`--measure-cache`)."""

from __future__ import annotations

from tuner.core.errors import TunerError
from tuner.tuning.knobs import Knobs


def parse_rpc(text: str) -> tuple[str, int, str]:
    """`host:port:key` -> (host, port, key), with a clear error for anything else."""
    parts = text.rsplit(":", 2)
    if len(parts) != 3 or not parts[0] or not parts[2] or not parts[1].isdigit():
        raise TunerError(
            f"--rpc {text!r}: write TRACKER_HOST:PORT:KEY, e.g. 127.0.0.1:9190:h200",
            "the key is the one the devices' rpc_server registered with (--key)",
        )
    return parts[0], int(parts[1]), parts[2]


def check_rpc(text: str) -> int:
    """Ask the tracker how many devices serve the key; refuse before tuning when none can be reached."""
    import socket

    from tvm import rpc

    host, port, key = parse_rpc(text)
    try:
        socket.create_connection((host, port), timeout=3).close()  # TVM's own connect retries for a minute
        summary = rpc.connect_tracker(host, port).summary()
    except Exception as err:
        raise TunerError(
            f"--rpc: cannot reach the RPC tracker at {host}:{port} "
            f"({str(err).strip().splitlines()[-1][:120] if str(err).strip() else type(err).__name__})",
            "start one with `python -m tvm.exec.rpc_tracker --port PORT` and register devices with "
            "`python -m tvm.exec.rpc_server --tracker HOST:PORT --key KEY`",
        ) from None
    free = int(summary.get("queue_info", {}).get(key, {}).get("free", 0))
    servers = [s for s in summary.get("server_info", []) if str(s.get("key", "")).split(":")[-1] == key]
    if not servers and not free:
        known = sorted({str(s.get("key", "")).split(":")[-1] for s in summary.get("server_info", [])})
        raise TunerError(
            f"--rpc: no device is registered with key {key!r} at {host}:{port}",
            f"keys registered there: {', '.join(known) or 'none'}",
        )
    return max(len(servers), free)


MEASURE_CACHE = ("warm", "flush")


def evaluator_config(knobs: Knobs, gpu: bool):
    """How each candidate is timed: None for MetaSchedule's default (3 back-to-back calls, repeated until 100 ms:
    caches hot), or one call after each flush of the weights and outputs, `measure_repeats` times (CPU, `flush`)."""
    from tvm.s_tir import meta_schedule as ms

    if knobs.measure_cache not in MEASURE_CACHE:
        raise TunerError(f"measure cache {knobs.measure_cache!r}: choose one of {', '.join(MEASURE_CACHE)}")
    if gpu or knobs.measure_cache == "warm":
        return None
    return ms.runner.EvaluatorConfig(
        number=1, repeat=knobs.measure_repeats, min_repeat_ms=0, enable_cpu_cache_flush=True
    )


def runner(knobs: Knobs, gpu: bool = False):
    """Local measurement, or one RPC worker per device the tracker has for the key (each worker asks the tracker
    for a free device per measurement, so N devices measure N candidates at once). A device that dies mid-run
    fails only its in-flight measurements: MetaSchedule records them as errors, never as results."""
    from tvm.s_tir import meta_schedule as ms

    if not knobs.rpc:
        return ms.runner.LocalRunner(timeout_sec=knobs.runner_timeout_s, evaluator_config=evaluator_config(knobs, gpu))
    host, port, key = parse_rpc(knobs.rpc)
    devices = check_rpc(knobs.rpc)
    config = ms.runner.RPCConfig(
        tracker_host=host, tracker_port=port, tracker_key=key, session_timeout_sec=int(knobs.runner_timeout_s * 2)
    )
    return ms.runner.RPCRunner(rpc_config=config, evaluator_config=evaluator_config(knobs, gpu), max_workers=devices)
