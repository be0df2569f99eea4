"""`trtkit eval classification`: top-1/top-5 on a labelled folder."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from PIL import Image

from calibrators.preprocess import Preprocess
from tests import models
from trtkit.cli.main import main
from trtkit.errors import InputError
from trtkit.eval.classification import evaluate_classification, labelled_images, topk_hits
from trtkit.eval.models import Model


def channel_mean_classifier():
    """images (N, 3, 8, 8) → logits (N, 3): the mean of each channel, so a red image is class 0."""
    nodes = [helper.make_node("GlobalAveragePool", ["images"], ["p"]), helper.make_node("Flatten", ["p"], ["logits"])]
    return models._model(nodes, [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, 8, 8])],
                         [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])])


@pytest.fixture
def labelled(tmp_path):
    colours = {"a_red": (255, 0, 0), "b_green": (0, 255, 0), "c_blue": (0, 0, 255)}
    for name, colour in colours.items():
        (tmp_path / "images" / name).mkdir(parents=True)
        for i in range(2):
            Image.new("RGB", (12, 10), colour).save(tmp_path / "images" / name / f"{i}.png")
    onnx.save(channel_mean_classifier(), tmp_path / "cls.onnx")
    return tmp_path


def test_topk_hits():
    logits = np.array([[0.1, 0.7, 0.2], [0.5, 0.3, 0.2]])
    assert topk_hits(logits, np.array([2, 2]), 1).tolist() == [False, False]
    assert topk_hits(logits, np.array([2, 2]), 2).tolist() == [True, False]
    assert topk_hits(logits, np.array([2, 2]), 5).tolist() == [True, True]


def test_classification_onnx_row_and_an_engine_like_row(labelled):
    result = evaluate_classification(labelled / "cls.onnx", labelled / "images")
    assert result.classes == ["a_red", "b_green", "c_blue"] and result.images == 6
    assert (result.rows[0].name, result.rows[0].top1, result.rows[0].top5) == ("onnx", 100.0, 100.0)

    def always_class_0(feed):
        return {"logits": np.tile([[1.0, 0.5, 0.0]], (len(feed["images"]), 1))}

    model = Model(always_class_0, "images", ("N", 3, 8, 8), 4)
    result = evaluate_classification(model, labelled / "images", reference=labelled / "cls.onnx")
    row, ref = result.rows
    assert row.top1 == pytest.approx(100 / 3, abs=0.01) and row.top5 == 100.0
    assert row.agreement == pytest.approx(100 / 3, abs=0.01) and ref.name == "onnx"


def test_classification_preprocess_and_skipped(labelled):
    (labelled / "images" / "a_red" / "bad.jpg").write_bytes(b"x")
    result = evaluate_classification(labelled / "cls.onnx", labelled / "images",
                                     preprocess=Preprocess(color="BGR"))
    assert result.rows[0].top1 == pytest.approx(100 / 3, abs=0.01)  # red and blue swap places
    assert len(result.skipped) == 1 and result.images == 6


def test_classification_folder_errors(tmp_path):
    with pytest.raises(InputError, match="no class sub-folders"):
        labelled_images(tmp_path)
    (tmp_path / "a").mkdir()
    with pytest.raises(InputError, match="hold no image file"):
        labelled_images(tmp_path)


def test_classification_cli_gate(labelled, capsys):
    args = ["eval", "classification", str(labelled / "cls.onnx"), "--images", str(labelled / "images")]
    assert main(args + ["--min-top1", "99"]) == 0
    assert "top-1" in capsys.readouterr().out
    assert main(args + ["--preprocess", "color=BGR", "--min-top1", "99", "--json", "-"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["passed"] is False and out["classes"] == ["a_red", "b_green", "c_blue"]


def test_coco_metric_needs_annotations(tmp_path, capsys):
    assert main(["eval", "detection", "m.onnx", "--images", str(tmp_path)]) == 1
    assert "--coco val.json" in capsys.readouterr().err
