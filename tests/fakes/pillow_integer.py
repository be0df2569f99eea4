"""Pillow's bilinear integer arithmetic in numpy over :mod:`trtkit.detection.pillow_resample`'s tables: the
reference the letterbox kernels (and their fakes) are checked against."""

from __future__ import annotations

import numpy as np

from trtkit.detection.pillow_resample import PRECISION_BITS, Taps, coefficients


def resample_axis(pixels: np.ndarray, taps: Taps, axis: int) -> np.ndarray:
    """One pass over ``axis`` (0: rows, 1: columns) of an ``(H, W, C)`` uint8 array, in Pillow's integer
    arithmetic."""
    moved = np.moveaxis(pixels, axis, 0).astype(np.int64)
    acc = np.full((len(taps.first),) + moved.shape[1:], 1 << (PRECISION_BITS - 1), np.int64)
    for k in range(taps.ksize):
        index = np.minimum(taps.first + k, moved.shape[0] - 1)
        weight = np.where(k < taps.lengths, taps.weights[:, k], 0).astype(np.int64)
        acc += moved[index] * weight.reshape((-1,) + (1,) * (moved.ndim - 1))
    out = np.clip(acc >> PRECISION_BITS, 0, 255).astype(np.uint8)
    return np.moveaxis(out, 0, axis)


def resample(pixels: np.ndarray, size: tuple[int, int], order: str = "hv") -> np.ndarray:
    """``(H, W, 3)`` uint8 resized to ``size = (width, height)`` as Pillow's bilinear ``resize`` does, passes in
    ``order`` (``"hv"``: columns first, then rows; ``"vh"``: the other way)."""
    height, width = pixels.shape[:2]
    horizontal, vertical = coefficients(width, size[0]), coefficients(height, size[1])
    if order == "vh":
        return resample_axis(resample_axis(pixels, vertical, 0), horizontal, 1)
    return resample_axis(resample_axis(pixels, horizontal, 1), vertical, 0)
