"""Running histograms of ``|x|`` per tensor, vectorized with numpy.

A histogram keeps a fixed number of bins over ``[0, range)``. When a batch holds a value beyond the range, the range
doubles (as often as needed) and pairs of bins merge, so re-binning is exact and the counts of earlier batches are
never re-read. Each update is a handful of whole-array numpy operations: no Python loop over elements.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

DEFAULT_BINS = 2048
_BLOCK = 1 << 16  # elements per step: the scratch buffers stay in cache, where whole-array temporaries would not


def _bin_counts(flat: np.ndarray, scale: np.float32, bins: int) -> np.ndarray:
    """Counts of ``min(int(|x| * scale), bins - 1)`` for finite ``x`` with ``|x| * scale <= bins`` (the caller drops
    non-finite values and grows the range first), computed block by block in reused buffers (clamped as int32
    indices, the cheapest place to clamp)."""
    scratch = np.empty(min(_BLOCK, flat.size), dtype=np.float32)
    index = np.empty(scratch.size, dtype=np.int32)
    counts = np.zeros(bins, dtype=np.int64)
    top = np.int32(bins - 1)
    for start in range(0, flat.size, _BLOCK):
        block = flat[start : start + _BLOCK]
        f, i = scratch[: block.size], index[: block.size]
        np.abs(block, out=f)
        f *= scale
        np.copyto(i, f, casting="unsafe")
        np.minimum(i, top, out=i)
        counts += np.bincount(i, minlength=bins)
    return counts


@dataclass
class Histogram:
    """Histogram of absolute values of one tensor, plus its exact absolute maximum.

    Attributes:
        bins: number of bins (a power of two keeps doubling exact; any even count works).
        counts: float64 counts per bin, ``None`` until the first non-empty update.
        range: upper edge of the last bin.
        amax: the largest ``|x|`` seen (exact, not binned).
        count: number of values seen.
    """

    bins: int = DEFAULT_BINS
    counts: np.ndarray | None = None
    range: float = 0.0
    amax: float = 0.0
    count: int = 0

    @property
    def bin_width(self) -> float:
        return self.range / self.bins

    def update(self, values: np.ndarray) -> None:
        """Add the absolute values of ``values`` (any shape, any float dtype)."""
        flat = np.ascontiguousarray(values, dtype=np.float32).ravel()
        if flat.size == 0:
            return
        batch_max = max(float(flat.max()), -float(flat.min()))
        if not np.isfinite(batch_max):
            flat = flat[np.isfinite(flat)]
            if flat.size == 0:
                return
            batch_max = max(float(flat.max()), -float(flat.min()))
        self.add_counts(batch_max, _bin_counts(flat, self.scale_for(batch_max), self.bins))

    def scale_for(self, batch_max: float) -> np.float32:
        """The factor that maps ``|x|`` to its bin once the range has grown to hold ``batch_max``: the bin of ``x``
        is ``min(int(|x| * scale), bins - 1)`` in float32 (what :meth:`add_counts` expects counts of)."""
        return np.float32(self.bins / self._range_for(batch_max))

    def add_counts(self, batch_max: float, counts: np.ndarray) -> None:
        """Add one batch given as bin counts at :meth:`scale_for` ``(batch_max)`` and its finite max ``|x|``.

        This is how batches binned elsewhere (on the GPU: :mod:`calibrators.device_histogram`) join; all-zero
        counts (an empty batch, or only non-finite values) change nothing.
        """
        total = int(counts.sum())
        if total == 0:
            return
        self.amax = max(self.amax, float(batch_max))
        self.count += total
        self._grow_to(batch_max)
        self.counts += counts

    def _range_for(self, value: float) -> float:
        if self.counts is None:
            return value if value > 0 else 1.0  # a tensor of zeros still needs a non-empty range
        grown = self.range
        while value > grown:
            grown *= 2.0
        return grown

    def _grow_to(self, value: float) -> None:
        if self.counts is None:
            self.range = self._range_for(value)
            self.counts = np.zeros(self.bins, dtype=np.float64)
            return
        while value > self.range:
            self.counts = np.concatenate([self.counts.reshape(-1, 2).sum(axis=1), np.zeros(self.bins // 2)])
            self.range *= 2.0


@dataclass
class HistogramSet:
    """One :class:`Histogram` per tensor name."""

    bins: int = DEFAULT_BINS
    tensors: dict[str, Histogram] = field(default_factory=dict)

    def update(self, arrays: dict[str, np.ndarray]) -> None:
        """Add one batch of values for each named tensor."""
        for name, values in arrays.items():
            self.histogram(name).update(values)

    def histogram(self, name: str) -> Histogram:
        """The histogram of ``name``, created empty on first use."""
        hist = self.tensors.get(name)
        if hist is None:
            hist = self.tensors[name] = Histogram(bins=self.bins)
        return hist

    def __getitem__(self, name: str) -> Histogram:
        return self.tensors[name]

    def __len__(self) -> int:
        return len(self.tensors)
