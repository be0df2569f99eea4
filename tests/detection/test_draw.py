"""Drawing detections with pillow."""

from __future__ import annotations

import numpy as np
from PIL import Image

from trtkit.detection import Detections, draw
from trtkit.detection.draw import class_colour


def test_boxes_are_drawn_in_their_class_colour_on_a_copy():
    image = Image.new("RGB", (100, 80), (0, 0, 0))
    dets = Detections(np.array([[10, 30, 60, 70]], np.float32), np.array([0.87], np.float32),
                      np.array([2], np.int32))
    out = draw(image, dets, ["a", "b", "c"], line_width=2)
    assert out.size == (100, 80) and image.getpixel((10, 50)) == (0, 0, 0)
    assert out.getpixel((10, 50)) == class_colour(2)   # left edge of the box
    assert out.getpixel((35, 50)) == (0, 0, 0)           # inside stays untouched
    assert out.getpixel((12, 25)) != (0, 0, 0)           # the label sits above the box


def test_no_detections_and_unknown_names():
    image = Image.new("L", (20, 20), 7)
    assert draw(image, Detections.empty()).getpixel((5, 5)) == (7, 7, 7)
    dets = Detections(np.array([[0, 0, 10, 10]], np.float32), np.array([0.5], np.float32), np.array([9], np.int32))
    assert draw(image, dets, ["only"]).getpixel((0, 5)) == class_colour(9)
