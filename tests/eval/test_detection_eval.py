"""`trtkit eval detection` on a tiny generated set whose right answer is known, through the ONNX path."""

from __future__ import annotations

import io
import json
import sys

import numpy as np
import onnx
import pytest
from PIL import Image

from tests import models
from trtkit.cli.main import main
from trtkit.cli.render import make_console
from trtkit.detection import letterbox_meta
from trtkit.errors import DependencyError, InputError
from trtkit.eval.coco import evaluate_coco
from trtkit.eval.detection import DecodeSettings, DetectionEval, evaluate_detection
from trtkit.eval.models import Model

SIZE = 32
# two anchors: a box of class 1 and a box of class 0, in input pixels (cx, cy, w, h), scores after them
HEAD = np.array([[[8, 20], [8, 16], [8, 6], [8, 10], [0.1, 0.9], [0.95, 0.2]]], np.float32)
IMAGE_SIZES = [(64, 48), (32, 32), (40, 80)]


def truth_for(width, height):
    """The head's detections mapped back into a width x height image, as COCO boxes."""
    meta = letterbox_meta(width, height, (SIZE, SIZE))
    xyxy = meta.to_original(np.array([[4, 4, 12, 12], [17, 11, 23, 21]], np.float32))
    return [(1, [*xyxy[0, :2], *(xyxy[0, 2:] - xyxy[0, :2])]), (0, [*xyxy[1, :2], *(xyxy[1, 2:] - xyxy[1, :2])])]


@pytest.fixture
def dataset(tmp_path):
    images, annotations = [], []
    folder = tmp_path / "val"
    folder.mkdir()
    for i, (w, h) in enumerate(IMAGE_SIZES):
        Image.new("RGB", (w, h), (i * 40, 90, 20)).save(folder / f"{i}.png")
        images.append({"id": 10 + i, "file_name": f"{i}.png", "width": w, "height": h})
        for cls, box in truth_for(w, h):
            box = [float(v) for v in box]
            annotations.append({"id": len(annotations) + 1, "image_id": 10 + i, "category_id": [5, 7][cls],
                                "bbox": box, "area": box[2] * box[3], "iscrowd": 0})
    coco = {"images": images, "annotations": annotations,
            "categories": [{"id": 7, "name": "b"}, {"id": 5, "name": "a"}]}
    (tmp_path / "val.json").write_text(json.dumps(coco))
    onnx.save(models.constant_detector(HEAD, size=SIZE), tmp_path / "det.onnx")
    return tmp_path


def test_the_onnx_model_scores_100_when_boxes_map_back_exactly(dataset):
    result = evaluate_detection(dataset / "det.onnx", dataset / "val", dataset / "val.json", batch=2)
    (row,) = result.rows
    assert row.name == "onnx" and result.images == 3
    assert row.metrics.map == pytest.approx(100.0) and row.metrics.map50 == pytest.approx(100.0)
    assert row.metrics.detections == 6
    assert DetectionEval.from_json(json.loads(json.dumps(result.to_json()))).to_json() == result.to_json()


def test_a_model_callable_and_the_reference_row(dataset):
    def shifted(feed):
        out = np.repeat(HEAD, len(feed["images"]), axis=0).copy()
        out[:, 0] += 3.0  # every box 3 input pixels to the right: worse, but not zero
        return {"output0": out}

    model = Model(shifted, "images", ("N", 3, SIZE, SIZE), 8)
    result = evaluate_detection(model, dataset / "val", dataset / "val.json", reference=dataset / "det.onnx")
    assert [r.name for r in result.rows] == ["model", "onnx"]
    assert 0 < result.row("model").metrics.map < result.row("onnx").metrics.map == pytest.approx(100.0)


def test_unreadable_images_are_named_skipped_and_counted(dataset):
    (dataset / "val" / "1.png").write_bytes(b"broken")
    result = evaluate_detection(dataset / "det.onnx", dataset / "val", dataset / "val.json")
    assert result.images == 2
    assert [f.endswith("1.png") for f, _ in result.skipped] == [True]
    assert result.rows[0].metrics.map == pytest.approx(100.0)  # scored on the images read


def test_coco_file_that_does_not_match_the_folder_lists_some_names(dataset):
    for i in range(7):
        Image.new("RGB", (8, 8)).save(dataset / "val" / f"extra{i}.png")
    with pytest.raises(InputError, match=r"7 images in the folder have no entry .*extra0.png, .*extra4.png, \.\.\."):
        evaluate_detection(dataset / "det.onnx", dataset / "val", dataset / "val.json")
    for i in range(7):
        (dataset / "val" / f"extra{i}.png").unlink()
    (dataset / "val" / "2.png").unlink()
    with pytest.raises(InputError, match=r"1 images of the COCO file are not in the folder .*: 2.png"):
        evaluate_detection(dataset / "det.onnx", dataset / "val", dataset / "val.json")


def test_class_without_category_is_an_error(dataset):
    coco = json.loads((dataset / "val.json").read_text())
    coco["categories"] = coco["categories"][:1]
    with pytest.raises(InputError, match="Class index 1 has no COCO category"):
        evaluate_detection(dataset / "det.onnx", dataset / "val", coco)


def test_missing_pycocotools_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pycocotools", None)
    monkeypatch.setitem(sys.modules, "pycocotools.coco", None)
    with pytest.raises(DependencyError, match=r"trtkit\[eval\]"):
        evaluate_coco({"images": [], "annotations": [], "categories": []}, [{"image_id": 1}])


def test_decode_settings_reach_the_decode(dataset):
    result = evaluate_detection(dataset / "det.onnx", dataset / "val", dataset / "val.json",
                                decode=DecodeSettings(conf_threshold=0.92))
    assert result.rows[0].metrics.detections == 3  # only the 0.95 box of each image


def test_cli_json_table_and_min_map_gate(dataset, capsys):
    args = ["eval", "detection", str(dataset / "det.onnx"), "--images", str(dataset / "val"), "--coco",
            str(dataset / "val.json")]
    assert main(args + ["--json", str(dataset / "out.json"), "--min-map", "99"]) == 0
    data = json.loads((dataset / "out.json").read_text())
    assert data["passed"] is True and data["rows"][0]["map"] == pytest.approx(100.0)
    assert "mAP@" in capsys.readouterr().out
    assert main(args + ["--conf", "0.92", "--min-map", "99.5", "--json", "-"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["passed"] is False and out["rows"][0]["map"] < 99.5


def test_cli_table_renders(dataset):
    from trtkit.cli.eval import detection_table

    result = evaluate_detection(dataset / "det.onnx", dataset / "val", dataset / "val.json")
    console = make_console(file=io.StringIO(), width=140)
    console.print(detection_table(result))
    text = console.file.getvalue()
    assert "mAP@[.5:.95]" in text and "onnx" in text and "100" in text


def test_cli_help_runs(capsys):
    assert main(["eval", "detection", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--min-map" in out and "yolov8, yolov5, detr-sigmoid, detr-softmax, efficient-nms" in " ".join(out.split())


def test_without_onnxruntime_the_reference_evaluator_runs_and_says_it_is_slow(dataset, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    result = evaluate_detection(dataset / "det.onnx", dataset / "val", dataset / "val.json")
    assert result.rows[0].model.endswith("(onnx-reference)") and result.rows[0].metrics.map == pytest.approx(100.0)
    assert "reference evaluator, which is slow" in caplog.text and "trtkit[eval]" in caplog.text


def rt_detr_like(path, names=("pred_boxes", "logits"), no_object=None):
    """HEAD's two boxes as DETR-family outputs (transformers' names): relative centre boxes and class logits; with
    ``no_object``, a third logit slot of that value (RF-DETR's slot past the classes)."""
    boxes = (HEAD[0, :4].T / SIZE)[None]
    logits = np.full((1, 2, 2 if no_object is None else 3), -10.0, np.float32)
    logits[0, 0, 1], logits[0, 1, 0] = np.log(0.9 / 0.1), np.log(0.95 / 0.05)
    logits[0, :, 2:] = no_object if no_object is not None else 0.0
    onnx.save(models.constant_outputs(dict(zip(names, (boxes, logits))), size=SIZE), path)
    return path


def test_a_detr_family_model_scores_100_with_its_layout_named(dataset):
    model = rt_detr_like(dataset / "rtdetr.onnx")
    result = evaluate_detection(model, dataset / "val", dataset / "val.json", head="detr-sigmoid")
    assert result.rows[0].metrics.map == pytest.approx(100.0) and result.rows[0].metrics.detections == 6
    with pytest.raises(InputError, match="fit detr-sigmoid .* and detr-softmax"):
        evaluate_detection(model, dataset / "val", dataset / "val.json")


def test_rf_detrs_slot_past_the_classes_is_left_out(dataset):
    # RF-DETR's labels have one slot more than its classes ("no object"): a score there is no detection
    model = rt_detr_like(dataset / "rfdetr.onnx", ("dets", "labels"), no_object=0.0)  # scores 0.5 in that slot
    result = evaluate_detection(model, dataset / "val", dataset / "val.json")
    assert result.rows[0].metrics.map == pytest.approx(100.0) and result.rows[0].metrics.detections == 6
    with pytest.raises(InputError, match="Class index 2 has no COCO category"):  # two slots more: a mismatch
        evaluate_detection(model, dataset / "val", {**json.loads((dataset / "val.json").read_text()),
                                                     "categories": [{"id": 7, "name": "b"}]})


def test_cli_head_unknown_or_needed_is_a_usage_error(dataset, capsys):
    model = rt_detr_like(dataset / "rtdetr.onnx")
    args = ["eval", "detection", str(model), "--images", str(dataset / "val"), "--coco", str(dataset / "val.json")]
    assert main(args + ["--head", "rf-detr"]) == 2
    assert "error: --head='rf-detr' is not a known layout; use one of: yolov8, yolov5" in capsys.readouterr().err
    assert main(args) == 2
    assert "choose one with --head='detr-sigmoid' or --head='detr-softmax'" in capsys.readouterr().err
    assert main(args + ["--head", "detr-sigmoid", "--min-map", "99"]) == 0
