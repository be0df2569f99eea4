"""SplitResize: Pillow's bilinear resize cut into bands over threads gives the pixels of one ``resize`` call."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from trtkit.detection import Letterbox
from trtkit.detection.resize import SplitResize, pass_order
from trtkit.errors import UsageError

# (input width, height) -> (output width, height): down and up, wide and tall, one side kept, odd sizes
CASES = [((416, 256), (320, 197)), ((149, 469), (102, 320)), ((256, 256), (320, 320)), ((1280, 720), (320, 180)),
         ((300, 1000), (96, 320)), ((640, 480), (640, 240)), ((200, 300), (150, 300)), ((1001, 999), (321, 320))]


def _image(size, seed=0):
    w, h = size
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8))


@pytest.mark.parametrize("threads", [2, 3, 8])
def test_bands_over_threads_give_the_pixels_of_one_resize_call(threads):
    split = SplitResize(threads)
    try:
        for (size, out_size) in CASES:
            image = _image(size, seed=len(size) + out_size[0])
            ours = np.full((out_size[1], out_size[0], 3), 7, np.uint8)
            split.into(image, out_size, ours)
            np.testing.assert_array_equal(ours, np.asarray(image.resize(out_size, Image.Resampling.BILINEAR)),
                                          err_msg=f"{size} -> {out_size}")
    finally:
        split.close()


def test_both_pass_orders_occur_and_are_found():
    orders = {pass_order(size, out) for size, out in CASES if size[0] != out[0] and size[1] != out[1]}
    assert orders <= {"hv", "vh", ""} and len(orders - {""}) >= 1


def test_the_threaded_letterbox_is_the_one_thread_letterbox():
    rng = np.random.default_rng(3)
    images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in ((480, 640), (700, 300), (320, 320))]
    one, _ = Letterbox((320, 320), dtype=np.uint8, layout="NHWC")(images)
    threaded = Letterbox((320, 320), dtype=np.uint8, layout="NHWC", threads=4)
    try:
        np.testing.assert_array_equal(threaded(images)[0], one)
        assert threaded.threads == 4
    finally:
        threaded.close()


def test_threads_must_be_a_positive_int():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(UsageError, match="threads must be an int of at least 1"):
            SplitResize(bad)
