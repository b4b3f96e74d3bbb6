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
    assert calls(g, [0.020] * 4) == [1] * 4
    clock.t = g.next_try
    assert calls(g, [0.300]) == [2]  # the core is still busy: stay on one thread
    assert g.current == 1
    clock.t = g.next_try
    assert calls(g, [0.011]) == [2]  # free again
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
