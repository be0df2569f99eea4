"""Head decode, class-aware NMS and the EfficientNMS outputs, on hand-made cases."""

from __future__ import annotations

import numpy as np
import pytest

from trtkit.detection import (
    Detections,
    box_iou,
    decode,
    from_efficient_nms,
    letterbox_meta,
    nms,
    xywh_to_xyxy,
)
from trtkit.errors import InputError


def head(rows):
    """(1, 4 + C, A) from a list of anchors, each (cx, cy, w, h, score_0, ..., score_C-1)."""
    return np.asarray(rows, np.float32).T[None]


def test_xywh_to_xyxy_and_iou():
    boxes = xywh_to_xyxy(np.array([[10, 10, 4, 2]], np.float32))
    np.testing.assert_allclose(boxes, [[8, 9, 12, 11]])
    iou = box_iou(np.array([0, 0, 2, 2.0]), np.array([[1, 0, 3, 2.0], [5, 5, 6, 6], [0, 0, 2, 2]]))
    np.testing.assert_allclose(iou, [1 / 3, 0, 1])


def test_nms_drops_the_weaker_overlapping_box_of_a_class():
    boxes = np.array([[0, 0, 10, 10], [1, 0, 11, 10], [20, 20, 30, 30]], np.float32)
    keep = nms(boxes, np.array([0.8, 0.9, 0.5]), 0.5)
    assert keep.tolist() == [1, 2]


def test_nms_is_class_aware():
    boxes = np.array([[0, 0, 10, 10], [1, 0, 11, 10]], np.float32)
    assert nms(boxes, np.array([0.8, 0.9]), 0.5, classes=np.array([0, 1])).tolist() == [1, 0]
    assert nms(boxes, np.array([0.8, 0.9]), 0.5, classes=np.array([1, 1])).tolist() == [1]
    assert nms(boxes, np.array([0.8, 0.9]), 0.5, max_output=1).tolist() == [1]


def test_nms_threshold_is_exclusive():
    boxes = np.array([[0, 0, 2, 2], [1, 0, 3, 2]], np.float32)  # IoU 1/3
    assert len(nms(boxes, np.array([0.9, 0.8]), 1 / 3 + 1e-6)) == 2
    assert len(nms(boxes, np.array([0.9, 0.8]), 0.3)) == 1


def test_decode_thresholds_suppresses_and_keeps_best_class():
    out = head([
        (10, 10, 4, 4, 0.9, 0.1),   # class 0
        (10.5, 10, 4, 4, 0.7, 0.2),  # overlaps the first, same class: suppressed
        (30, 30, 6, 2, 0.1, 0.6),   # class 1
        (50, 50, 4, 4, 0.2, 0.1),   # below the threshold
    ])
    (det,) = decode(out, conf_threshold=0.25, iou_threshold=0.5)
    np.testing.assert_allclose(det.boxes, [[8, 8, 12, 12], [27, 29, 33, 31]])
    np.testing.assert_allclose(det.scores, [0.9, 0.6])
    assert det.classes.tolist() == [0, 1] and det.classes.dtype == np.int32


def test_decode_multi_label_keeps_every_class_above_threshold():
    out = head([(10, 10, 4, 4, 0.9, 0.8)])
    assert len(decode(out, conf_threshold=0.25)[0]) == 1
    det = decode(out, conf_threshold=0.25, multi_label=True)[0]
    assert det.classes.tolist() == [0, 1]


def test_decode_per_image_and_max_detections():
    out = np.concatenate([head([(5, 5, 2, 2, 0.9), (20, 20, 2, 2, 0.8), (40, 40, 2, 2, 0.7)]),
                          head([(5, 5, 2, 2, 0.1), (20, 20, 2, 2, 0.1), (40, 40, 2, 2, 0.1)])])
    first, second = decode(out, conf_threshold=0.25, max_detections=2)
    assert len(first) == 2 and len(second) == 0
    assert second.boxes.shape == (0, 4)


def test_decode_refuses_other_layouts_saying_what_it_found():
    with pytest.raises(InputError, match=r"shape \(1, 84\) is not the YOLOv8 head layout"):
        decode(np.zeros((1, 84), np.float32))
    with pytest.raises(InputError, match=r"looks like \(N, anchors, 4 \+ classes\)"):
        decode(np.zeros((1, 8400, 84), np.float32))


def test_efficient_nms_outputs_become_detections():
    num = np.array([[2], [0]], np.int32)
    boxes = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    scores = np.array([[0.9, 0.5, 0], [0, 0, 0]], np.float32)
    classes = np.array([[3, 1, 0], [0, 0, 0]], np.int32)
    first, second = from_efficient_nms(num, boxes, scores, classes)
    np.testing.assert_array_equal(first.boxes, boxes[0, :2])
    assert first.classes.tolist() == [3, 1] and len(second) == 0


def test_mapped_detections_are_in_original_pixels():
    det = Detections(np.array([[0, 40, 320, 280]], np.float32), np.array([0.9], np.float32), np.array([0], np.int32))
    mapped = det.mapped(letterbox_meta(640, 480, (320, 320)))
    np.testing.assert_allclose(mapped.boxes, [[0, 0, 640, 480]])
    assert mapped.scores is det.scores


def _greedy_nms(boxes, scores, threshold, classes, limit):
    """The textbook loop (one IoU pass per kept box), the reference for the vectorized :func:`nms`."""
    boxes = np.asarray(boxes, np.float32)
    span = float(boxes.max() - min(boxes.min(), 0.0)) + 1.0
    boxes = boxes + (classes.astype(np.float32) * span)[:, None]
    order, keep = np.argsort(-scores, kind="stable"), []
    while order.size and len(keep) < limit:
        best, order = order[0], order[1:]
        keep.append(best)
        order = order[box_iou(boxes[best], boxes[order]) <= threshold]
    return np.asarray(keep, np.int64)


def _crowded_head(rng, anchors=400, classes=3):
    """Many overlapping boxes of a few classes, scores from 0 to 1: every branch of the decode and NMS."""
    rows = np.empty((anchors, 4 + classes), np.float32)
    rows[:, :2] = rng.uniform(20, 80, (anchors, 2))
    rows[:, 2:4] = rng.uniform(4, 40, (anchors, 2))
    rows[:, 4:] = rng.random((anchors, classes))
    return rows.T[None]


@pytest.mark.parametrize("seed", range(5))
def test_vectorized_nms_keeps_what_the_greedy_loop_keeps(seed):
    rng = np.random.default_rng(seed)
    boxes = xywh_to_xyxy(_crowded_head(rng)[0, :4].T)
    scores = rng.random(len(boxes)).astype(np.float32)
    classes = rng.integers(0, 3, len(boxes))
    for threshold, limit in ((0.45, 300), (0.2, 5), (0.7, 1)):
        np.testing.assert_array_equal(nms(boxes, scores, threshold, classes=classes, max_output=limit),
                                      _greedy_nms(boxes, scores, threshold, classes, limit))
    assert nms(boxes[:0], scores[:0], 0.5).size == 0 and nms(boxes, scores, 0.5, max_output=0).size == 0


def _decode_all_anchors(output, conf, iou, max_det):
    """The decode as it was: boxes and class argmax over every anchor, then the score filter."""
    boxes_all = xywh_to_xyxy(output[:, :4].transpose(0, 2, 1))
    best = output[:, 4:].argmax(1)
    best_scores = np.take_along_axis(output[:, 4:], best[:, None], 1)[:, 0]
    out = []
    for i in range(output.shape[0]):
        anchor = np.nonzero(best_scores[i] > conf)[0]
        cls, scores, boxes = best[i, anchor], best_scores[i, anchor], boxes_all[i, anchor]
        keep = _greedy_nms(boxes, scores, iou, cls, max_det) if len(anchor) else np.zeros(0, np.int64)
        out.append((boxes[keep], scores[keep], cls[keep]))
    return out


def test_decode_filters_first_and_finds_what_decoding_every_anchor_finds():
    rng = np.random.default_rng(7)
    output = np.concatenate([_crowded_head(rng) for _ in range(3)])
    for conf, iou, max_det in ((0.25, 0.45, 100), (0.9, 0.5, 100), (0.05, 0.3, 4), (1.0, 0.5, 100)):
        for det, (boxes, scores, cls) in zip(decode(output, conf, iou, max_det),
                                             _decode_all_anchors(output, conf, iou, max_det)):
            np.testing.assert_array_equal(det.boxes, boxes)
            np.testing.assert_array_equal(det.scores, scores)
            np.testing.assert_array_equal(det.classes, cls)


def test_plugin_detections_are_copies_of_the_outputs():
    boxes, scores = np.ones((1, 2, 4), np.float32), np.ones((1, 2), np.float32)
    classes = np.zeros((1, 2), np.int32)
    (det,) = from_efficient_nms(np.array([[2]], np.int32), boxes, scores, classes)
    boxes[:], scores[:], classes[:] = 0, 0, 5  # a runner's buffers, refilled by its next call
    assert det.boxes.min() == 1 and det.scores.min() == 1 and det.classes.max() == 0
