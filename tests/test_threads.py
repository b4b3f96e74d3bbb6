"""The thread governor's decisions, driven by given call times and a fake clock (no timing, no TVM)."""

import pytest

from tuner.runtime import threads as T


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


@pytest.fixture()
def gov(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(T.time, "monotonic", clock)
    monkeypatch.delenv(T.ADAPTIVE_ENV, raising=False)
    g = T.ThreadGovernor(2)
    applied = []
    monkeypatch.setattr(g, "_apply", applied.append)
    return g, clock, applied


def calls(g, times):
    """Each time a call takes: the thread count it ran on."""
    picked = []
    for t in times:
        n = g.pick()
        g.record(n, t)
        picked.append(n)
    return picked


def test_idle_cores_keep_every_thread_and_try_one_thread_ever_less_often(gov):
    g, clock, _ = gov
    assert calls(g, [0.010, 0.010, 0.010, 0.020, 0.010]) == [2, 2, 2, 1, 2]  # one try once 2 threads have an estimate
    waits = [g.next_try - clock.t]
    for _ in range(5):
        calls(g, [0.010] * 3)  # a try needs three calls on the current count since the last one
        clock.t = g.next_try
        assert g.pick() == 1  # the try
        g.record(1, 0.020)  # one thread is slower: back to 2, and wait twice as long
        waits.append(g.next_try - clock.t)
        assert g.pick() == 2
    assert waits == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0] and g.switches == 0


def test_a_busy_core_moves_calls_to_one_thread_and_back_when_it_is_free(gov):
    g, clock, _ = gov
    calls(g, [0.010] * 3 + [0.020])  # the first try of one thread: slower
    clock.t += 1.5  # within the 2 s wait
    assert calls(g, [0.030, 0.200, 0.040]) == [2, 2, 2]  # three slow calls in a row...
    assert g.pick() == 1  # ...and one thread is tried at once
    g.record(1, 0.020)
    assert g.current == 1 and g.switches == 1
    assert calls(g, [0.020] * 3 + [0.300]) == [1, 1, 1, 2]  # after three calls, the full count again: still busy
    assert g.current == 1
    assert calls(g, [0.020] * 5) == [1] * 5  # and now it waits (2 s) before the next try
    clock.t = g.next_try
    assert calls(g, [0.011]) == [2]  # free again
    assert g.current == 2 and g.switches == 2
    assert calls(g, [0.010] * 5) == [2] * 5  # and it stays, a second before the next try


def test_a_short_burst_keeps_one_thread_for_three_calls_only(gov):
    """Someone else's burst (ONNX Runtime spinning between benchmark blocks) slows three calls: one thread wins one
    try, and three calls later the full count is back."""
    g, clock, _ = gov
    calls(g, [0.010] * 3 + [0.020])
    clock.t += 1.5
    assert calls(g, [0.030, 0.030, 0.030, 0.019]) == [2, 2, 2, 1]
    assert calls(g, [0.019, 0.019, 0.019, 0.010]) == [1, 1, 1, 2]
    assert g.current == 2 and g.switches == 2


def test_one_slow_call_is_noise(gov):
    g, clock, _ = gov
    calls(g, [0.010] * 3 + [0.020])  # the first try
    calls(g, [0.010, 0.010, 0.050, 0.010, 0.010])
    assert g.next_try == 100.0 + 2 * T.FIRST_TRY_S and g.current == 2


def test_off_switch_and_single_thread_packages(monkeypatch, gov):
    monkeypatch.setenv(T.ADAPTIVE_ENV, "0")
    assert not T.ThreadGovernor(2).enabled
    monkeypatch.delenv(T.ADAPTIVE_ENV)
    assert not T.ThreadGovernor(1).enabled and not T.ThreadGovernor(2, enabled=False).enabled
    g = T.ThreadGovernor(4, enabled=False)
    assert calls(g, [1.0] * 5) == [4] * 5


def test_usable_cpus_follow_the_affinity_mask():
    import os

    assert 1 <= T.usable_cpus() <= len(os.sched_getaffinity(0))


def _cgroup_tree(tmp_path, files: dict, membership: str):
    for rel, text in files.items():
        f = tmp_path / "fs" / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    (tmp_path / "cgroup").write_text(membership)
    return str(tmp_path / "fs"), str(tmp_path / "cgroup")


def test_cpu_quota_is_read_from_the_process_own_cgroup_and_its_parents(tmp_path):
    # v2, systemd-style: the quota on the service's cgroup, the root unlimited
    root, member = _cgroup_tree(
        tmp_path,
        {
            "cpu.max": "max 100000\n",
            "system.slice/app.service/cpu.max": "150000 100000\n",
            "system.slice/cpu.max": "max 100000\n",
        },  # fmt: skip
        "0::/system.slice/app.service\n",
    )
    assert T._cgroup_cpu_quota(root, member) == 2  # 1.5 CPUs' worth: two threads, each throttled a little
    # a parent's quota limits its child
    (tmp_path / "fs" / "system.slice" / "cpu.max").write_text("50000 100000\n")
    assert T._cgroup_cpu_quota(root, member) == 1


def test_cpu_quota_v1_and_unlimited(tmp_path):
    root, member = _cgroup_tree(
        tmp_path,
        {
            "cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
            "cpu,cpuacct/cpu.cfs_period_us": "100000\n",
            "cpu,cpuacct/box/cpu.cfs_quota_us": "100000\n",
            "cpu,cpuacct/box/cpu.cfs_period_us": "100000\n",
        },  # fmt: skip
        "4:cpu,cpuacct:/box\n0::/\n",
    )
    assert T._cgroup_cpu_quota(root, member) == 1
    (tmp_path / "cgroup").write_text("4:cpu,cpuacct:/\n0::/\n")  # the root: no quota
    assert T._cgroup_cpu_quota(root, member) is None
    # a path the mount does not show (a cgroup namespace shows the own cgroup as the root): the root's files count
    (tmp_path / "cgroup").write_text("4:cpu,cpuacct:/not/here\n0::/\n")
    (tmp_path / "fs" / "cpu,cpuacct" / "cpu.cfs_quota_us").write_text("200000\n")
    assert T._cgroup_cpu_quota(root, member) == 2
    assert T._cgroup_cpu_quota(str(tmp_path / "missing"), str(tmp_path / "missing")) is None


def test_calls_too_short_for_a_busy_core_to_matter_are_left_alone(gov):
    """Sub-millisecond calls never pay for a try, even when their timing noise looks like a slowdown."""
    g, clock, _ = gov
    assert calls(g, [0.00006, 0.00005, 0.00009, 0.00011, 0.00012, 0.0001] * 3) == [2] * 18
    clock.t += 100
    assert calls(g, [0.0001] * 5) == [2] * 5
    assert 1 in calls(g, [0.004, 0.005, 0.004, 0.003])  # 40x slower and over a millisecond: one thread is tried


def test_models_sharing_a_pool_each_get_their_own_count(monkeypatch):
    """TVM's pool is per calling thread: one Model switched to one thread must not leave the next on it."""
    monkeypatch.delenv(T.ADAPTIVE_ENV, raising=False)
    configured = []
    monkeypatch.setattr(T, "_POOL", T.threading.local())

    def fake_config(name):
        return lambda mode, n, cpus: configured.append(n)

    import tvm

    monkeypatch.setattr(tvm, "get_global_func", fake_config)
    a, b = T.ThreadGovernor(2), T.ThreadGovernor(2)
    a.current = 1  # a is on one thread now
    assert a.pick() == 1 and configured == [1]
    assert b.pick() == 2 and configured == [1, 2]  # b sets the pool back to its own count
    assert T.ThreadGovernor(2, enabled=False).pick() == 2 and configured == [1, 2]
    a.pick()
    assert T.ThreadGovernor(2, enabled=False).pick() == 2 and configured == [1, 2, 1, 2]


def test_a_model_loaded_while_the_pool_is_on_one_thread_keeps_the_package_count(cnn_package):
    """Its count comes from TVM_NUM_THREADS, not from the calling thread's pool as another Model left it: a Model
    loaded while a busy neighbour had the pool on one thread took 1 as its count and ran on one thread for good."""
    import os

    import tuner

    first = tuner.load(cnn_package)
    first._threads._apply(1)  # as its governor does when another process holds a core
    try:
        second = tuner.load(cnn_package)
        assert second._threads.full == int(os.environ["TVM_NUM_THREADS"]) == first._threads.full
    finally:
        first._threads._apply(first._threads.full)
