"""Pillow's bilinear resize as integer tables, so code other than Pillow's (a GPU kernel) gives its very pixels.

Pillow resamples an 8-bit image in two separable passes. For each pass it computes, per output pixel, the first
input pixel it reads and a row of weights (a triangle filter widened by the scale when shrinking, normalized, then
turned into fixed point with 22 fraction bits); each output value is ``clip8((2**21 + sum(w * x)) >> 22)``, and the
first pass's output is rounded to uint8 before the second reads it. :func:`coefficients` computes those tables with
the same float64 operations in the same order as Pillow's ``precompute_coeffs`` and ``normalize_coeffs_8bpc``
(``src/libImaging/Resample.c``), so they are Pillow's integers exactly.

Which pass Pillow runs first depends on its version and the sizes, and the two orders round differently:
:func:`pass_order` finds it by resizing a random image both ways.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from trtkit.errors import InputError

PRECISION_BITS = 22  # Pillow's: 32 - 8 bits of result - 2 bits of headroom
SUPPORT = 1.0  # the bilinear (triangle) filter's support
# size pairs whose pass order is remembered (video: one; a photo folder: a few dozen)
MAX_ORDERS = 256


class Taps(NamedTuple):
    """One pass's tables: output pixel ``j`` reads ``lengths[j]`` input pixels from ``first[j]`` on, with the weights
    ``weights[j, :lengths[j]]`` (int32 fixed point, :data:`PRECISION_BITS` fraction bits; the rest are 0)."""

    first: np.ndarray  # (out,) int32
    lengths: np.ndarray  # (out,) int32
    weights: np.ndarray  # (out, ksize) int32

    @property
    def ksize(self) -> int:
        return int(self.weights.shape[1])


def coefficients(in_size: int, out_size: int) -> Taps:
    """Pillow's bilinear taps resizing ``in_size`` pixels to ``out_size`` along one axis (the whole input: Pillow's
    default box). Equal sizes give the identity (one tap of weight 1.0), which the integer arithmetic keeps exact:
    the pass Pillow would skip changes nothing."""
    if in_size < 1 or out_size < 1:
        raise InputError(f"A resize needs sizes of at least 1 pixel; got {in_size} -> {out_size}.")
    if in_size == out_size:
        return Taps(
            np.arange(out_size, dtype=np.int32),
            np.ones(out_size, np.int32),
            np.full((out_size, 1), 1 << PRECISION_BITS, np.int32),
        )
    scale = float(np.float32(in_size) - np.float32(0.0)) / out_size  # the box (0, in) is float in Pillow
    filterscale = max(scale, 1.0)
    support = SUPPORT * filterscale
    ksize = int(np.ceil(support)) * 2 + 1
    center = 0.0 + (np.arange(out_size, dtype=np.float64) + 0.5) * scale
    xmin = np.maximum(np.trunc(center - support + 0.5), 0).astype(np.int64)
    xmax = np.minimum(np.trunc(center + support + 0.5).astype(np.int64), in_size) - xmin
    ss = 1.0 / filterscale
    taps = np.zeros((out_size, ksize), np.float64)
    total = np.zeros(out_size, np.float64)
    for x in range(ksize):  # tap by tap, as Pillow sums them (the order of a float sum matters)
        arg = (((x + xmin) - center) + 0.5) * ss
        w = np.where(x < xmax, np.maximum(1.0 - np.abs(arg), 0.0), 0.0)
        taps[:, x] = w
        total += w
    taps = np.divide(taps, total[:, None], out=taps, where=total[:, None] != 0.0)
    fixed = taps * float(1 << PRECISION_BITS)
    weights = np.trunc(np.where(taps < 0, fixed - 0.5, fixed + 0.5)).astype(np.int32)
    return Taps(xmin.astype(np.int32), np.maximum(xmax, 0).astype(np.int32), weights)


@functools.lru_cache(maxsize=MAX_ORDERS)
def cached_pass_order(in_size: tuple[int, int], out_size: tuple[int, int]) -> str:
    """:func:`pass_order`, remembered for the last :data:`MAX_ORDERS` pairs of sizes."""
    return pass_order(in_size, out_size)


def pass_order(in_size: tuple[int, int], out_size: tuple[int, int]) -> str:
    """Which pass this Pillow runs first resizing ``in_size`` to ``out_size`` (``(width, height)``, both changing):
    ``"hv"``, ``"vh"``, or ``""`` when a random image of that size does not tell."""
    from PIL import Image

    (w, h), (nw, nh) = in_size, out_size
    bilinear = Image.Resampling.BILINEAR
    probe = Image.fromarray(np.random.default_rng(0).integers(0, 256, (h, w, 3), dtype=np.uint8))
    whole = np.asarray(probe.resize((nw, nh), bilinear))
    if np.array_equal(np.asarray(probe.resize((nw, h), bilinear).resize((nw, nh), bilinear)), whole):
        return "hv"
    if np.array_equal(np.asarray(probe.resize((w, nh), bilinear).resize((nw, nh), bilinear)), whole):
        return "vh"
    return ""
