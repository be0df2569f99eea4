"""The output layouts: each decoder on made-up arrays whose boxes are known, and which layout the outputs have."""

from __future__ import annotations

import numpy as np
import pytest

from tests import models
from trtkit.detection import LAYOUTS, LayoutError, add_nms, detections_from_outputs, find_layout
from trtkit.errors import InputError, ModelError, UsageError

SIZE = (40, 80)  # (H, W) of the input the DETR boxes are relative to


def logit(p):
    return np.log(p / (1 - p))


def test_a_yolov8_head_decodes_through_the_registry():
    head = np.zeros((1, 6, 3), np.float32)  # 2 classes, 3 anchors
    head[0, :, 0] = [10, 10, 4, 4, 0.1, 0.9]
    (det,) = detections_from_outputs({"output0": head}, conf_threshold=0.5)
    np.testing.assert_allclose(det.boxes, [[8, 8, 12, 12]])
    assert det.classes.tolist() == [1]


def test_yolov5_scores_are_objectness_times_class_score():
    rows = np.array([[[10, 10, 4, 4, 0.9, 0.2, 0.8],     # class 1 scores 0.72
                      [10.5, 10, 4, 4, 0.8, 0.1, 0.7],   # overlaps it, same class: suppressed
                      [30, 20, 6, 2, 0.5, 0.9, 0.1],     # class 0 scores 0.45: below 0.5
                      [50, 50, 4, 4, 0.3, 1.0, 1.0]]],   # objectness below the threshold
                    np.float32)
    (det,) = find_layout({"output0": rows.shape}, "yolov5").decode({"output0": rows}, conf_threshold=0.4)
    np.testing.assert_allclose(det.scores, [0.72, 0.45], rtol=1e-6)
    assert det.classes.tolist() == [1, 0]
    np.testing.assert_allclose(det.boxes, [[8, 8, 12, 12], [27, 19, 33, 21]])
    assert len(detections_from_outputs({"output0": rows}, head="yolov5", conf_threshold=0.5)[0]) == 1


def test_rf_detr_outputs_are_a_sigmoid_top_k_of_normalized_centre_boxes():
    dets = np.array([[[0.5, 0.5, 0.25, 0.5], [0.25, 0.25, 0.1, 0.1], [0.9, 0.9, 0.1, 0.1]]], np.float32)
    labels = np.full((1, 3, 4), logit(0.01), np.float32)  # 3 queries, 4 classes
    labels[0, 0, 2], labels[0, 0, 3], labels[0, 1, 0] = logit(0.9), logit(0.6), logit(0.8)
    (det,) = detections_from_outputs({"dets": dets, "labels": labels}, SIZE, conf_threshold=0.5)
    np.testing.assert_allclose(det.scores, [0.9, 0.8, 0.6], rtol=1e-5)
    assert det.classes.tolist() == [2, 0, 3]  # one query may give two detections, as RF-DETR's top-k over pairs
    np.testing.assert_allclose(det.boxes, [[30, 10, 50, 30], [16, 8, 24, 12], [30, 10, 50, 30]], atol=1e-4)
    (best,) = detections_from_outputs({"dets": dets, "labels": labels}, SIZE, conf_threshold=0.5, max_detections=1)
    assert best.classes.tolist() == [2]


def test_detr_drops_the_no_object_class():
    boxes = np.array([[[0.5, 0.5, 0.5, 0.5], [0.25, 0.5, 0.5, 1.0]]], np.float32)
    logits = np.array([[[4.0, 0.0, 0.0], [0.0, 1.0, 6.0]]], np.float32)  # 2 classes + no-object
    (det,) = find_layout({"logits": logits, "pred_boxes": boxes}, "detr-softmax").decode(
        {"logits": logits, "pred_boxes": boxes}, SIZE, conf_threshold=0.5)
    assert det.classes.tolist() == [0] and det.scores[0] == pytest.approx(np.exp(4) / (np.exp(4) + 2))
    np.testing.assert_allclose(det.boxes, [[20, 10, 60, 30]])
    # the second query is "no object" above all: with every threshold it gives at most its class 1 score
    (low,) = detections_from_outputs({"logits": logits, "pred_boxes": boxes}, SIZE, head="detr-softmax",
                                     conf_threshold=0.0)
    assert low.classes.tolist() == [0, 1] and low.scores[1] < 0.01


def test_detr_boxes_need_the_input_size():
    with pytest.raises(LayoutError, match=r"relative to the input: pass its size=\(height, width\)"):
        detections_from_outputs({"dets": np.zeros((1, 2, 4)), "labels": np.zeros((1, 2, 3))})


@pytest.mark.parametrize("names", [("num_dets", "boxes", "scores", "classes"),
                                   ("num_dets", "det_boxes", "det_scores", "det_classes")])
def test_efficient_nms_outputs_by_either_naming(names):
    num = np.array([[1], [0]], np.int32)
    boxes = np.arange(2 * 2 * 4, dtype=np.float32).reshape(2, 2, 4)
    outputs = dict(zip(names, (num, boxes, np.full((2, 2), 0.7, np.float32), np.ones((2, 2), np.int32))))
    assert find_layout(outputs).layout == "efficient-nms"
    first, second = detections_from_outputs(outputs)
    np.testing.assert_array_equal(first.boxes, boxes[0, :1])
    assert first.classes.tolist() == [1] and len(second) == 0


@pytest.mark.parametrize("outputs, layout, classes", [
    ({"output0": (-1, 84, 8400)}, "yolov8", 80),
    ({"output0": (1, 84, -1)}, "yolov8", 80),        # anchors unknown (dynamic height and width)
    ({"output0": (1, 6, 16)}, "yolov8", 2),          # also (16 anchors... as YOLOv5): the longer axis is the anchors
    ({"output0": (-1, 25200, 85)}, "yolov5", 80),
    ({"dets": (-1, 300, 4), "labels": (-1, 300, 91)}, "detr-sigmoid", 91),  # RF-DETR's names: not DETR's softmax
    ({"labels": (1, 300, 3), "dets": (1, 300, 4), "masks": (1, 300, 78, 78)}, "detr-sigmoid", 3),
    ({"num_dets": (-1, 1), "boxes": (-1, 100, 4), "scores": (-1, 100), "classes": (-1, 100)}, "efficient-nms", None),
])
def test_the_layout_is_found_where_the_outputs_fit_one(outputs, layout, classes):
    found = find_layout(outputs)
    assert (found.layout, found.classes) == (layout, classes)


def test_engine_output_specs_are_read_by_name_and_shape():
    from trtkit.runtime.engine import TensorSpec

    specs = [TensorSpec("dets", False, np.dtype(np.float32), (-1, 300, 4)),
             TensorSpec("labels", False, np.dtype(np.float32), (-1, 300, 80))]
    assert find_layout(specs).outputs == {"boxes": "dets", "logits": "labels"}


def test_rt_detr_and_detr_outputs_fit_both_detr_layouts_and_one_is_asked_for():
    outputs = {"logits": (1, 300, 80), "pred_boxes": (1, 300, 4)}
    with pytest.raises(LayoutError, match=r"^The outputs 'logits' \(1, 300, 80\), 'pred_boxes' \(1, 300, 4\) fit "
                                          r"detr-sigmoid \(.*RT-DETR\) and detr-softmax \(.*DETR\); choose one "
                                          r"with head='detr-sigmoid' or head='detr-softmax'$") as raised:
        find_layout(outputs)
    assert raised.value.field == "head" and isinstance(raised.value, UsageError)
    assert find_layout(outputs, "detr-sigmoid").classes == 80 and find_layout(outputs, "detr-softmax").classes == 79
    with pytest.raises(LayoutError, match=r"fit yolov8 .* and yolov5 .*; choose one with head='yolov8' or head="):
        find_layout({"output0": (1, 90, 90)})


def test_outputs_that_fit_nothing_are_named_with_the_layouts_known():
    with pytest.raises(LayoutError) as raised:
        find_layout({"probs": (1, 1000), "features": (1, 512, 7, 7)})
    message = str(raised.value)
    assert message.startswith("The outputs 'probs' (1, 1000), 'features' (1, 512, 7, 7) fit no known detector layout")
    assert all(f"{name}: " in message for name in LAYOUTS) and "\n" not in message
    assert isinstance(raised.value, InputError)


def test_an_unknown_or_unfitting_head_is_refused():
    with pytest.raises(LayoutError, match=r"^head='yolo' is not a known layout; use one of: yolov8, yolov5, "
                                          r"detr-sigmoid, detr-softmax, efficient-nms$"):
        find_layout({"output0": (1, 84, 8400)}, "yolo")
    with pytest.raises(LayoutError, match=r"'output0' \(1, 84, 8400\) do not fit head='detr-sigmoid': boxes \(N"):
        find_layout({"output0": (1, 84, 8400)}, "detr-sigmoid")


def test_unknown_dims_may_wait_for_the_first_outputs():
    assert find_layout({"output0": (-1, -1, -1)}, unknown_ok=True) is None
    assert find_layout({"output0": ("N", 84, "anchors")}, unknown_ok=True).layout == "yolov8"
    with pytest.raises(LayoutError, match="fit no known detector layout"):
        find_layout({"output0": (-1, -1, -1)})
    with pytest.raises(LayoutError, match="not a known layout"):
        find_layout({"output0": (-1, -1, -1)}, "yolo", unknown_ok=True)


@pytest.mark.parametrize("names", [("dets", "labels"), ("pred_boxes", "logits")])
def test_add_nms_refuses_detr_outputs_which_need_none(names):
    model = models.constant_outputs({names[0]: np.zeros((1, 5, 4)), names[1]: np.zeros((1, 5, 3))})
    with pytest.raises(ModelError, match=r"add_nms applies to YOLO heads; outputs .* are DETR-family boxes and class "
                                         r"logits per query \(detr-sigmoid.*\), which need no NMS") as raised:
        add_nms(model)
    assert raised.value.field == "add_nms"


def test_add_nms_keeps_the_models_metadata():
    model = models.constant_detector(np.zeros((1, 6, 10), np.float32))
    model.metadata_props.add(key="names", value="{0: 'a', 1: 'b'}")
    assert {p.key: p.value for p in add_nms(model).metadata_props} == {"names": "{0: 'a', 1: 'b'}"}
