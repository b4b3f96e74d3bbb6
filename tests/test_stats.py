"""One way of comparing two latencies everywhere: ratio of medians, "within noise" when p10-p90 ranges overlap."""

from tuner.core.stats import compare_latency, latency_stats


def test_overlapping_samples_read_within_noise():
    a = [3.2, 4.0, 5.1, 6.3, 7.4]
    b = [3.1, 3.9, 4.6, 6.0, 7.6]  # compare's "1.68× higher" from two runs like these was noise
    cmp = compare_latency(a, b)
    assert cmp["within_noise"] and cmp["words"].startswith("within noise")


def test_a_large_ratio_is_never_called_noise():
    """One long tail made the ranges overlap: the ratio is still said, flagged as noisy."""
    ours = [1.0, 1.0, 1.01, 1.02, 1.0, 0.99, 1.0, 9.0, 9.5, 1.0]
    theirs = [2.4, 2.41, 2.39, 2.4, 2.42, 2.4, 2.38, 2.4, 2.4, 2.41]
    cmp = compare_latency(ours, theirs)
    assert not cmp["within_noise"] and cmp["words"] == "2.40× faster (noisy: p10-p90 ranges overlap)"


def test_separated_samples_give_a_ratio_in_words():
    fast, slow = [1.0, 1.01, 0.99, 1.02], [2.0, 2.02, 1.98, 2.01]
    assert compare_latency(fast, slow)["words"] == "2.00× faster"
    assert compare_latency(slow, fast)["words"] == "2.00× slower"
    assert not compare_latency(slow, fast)["within_noise"]


def test_latency_stats_has_tail_percentiles_and_throughput():
    s = latency_stats([1.0] * 99 + [5.0], wall_s=0.104)
    assert s["median"] == 1.0 and s["p99"] > 1.0 and s["runs"] == 100
    assert abs(s["throughput_per_s"] - 100 / 0.104) < 1e-6
