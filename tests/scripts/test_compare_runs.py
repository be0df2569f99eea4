"""scripts/compare_runs.py: two `trtkit run --results` files of detections, paired by class and IoU."""

from __future__ import annotations

import json

import numpy as np

from tests.scripts import script_module
from trtkit.detection.postprocess import Detections
from trtkit.pipeline.sinks import _plain


def _write(path, frames):
    with open(path, "w") as f:
        for i, (boxes, classes) in enumerate(frames):
            found = Detections(np.array(boxes, np.float32).reshape(-1, 4), np.ones(len(classes), np.float32),
                               np.array(classes, np.int32))
            f.write(json.dumps({"index": i, "name": f"frame {i}", "result": _plain(found)}) + "\n")
    return str(path)


def test_boxes_pair_by_class_and_iou_and_the_rest_are_counted(tmp_path):
    a = _write(tmp_path / "a.jsonl", [([[0, 0, 10, 10], [20, 20, 30, 30]], [1, 2]), ([], [])])
    b = _write(tmp_path / "b.jsonl", [([[0, 0, 10, 11], [20, 20, 30, 30]], [1, 3]), ([[5, 5, 9, 9]], [0])])
    with script_module("scripts", "compare_runs") as compare_runs:
        got = compare_runs.compare(compare_runs.load(a), compare_runs.load(b))
    # frame 0: class 1 pairs (IoU 100/110), class 2 and class 3 do not; frame 1: one box only in b
    assert got == {"frames": [2, 2], "boxes": [2, 3], "paired": 1, "unpaired": 3, "min_iou": 0.9091,
                   "mean_iou": 0.9091}
