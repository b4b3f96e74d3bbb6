#!/usr/bin/env python3
"""A package behind a service: many threads at once, and a busy neighbour.

    python scripts/load_test.py PACKAGE --model MODEL.onnx [--threads 1,2,4,16] [--duration 60]
    python scripts/load_test.py PACKAGE --model MODEL.onnx --hog [--processes 20] [--seconds 3]
        [--setting plain,ort-in-process,ort-alternating,taskset,quota]

Load: N threads call one loaded package (and, beside it, one ONNX Runtime session, and OpenVINO when installed)
for `--duration` seconds each, every call with one of 8 distinct inputs; each output is compared with the
single-threaded output for that input (`--runtimes ours,ours-ftz` adds the package loaded with
flush_denormals=True). Prints throughput, p50/p99 latency, errors and wrong outputs per runtime
and thread count.

Hog: each runtime timed in `--processes` fresh processes, idle and with one busy process beside it (`yes`, a core
of its own), median latency per process; says how many stayed within 2x of the idle median.
Every runtime uses the package's thread count (TVM_NUM_THREADS, ORT intra-op threads, OpenVINO threads).

Settings of the hog benchmark (each timed idle and beside the busy process, in fresh processes):
  plain            the process alone
  ort-in-process   an ONNX Runtime session (as shipped: spinning) created and run 10 times in the same process
                   before the package is timed (a service that serves both); the package only
  ort-alternating  the same session called between every two timed calls of the package; the package only
  taskset          each timed process restricted to CPU 0 (`taskset -c 0`), narrower than the core count
  quota            each timed process in a cgroup allowed one CPU's worth of time (a container's CPU quota;
                   needs root and a writable cgroup mount)
Under taskset and quota TVM_NUM_THREADS is left unset, so the package chooses its own count, and the peers get
the CPUs the process may use.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def runner(kind: str, package: str, model: str, threads: int):
    """(call(feed) -> list of output arrays, input specs) for one runtime."""
    from tuner.runtime.package import read_package

    manifest, _ = read_package(package)
    if kind in ("ours", "ours-ftz"):
        import tuner

        m = tuner.load(package, flush_denormals=kind == "ours-ftz")
        return (lambda feed: list(m(**feed).values())), manifest["inputs"]
    if kind == "ort":
        from tuner.report.reference import onnxruntime_session

        sess = onnxruntime_session(model, threads)  # as shipped: spinning
        names = [i.name for i in sess.get_inputs()]
        return (lambda feed: sess.run(None, {n: feed[n] for n in names})), manifest["inputs"]
    from tuner.report.reference import openvino_compiled

    compiled = openvino_compiled(model, threads)
    local = threading.local()  # an infer request is one caller's; the compiled model is shared

    def call(feed):
        if not hasattr(local, "req"):
            local.req = compiled.create_infer_request()
        res = local.req.infer(feed)
        return [np.array(res[o]) for o in compiled.outputs]

    return call, manifest["inputs"]


SELECTED: list[str] = []  # --runtimes


def peers() -> list[str]:
    try:
        import openvino  # noqa: F401

        found = ["ours", "ort", "openvino"]
    except ImportError:
        found = ["ours", "ort"]
    found += ["ours-ftz"] if "ours-ftz" in SELECTED else []  # the package loaded with flush_denormals=True
    return [r for r in found if not SELECTED or r in SELECTED]


def load_run(call, feeds, expected, n_threads: int, duration: float) -> dict:
    lat, errors, wrong = [], [], [0]
    lock = threading.Lock()
    stop = time.perf_counter() + duration

    def worker(t):
        k, mine = t, []
        while time.perf_counter() < stop:
            k = (k + 1) % len(feeds)
            t0 = time.perf_counter()
            try:
                out = call(feeds[k])
            except Exception as err:  # noqa: BLE001  (every failure counts)
                with lock:
                    errors.append(repr(err)[:200])
                continue
            mine.append((time.perf_counter() - t0) * 1e3)
            if not all(np.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True) for a, b in zip(out, expected[k])):
                with lock:
                    wrong[0] += 1
        with lock:
            lat.extend(mine)

    t0 = time.perf_counter()
    pool = [threading.Thread(target=worker, args=(t,)) for t in range(n_threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    wall = time.perf_counter() - t0
    q = np.percentile(lat, [50, 99]) if lat else [float("nan")] * 2
    return {"threads": n_threads, "calls": len(lat), "per_s": len(lat) / wall, "p50_ms": float(q[0]),
            "p99_ms": float(q[1]), "errors": len(errors), "wrong": wrong[0], "first_error": errors[:1]}  # fmt: skip


def load_test(args) -> list[dict]:
    from tuner.runtime.inputs import make_inputs

    rows = []
    for kind in peers():
        call, specs = runner(kind, args.package, args.model, args.num_threads)
        feeds = [make_inputs(specs, seed=k) for k in range(8)]
        expected = [call(f) for f in feeds]
        for n in args.threads:
            r = load_run(call, feeds, expected, n, args.duration)
            rows.append({"runtime": kind, **r})
            print(f"{kind:9s} {n:3d} threads: {r['per_s']:9.1f}/s  p50 {r['p50_ms']:8.3f} ms  p99 "
                  f"{r['p99_ms']:8.3f} ms  errors {r['errors']}  wrong {r['wrong']}", flush=True)  # fmt: skip
    return rows


SETTINGS = ("plain", "ort-in-process", "ort-alternating", "taskset", "quota")
NARROW = ("taskset", "quota")  # settings that give the process fewer CPUs than the machine has
OURS_ONLY = ("ort-in-process", "ort-alternating")


def worker_main(kind: str, package: str, model: str, threads: int, seconds: float, setting: str) -> None:
    """One fresh process: load, warm up, time back-to-back calls for `seconds`, print the median (ms)."""
    from tuner.runtime.inputs import make_inputs
    from tuner.runtime.threads import usable_cpus

    if setting in NARROW:
        threads = min(threads, usable_cpus())
    between = lambda: None  # noqa: E731
    if setting in OURS_ONLY:
        from tuner.report.reference import onnxruntime_session

        sess = onnxruntime_session(model, threads)  # as shipped: spinning
        ort_feed = make_inputs(runner_specs(package))
        ort_feed = {i.name: ort_feed[i.name] for i in sess.get_inputs()}
        for _ in range(10):
            sess.run(None, ort_feed)
        if setting == "ort-alternating":
            between = lambda: sess.run(None, ort_feed)  # noqa: E731
    call, specs = runner(kind, package, model, threads)
    feed = make_inputs(specs)
    for _ in range(10):
        call(feed)
    times, stop = [], time.perf_counter() + seconds
    while time.perf_counter() < stop:
        between()
        t0 = time.perf_counter()
        call(feed)
        times.append((time.perf_counter() - t0) * 1e3)
    print(json.dumps({"median_ms": statistics.median(times), "calls": len(times), "threads": threads}))


def runner_specs(package: str) -> list:
    from tuner.runtime.package import read_package

    return read_package(package)[0]["inputs"]


QUOTA_FILES = (  # one CPU's worth of time per period: cgroup v2, then v1's cpu controller
    ("/sys/fs/cgroup", {"cpu.max": "100000 100000"}),
    ("/sys/fs/cgroup/cpu", {"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "100000"}),
)


def quota_cgroup() -> str:
    """A cgroup allowed one CPU's worth of time; returns its procs file."""
    for base, files in QUOTA_FILES:
        if not os.path.exists(os.path.join(base, "cgroup.procs")):
            continue
        path = os.path.join(base, "fusion_tuner_load_test")
        try:
            os.makedirs(path, exist_ok=True)
            for name, value in files.items():
                with open(os.path.join(path, name), "w") as f:
                    f.write(value)
            return os.path.join(path, "cgroup.procs")
        except OSError:
            continue
    sys.exit("load_test: --setting quota needs a writable cgroup mount with the cpu controller (run as root)")


def narrowing(setting: str, procs: str | None):
    """preexec_fn that puts a fresh process into the setting's CPUs."""
    if setting == "taskset":
        return lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    if setting == "quota":

        def enter():
            with open(procs, "w") as f:
                f.write(str(os.getpid()))

        return enter
    return None


def hog_test(args) -> dict:
    return {setting: hog_setting(args, setting) for setting in args.setting}


def hog_setting(args, setting: str) -> dict:
    env = {**os.environ, "TVM_NUM_THREADS": str(args.num_threads)}
    if setting in NARROW:
        env.pop("TVM_NUM_THREADS")  # the package picks its count from the CPUs it may use
    enter = narrowing(setting, quota_cgroup() if setting == "quota" else None)
    kinds = ["ours"] if setting in OURS_ONLY else peers()
    print(f"setting {setting}:", flush=True)
    result = {}
    for condition in ("idle", "hog"):
        hog = subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) if condition == "hog" else None
        try:
            for _ in range(args.processes):
                for kind in kinds:  # interleaved: each runtime sees the same moments of the machine
                    cmd = [sys.executable, __file__, args.package, "--model", args.model, "--worker", kind,
                           "--seconds", str(args.seconds), "--num-threads", str(args.num_threads),
                           "--setting", setting]  # fmt: skip
                    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, preexec_fn=enter)
                    ms = json.loads(r.stdout.strip().splitlines()[-1])["median_ms"] if r.returncode == 0 else None
                    if r.returncode != 0:
                        print(f"  {kind} failed: {r.stderr.strip().splitlines()[-1:]}", flush=True)
                    result.setdefault(kind, {}).setdefault(condition, []).append(ms)
        finally:
            if hog:
                hog.kill()
                hog.wait()
    summary = {}
    for kind, runs in result.items():
        idle = statistics.median([v for v in runs["idle"] if v is not None])
        busy = [v for v in runs["hog"] if v is not None]
        within = sum(v <= 2 * idle for v in busy)
        s = summary[kind] = {
            "idle_ms": idle,
            "idle_range_ms": [
                min(v for v in runs["idle"] if v is not None),
                max(v for v in runs["idle"] if v is not None),
            ],
            "hog_range_ms": [min(busy), max(busy)],
            "hog_median_ms": statistics.median(busy),
            "hog_worst_ms": max(busy),
            "within_2x": within,
            "processes": len(runs["hog"]),
            "failed": runs["hog"].count(None),
        }
        print(
            f"{kind:9s} idle {idle:8.3f} ms | busy neighbour: median {s['hog_median_ms']:8.3f} ms, "
            f"worst {s['hog_worst_ms']:8.3f} ms, within 2x of idle in {within} of {len(busy)}"
        )
        print(f"          per process, busy: {' '.join(f'{v:.1f}' for v in sorted(busy))}")
    return {"runs": result, "summary": summary}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("package")
    ap.add_argument("--model", required=True, help="the ONNX model the package was built from (for the peers)")
    ap.add_argument("--threads", default="1,2,4,16", help="caller threads, comma-separated")
    ap.add_argument("--duration", type=float, default=60.0, help="seconds per thread count and runtime")
    ap.add_argument("--num-threads", type=int, default=None, help="threads of every runtime (default: the package's)")
    ap.add_argument("--hog", action="store_true", help="the busy-neighbour benchmark instead")
    ap.add_argument("--processes", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=3.0, help="timing per fresh process (--hog)")
    ap.add_argument("--setting", default="plain", help=f"hog settings, comma-separated: {', '.join(SETTINGS)}")
    ap.add_argument(
        "--runtimes", default="", help="comma-separated: ours,ort,openvino (default: all), ours-ftz (flush_denormals)"
    )
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--json", help="write the results to this file")
    args = ap.parse_args(argv)
    SELECTED[:] = [r for r in args.runtimes.split(",") if r]
    if args.num_threads is None:
        from tuner.runtime.package import read_package

        args.num_threads = read_package(args.package)[0].get("num_threads") or os.cpu_count()
    args.setting = [t for t in args.setting.split(",") if t]
    unknown = [t for t in args.setting if t not in SETTINGS]
    if unknown:
        ap.error(f"unknown --setting {', '.join(unknown)}; choose from {', '.join(SETTINGS)}")
    if not (args.worker and args.setting[0] in NARROW):  # narrowed processes let the package choose
        os.environ["TVM_NUM_THREADS"] = str(args.num_threads)
    if args.worker:
        worker_main(args.worker, args.package, args.model, args.num_threads, args.seconds, args.setting[0])
        return 0
    args.threads = [int(t) for t in args.threads.split(",")]
    out = hog_test(args) if args.hog else load_test(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    bad = [] if args.hog else [r for r in out if r["errors"] or r["wrong"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
