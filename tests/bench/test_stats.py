"""Benchmark statistics on synthetic timings: percentiles, coefficient of variation, warnings, throughput."""

from __future__ import annotations

import numpy as np
import pytest

from trtkit.bench.stats import percentile, summarize, throughput, warnings_for


@pytest.mark.parametrize("q", [0, 1, 25, 50, 90, 95, 99, 99.9, 100])
def test_percentiles_match_numpy(q):
    values = sorted(np.random.default_rng(0).exponential(1.0, size=1001).tolist())
    assert percentile(values, q) == pytest.approx(np.percentile(values, q))


def test_percentile_interpolates_and_checks_its_arguments():
    assert percentile([1.0, 2.0], 50) == 1.5
    assert percentile([4.0], 99) == 4.0
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    with pytest.raises(ValueError, match="outside 0..100"):
        percentile([1.0], 101)


def test_summary_of_known_values():
    s = summarize([3.0, 1.0, 2.0, 4.0, 5.0])
    assert (s.count, s.min, s.max, s.mean, s.median) == (5, 1.0, 5.0, 3.0, 3.0)
    assert s.stdev == pytest.approx(np.std([1, 2, 3, 4, 5]))
    assert s.cov == pytest.approx(np.std([1, 2, 3, 4, 5]) / 3.0)
    assert s.p90 == pytest.approx(4.6) and s.p99 == pytest.approx(4.96)
    assert set(s.to_json()) == {"count", "min", "mean", "median", "p90", "p95", "p99", "max", "stdev", "cov"}
    with pytest.raises(ValueError, match="no timings"):
        summarize([])


def test_constant_timings_have_zero_cov_and_no_warning():
    s = summarize([0.5] * 100)
    assert s.cov == 0.0 and s.p99 == 0.5
    assert warnings_for(s, summarize([0.1] * 100), s, cuda_graph=False) == []


def test_noisy_timings_warn_above_2_5_percent():
    quiet = summarize([1.0, 1.02] * 50)  # cov 1%
    noisy = summarize([1.0, 1.1] * 50)  # cov ~4.8%
    assert warnings_for(quiet, None, None, cuda_graph=True) == []
    (warning,) = warnings_for(noisy, None, None, cuda_graph=True)
    assert warning.startswith("Latency is unstable (coefficient of variation 4.8% > 2.5%)") and "noisy" in warning
    # with GPU compute times, they decide (as in trtexec): noisy latency alone is not flagged
    assert warnings_for(noisy, None, quiet, cuda_graph=True) == []
    (warning,) = warnings_for(quiet, None, noisy, cuda_graph=True)
    assert warning.startswith("GPU compute time is unstable (coefficient of variation 4.8%")


def test_launch_bound_warning_suggests_graphs_only_when_off():
    latency = summarize([1.0] * 10)
    compute = summarize([0.1] * 10)
    enqueue = summarize([0.09] * 10)  # 0.9x compute
    (warning,) = warnings_for(latency, enqueue, compute, cuda_graph=False)
    assert "Launch-bound" in warning and warning.endswith("; replay it from a CUDA graph")
    (warning,) = warnings_for(latency, enqueue, compute, cuda_graph=True)
    assert "CUDA graph" not in warning and warning.endswith("; use larger batches or several streams")
    assert warnings_for(latency, summarize([0.07] * 10), compute, cuda_graph=False) == []  # 0.7x: fine


def test_throughput():
    assert throughput(1000, 2.0, 8) == (500.0, 4000.0)
    assert throughput(10, 0.0, 1) == (0.0, 0.0)
