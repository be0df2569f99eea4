"""Calibration algorithms: the absolute range (amax) of a tensor from its :class:`~calibrators.histogram.Histogram`.

- ``entropy``: the KL-divergence method TensorRT published ("8-bit Inference with TensorRT", GTC 2017): for every
  candidate number ``i`` of kept bins (128 .. bins-1), fold the outliers into the last kept bin (the reference P),
  quantize the kept bins to 128 levels and expand them back (the candidate Q), and keep the ``i`` whose KL(P||Q) is
  least; amax = ``(i + 0.5) * bin_width``. All candidates are evaluated at once from prefix sums (no Python loop over
  candidates or elements).
- ``minmax``: the exact largest ``|x|`` seen.
- ``mse``: the amax that minimizes the expected squared quantization error over the histogram: values inside the
  range carry the rounding noise of a uniform quantizer (``step**2 / 12``), values beyond it their clipping error
  ``(|x| - amax)**2``; every bin edge is a candidate, all evaluated at once from prefix sums.

scale = amax / 127 (symmetric INT8, zero point 0).
"""

from __future__ import annotations

import numpy as np

from calibrators.histogram import Histogram
from calibrators.settings import CALIB_ALGORITHMS
from trtkit.errors import CalibrationError

ALGORITHMS = CALIB_ALGORITHMS  # named once, in calibrators.settings
QUANT_LEVELS = 128  # |x| is quantized to 128 levels: INT8 is symmetric in [-127, 127]
_TINY_AMAX = 1e-8  # a tensor of zeros still needs a positive scale
EPSILON = 1e-4  # probability given to an empty bin of Q where P is not empty


def entropy_divergences(counts: np.ndarray, levels: int = QUANT_LEVELS) -> tuple[np.ndarray, np.ndarray]:
    """KL(P||Q) for every candidate number of kept bins, vectorized.

    Args:
        counts: histogram counts of ``|x|`` (1-D).
        levels: quantization levels (128 for INT8).

    Returns:
        ``(candidates, divergences)``: candidate kept-bin counts ``levels .. len(counts)-1`` and their KL divergence
        (``inf`` where no data falls in the kept bins).
    """
    b = np.asarray(counts, dtype=np.float64)
    n = b.size
    cand = np.arange(levels, n, dtype=np.int64)
    blogb = np.where(b > 0, b * np.log(np.where(b > 0, b, 1.0)), 0.0)
    csum = np.concatenate([[0.0], np.cumsum(b)])
    clog = np.concatenate([[0.0], np.cumsum(blogb)])
    cnnz = np.concatenate([[0], np.cumsum(b > 0)])
    # Chunk c of candidate i covers bins [ceil(c*i/levels), ceil((c+1)*i/levels)), as np.digitize on
    # np.linspace(0, i, levels + 1) assigns them (the edges are exact multiples of i/levels).
    c = np.arange(levels + 1, dtype=np.int64)
    bounds = (c[None, :] * cand[:, None] + levels - 1) // levels
    start, end = bounds[:, :-1], bounds[:, 1:]
    chunk_sum = csum[end] - csum[start]
    chunk_nnz = cnnz[end] - cnnz[start]
    chunk_blogb = clog[end] - clog[start]
    has = chunk_nnz > 0
    q = np.where(has, chunk_sum / np.where(has, chunk_nnz, 1), 1.0)
    terms = np.where(has, chunk_blogb - chunk_sum * np.log(q), 0.0).sum(axis=1)
    # The last kept bin of P also holds the outliers; Q does not.
    last = b[cand - 1]
    outliers = csum[n] - csum[cand]
    q_last = q[:, -1]
    safe_last = np.where(last > 0, last, 1.0)
    folded = last + outliers
    correction = np.where(
        outliers > 0,
        folded * np.log(np.where(folded > 0, folded, 1.0)) - last * np.log(safe_last) - outliers * np.log(q_last),
        0.0,
    )
    total, kept = csum[n], csum[cand]
    with np.errstate(divide="ignore", invalid="ignore"):
        kl = (terms + correction) / total + np.log(kept / total)
        # Q is zero where P holds the outliers (the last kept bin is empty): smooth Q there to EPSILON, as MXNet's
        # implementation of the same method does, instead of an infinite divergence for every such candidate.
        p_last = outliers / total
        smoothed = terms / total + (kept / total) * np.log(kept / total) + p_last * np.log(p_last / EPSILON)
    kl = np.where((outliers > 0) & (last == 0), smoothed, kl)
    kl = np.where(kept > 0, kl, np.inf)
    return cand, kl


def entropy_amax(hist: Histogram, levels: int = QUANT_LEVELS) -> float:
    """amax by TensorRT's published entropy (KL) method; see the module docstring."""
    if hist.counts is None or hist.count == 0:
        return _TINY_AMAX
    if hist.bins <= levels:
        raise CalibrationError(
            f"Entropy calibration needs more than {levels} histogram bins; got {hist.bins} (use the default 2048)."
        )
    cand, kl = entropy_divergences(hist.counts, levels)
    if not np.isfinite(kl).any():
        return max(hist.amax, _TINY_AMAX)
    best = int(cand[int(np.argmin(kl))])
    return max(min((best + 0.5) * hist.bin_width, hist.amax), _TINY_AMAX)


def minmax_amax(hist: Histogram) -> float:
    """amax = the largest ``|x|`` seen."""
    return max(float(hist.amax), _TINY_AMAX)


def mse_errors(counts: np.ndarray, bin_width: float, levels: int = QUANT_LEVELS - 1) -> tuple[np.ndarray, np.ndarray]:
    """Expected squared quantization error (summed over the histogram) for amax at every bin edge, vectorized.

    Args:
        counts: histogram counts of ``|x|`` (1-D); bin ``k`` covers ``[k, k + 1) * bin_width``.
        bin_width: width of a bin.
        levels: positive quantization levels (127 for symmetric INT8).

    Returns:
        ``(amaxes, errors)``: candidate amax ``k * bin_width`` for ``k = 1 .. len(counts)`` and their errors; bins
        below a candidate's edge count as in range, the others are clipped at their centres.
    """
    c = np.asarray(counts, dtype=np.float64)
    x = (np.arange(c.size) + 0.5) * bin_width
    amax = np.arange(1, c.size + 1) * bin_width

    def suffix(v):  # sums over the bins from k on, for k = 1 .. n
        return np.concatenate([np.cumsum(v[::-1])[::-1], [0.0]])[1:]

    inside = np.cumsum(c)
    clipped = suffix(c * x * x) - 2.0 * amax * suffix(c * x) + amax * amax * suffix(c)
    return amax, inside * (amax / levels) ** 2 / 12.0 + np.maximum(clipped, 0.0)


def mse_amax(hist: Histogram) -> float:
    """amax with the least expected squared quantization error; see the module docstring."""
    if hist.counts is None or hist.count == 0:
        return _TINY_AMAX
    amax, errors = mse_errors(hist.counts, hist.bin_width)
    return max(min(float(amax[int(np.argmin(errors))]), hist.amax), _TINY_AMAX)


def compute_amax(hist: Histogram, algorithm: str) -> float:
    """amax of one tensor with the named algorithm.

    Raises:
        CalibrationError: unknown algorithm name.
    """
    if algorithm == "entropy":
        return entropy_amax(hist)
    if algorithm == "minmax":
        return minmax_amax(hist)
    if algorithm == "mse":
        return mse_amax(hist)
    raise CalibrationError(f"Unknown calibration algorithm '{algorithm}'; use one of: {', '.join(ALGORITHMS)}.")


def compute_amaxes(histograms, algorithm: str) -> dict[str, float]:
    """amax of every tensor of a :class:`~calibrators.histogram.HistogramSet` (or a ``{name: Histogram}`` dict)."""
    tensors = getattr(histograms, "tensors", histograms)
    return {name: compute_amax(hist, algorithm) for name, hist in tensors.items()}
