"""Histogram and threshold maths against hand-computed cases and a literal (slow) transcription of the method."""

import numpy as np
import pytest

from calibrators.algorithms import (
    compute_amax,
    entropy_amax,
    entropy_divergences,
    minmax_amax,
    mse_errors,
)
from calibrators.histogram import Histogram, HistogramSet
from trtkit.errors import CalibrationError


def reference_divergence(bins, i, levels=128):
    """The published method, written as loops, for one candidate ``i``."""
    bins = np.asarray(bins, dtype=np.float64)
    p = bins[:i].copy()
    p[i - 1] += bins[i:].sum()
    space = np.linspace(0, i, levels + 1)
    which = np.digitize(np.arange(i), space) - 1
    q = np.zeros(i)
    for chunk in range(levels):
        members = [j for j in range(i) if which[j] == chunk and bins[j] > 0]
        if members:
            mean = sum(bins[j] for j in members) / len(members)
            for j in members:
                q[j] = mean
    p, q = p / p.sum(), q / q.sum()
    total = 0.0
    for pj, qj in zip(p, q):
        if pj > 0:
            if qj == 0:
                qj = 1e-4  # smoothed, as in MXNet's implementation
            total += pj * np.log(pj / qj)
    return total


def test_vectorized_entropy_matches_literal_method():
    rng = np.random.default_rng(0)
    counts = np.floor(rng.exponential(50.0, size=256) * (rng.random(256) > 0.2))
    cand, kl = entropy_divergences(counts)
    for k in (0, 1, 7, 50, 100, 127):
        assert kl[k] == pytest.approx(reference_divergence(counts, int(cand[k])), rel=1e-9, abs=1e-12)


def test_entropy_smooths_an_empty_last_kept_bin_that_receives_outliers():
    counts = np.ones(256)
    counts[199] = 0
    cand, kl = entropy_divergences(counts)
    assert kl[cand == 200][0] == pytest.approx(reference_divergence(counts, 200), rel=1e-9)
    assert np.isfinite(kl).all()


def test_entropy_keeps_all_bins_of_a_uniform_histogram_and_clips_a_long_tail():
    hist = Histogram(bins=2048)
    hist.update(np.linspace(0, 1, 100_000, dtype=np.float32))
    assert entropy_amax(hist) == pytest.approx(1.0, rel=0.01)
    tailed = Histogram(bins=2048)
    rng = np.random.default_rng(1)
    tailed.update(np.concatenate([rng.normal(0, 1, 200_000), [100.0]]).astype(np.float32))
    amax = entropy_amax(tailed)
    assert 2.0 < amax < 20.0  # far below the outlier, above the bulk
    assert minmax_amax(tailed) == pytest.approx(100.0)


def test_histogram_rebins_exactly_when_the_range_grows():
    hist = Histogram(bins=8)
    hist.update(np.array([0.1, 0.5, 0.99, 1.0]))  # range 1.0, width 0.125
    assert hist.range == 1.0
    assert hist.counts.tolist() == [1, 0, 0, 0, 1, 0, 0, 2]
    hist.update(np.array([-3.5]))  # doubles twice: range 4, width 0.5; |-3.5| lands in bin 7
    assert hist.range == 4.0
    assert hist.counts.tolist() == [1, 3, 0, 0, 0, 0, 0, 1]  # pairs merged twice
    assert hist.amax == 3.5 and hist.count == 5


def test_histogram_ignores_non_finite_values_and_handles_zeros():
    hist = Histogram(bins=8)
    hist.update(np.array([0.0, 0.0, np.inf, np.nan]))
    assert hist.count == 2 and hist.range == 1.0
    assert minmax_amax(hist) > 0  # a zero tensor still gets a positive scale


def test_compute_amax_by_name_and_unknown_name():
    hs = HistogramSet(bins=2048)
    hs.update({"x": np.array([1.0, -2.0, 0.5])})
    assert compute_amax(hs["x"], "minmax") == 2.0
    with pytest.raises(CalibrationError, match="Unknown calibration algorithm 'kl'; use one of: entropy"):
        compute_amax(hs["x"], "kl")


def _fake_quant_mse(x, amax):
    scale = amax / 127.0
    return float(np.mean((x - np.clip(np.round(x / scale), -127, 127) * scale) ** 2))


def test_mse_finds_the_least_error_range_of_a_gaussian():
    x = np.random.default_rng(0).standard_normal(1_000_000).astype(np.float32)
    hist = Histogram()
    hist.update(x)
    amax = compute_amax(hist, "mse")
    grid = np.linspace(2.0, 6.0, 161)
    best = grid[int(np.argmin([_fake_quant_mse(x, a) for a in grid]))]
    assert abs(amax - best) < 0.1  # the histogram's error model against fake quantization of the samples
    assert amax < minmax_amax(hist) - 0.5  # it clips the tail
    assert _fake_quant_mse(x, amax) < 1.02 * _fake_quant_mse(x, best)


def test_mse_keeps_the_whole_range_of_bounded_data_and_trades_an_outlier_off():
    x = np.random.default_rng(1).uniform(-1, 1, 200_000).astype(np.float32)
    hist = Histogram()
    hist.update(x)
    assert compute_amax(hist, "mse") == pytest.approx(1.0, abs=0.01)
    # a squared error counts a far outlier heavily: the range stops between the data and the outlier, where
    # clipping it costs what the coarser steps cost the rest
    x = np.concatenate([x, np.array([50.0], np.float32)])
    hist.update(x[-1:])
    amax = compute_amax(hist, "mse")
    grid = np.linspace(1.0, 50.0, 197)
    best = grid[int(np.argmin([_fake_quant_mse(x, a) for a in grid]))]
    assert amax == pytest.approx(24.6, abs=0.1)  # MSE moves only as far as the error it saves; min-max would take 50
    assert abs(amax - best) < 1.0


def test_mse_errors_match_a_direct_sum_at_some_candidates():
    counts = np.array([5.0, 0.0, 3.0, 1.0, 0.0, 2.0])
    width = 0.5
    amax, errors = mse_errors(counts, width, levels=2)
    centres = (np.arange(6) + 0.5) * width
    for k in (1, 3, 6):
        a = k * width
        inside = counts[:k].sum() * (a / 2) ** 2 / 12
        clipped = (counts[k:] * (centres[k:] - a) ** 2).sum()
        assert amax[k - 1] == pytest.approx(a)
        assert errors[k - 1] == pytest.approx(inside + clipped)


def test_mse_of_an_empty_histogram_is_the_tiny_range():
    assert compute_amax(Histogram(), "mse") == pytest.approx(1e-8)
