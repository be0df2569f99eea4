"""Pillow's bilinear resize as integer tables: the numpy integer arithmetic on them gives Pillow's pixels exactly
(what the GPU letterbox kernels run)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from tests.fakes.pillow_integer import resample
from trtkit.detection.pillow_resample import PRECISION_BITS, cached_pass_order, coefficients, pass_order
from trtkit.errors import InputError

# (input w, h) -> (output w, h): the detection set's letterbox sizes, shrinking by large factors (more taps than
# numpy's pairwise summation would sum in order), enlarging, one axis only, 1-pixel edges
CASES = [((416, 256), (320, 197)), ((256, 416), (197, 320)), ((288, 352), (262, 320)), ((256, 256), (320, 320)),
         ((149, 469), (102, 320)), ((1280, 720), (320, 180)), ((4000, 3000), (320, 240)), ((300, 1000), (96, 320)),
         ((640, 480), (640, 240)), ((200, 300), (150, 300)), ((1001, 999), (321, 320)), ((7, 5), (320, 229)),
         ((1, 1), (3, 2)), ((50, 1), (1, 1)), ((33, 17), (33, 17))]


def _pixels(w, h, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


@pytest.mark.parametrize(("size", "out"), CASES)
def test_integer_tables_give_pillows_pixels_exactly(size, out):
    pixels = _pixels(*size, seed=size[0] * 7 + size[1])
    theirs = np.asarray(Image.fromarray(pixels).resize(out, Image.Resampling.BILINEAR))
    both = size[0] != out[0] and size[1] != out[1]
    order = (pass_order(size, out) or "hv") if both else "hv"
    np.testing.assert_array_equal(resample(pixels, out, order), theirs)


def test_both_pass_orders_are_reproduced():
    """The orders differ in rounding: for each order some size pair matches Pillow in that order only."""
    seen = set()
    for size, out in CASES:
        if size[0] == out[0] or size[1] == out[1] or not pass_order(size, out):
            continue
        order = pass_order(size, out)
        pixels = _pixels(*size, seed=1)
        theirs = np.asarray(Image.fromarray(pixels).resize(out, Image.Resampling.BILINEAR))
        other = "vh" if order == "hv" else "hv"
        assert np.array_equal(resample(pixels, out, order), theirs)
        if not np.array_equal(resample(pixels, out, other), theirs):
            seen.add(order)
    assert seen == {"hv", "vh"}


def test_tables_are_pillows_shape_of_taps():
    taps = coefficients(416, 320)  # shrinking by 1.3: support 1.3, 5 taps
    assert taps.ksize == 5 and taps.weights.dtype == np.int32
    assert (taps.first >= 0).all() and (taps.first + taps.lengths <= 416).all() and (taps.lengths <= taps.ksize).all()
    sums = taps.weights.sum(axis=1)
    assert np.abs(sums - (1 << PRECISION_BITS)).max() <= taps.ksize  # each row rounds to 1.0 within a unit a tap
    for j in range(0, 320, 37):
        assert (taps.weights[j, taps.lengths[j]:] == 0).all()
    same = coefficients(17, 17)
    assert same.ksize == 1 and (same.first == np.arange(17)).all() and (same.weights == 1 << PRECISION_BITS).all()


def test_a_size_below_one_pixel_is_refused():
    with pytest.raises(InputError, match="at least 1 pixel; got 0 -> 5"):
        coefficients(0, 5)


def test_pass_order_is_remembered():
    cached_pass_order.cache_clear()
    first = cached_pass_order((416, 256), (320, 197))
    assert cached_pass_order((416, 256), (320, 197)) == first == pass_order((416, 256), (320, 197))
    assert cached_pass_order.cache_info().hits == 1
