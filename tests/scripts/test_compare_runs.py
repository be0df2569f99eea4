"""scripts/compare_runs.py: two `trtkit run --results` files of detections, paired by class and IoU, or of raw
outputs, compared element by element."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.scripts import script_module
from trtkit.detection.postprocess import Detections
from trtkit.pipeline.sinks import _plain

pytestmark = pytest.mark.bench  # a benchmark harness's test: pytest -m bench


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


def test_raw_outputs_compare_element_by_element_and_by_arg_max(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    rows = {a: [[0.0, 1.0, 0.5], [2.0, 0.0, 0.0]], b: [[0.0, 1.1, 0.5], [0.0, 0.0, 3.0]]}
    for path, logits in rows.items():
        path.write_text("".join(json.dumps({"index": i, "name": f"frame {i}", "result": _plain(
            {"logits": np.array(row, np.float32)})}) + "\n" for i, row in enumerate(logits)))
    with script_module("scripts", "compare_runs") as compare_runs:
        first, second = compare_runs.load(str(a)), compare_runs.load(str(b))
        assert not compare_runs.is_detections(first)
        got = compare_runs.compare_raw(first, second)
    logits = got["outputs"]["logits"]
    assert got["frames"] == [2, 2] and logits["argmax_agree"] == 0.5  # frame 1's top class moved from 0 to 2
    assert logits["max_abs_diff"] == 3.0 and abs(logits["mean_abs_diff"] - 5.1 / 6) < 1e-5
