"""A TVM RPC tracker and servers on loopback, as a remote device pool would be: for the RPC tests and
scripts/bench_rpc.py. Every process runs in its own process group and is ended as a group."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rpc_process(module: str, *args):
    return subprocess.Popen(
        [sys.executable, "-m", f"tvm.exec.{module}", "--host", "127.0.0.1", *args],
        start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def rpc_server(tracker_port: int, key: str):
    port = free_port()
    return rpc_process(
        "rpc_server", "--port", str(port), "--port-end", str(port + 20), "--tracker", f"127.0.0.1:{tracker_port}",
        "--key", key,
    )  # fmt: skip


def registered(spec: str) -> int:
    """Servers the tracker has for the key (0 while it is not up)."""
    from tuner.core.errors import TunerError
    from tuner.tuning import check_rpc

    try:
        return check_rpc(spec)
    except TunerError:
        return 0


def stop(procs) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(timeout=30)


@contextlib.contextmanager
def loopback(key: str, servers: int, timeout_s: float = 60):
    """(`host:port:key` for --rpc, the server processes) with `servers` registered under `key`."""
    port = free_port()
    tracker = rpc_process("rpc_tracker", "--port", str(port), "--port-end", str(port + 1))
    procs = [rpc_server(port, key) for _ in range(servers)]
    spec = f"127.0.0.1:{port}:{key}"
    try:
        deadline = time.time() + timeout_s
        while registered(spec) < servers:
            if time.time() > deadline:
                raise RuntimeError(f"{servers} RPC servers did not register with the tracker in {timeout_s:.0f} s")
            time.sleep(1)
        yield spec, procs
    finally:
        stop([*procs, tracker])
