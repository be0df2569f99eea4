"""scripts/train_seed_models.py end to end on a tiny shapes set, on the CPU, in a subprocess (the script refuses every
network connection for its whole process). Needs torch and the seed wheels (ultralytics, rfdetr) importable."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

from tests.scripts import REPO

pytestmark = [
    pytest.mark.bench,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (the GPU host's Python)"),
]
CLASSES = ["ellipse", "rectangle", "triangle", "star", "cross", "ring", "hexagon", "arrow"]


def _needs(module: str):
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"needs {module} (scripts/seed_wheels.txt, installed on PYTHONPATH)")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("shapes")
    subprocess.run([sys.executable, str(REPO / "scripts/make_detection_data.py"), str(out), "--train", "4", "--val",
                    "2", "--workers", "1"], check=True)
    return out


def _train(data, tmp_path, *options):
    out, work = tmp_path / "out", tmp_path / "work"
    done = subprocess.run([sys.executable, str(REPO / "scripts/train_seed_models.py"), str(data), str(out),
                           "--epochs", "1", "--device", "cpu", "--workers", "0", "--batch", "2", "--keep-work",
                           "--work", str(work), *options], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out, work


def test_yolov8n_trains_and_exports(data, tmp_path):
    _needs("ultralytics")
    out, work = _train(data, tmp_path, "--models", "yolov8n", "--imgsz", "64")
    info = json.loads((out / "yolov8n-trained.json").read_text())
    assert (out / "yolov8n-trained.onnx").exists() and info["network_tries"] == []
    assert info["epochs"] == 1 and info["images"] == {"train": 4, "val": 2}
    assert "metrics/mAP50-95(B)" in info["val_metric"]
    assert info["ort_shapes"]["output0"][1] == 4 + len(CLASSES)
    (dataset,) = work.glob("train-yolov8n-*/dataset")
    assert f"  7: {CLASSES[7]}" in (dataset / "data.yaml").read_text()
    coco = json.loads((data / "train.json").read_text())
    lines = [line.split() for f in (dataset / "labels/train").glob("*.txt") for line in f.read_text().splitlines()]
    assert sorted(int(row[0]) + 1 for row in lines) == sorted(a["category_id"] for a in coco["annotations"])


def test_rfdetr_nano_trains_and_exports(data, tmp_path):
    _needs("rfdetr")
    out, work = _train(data, tmp_path, "--models", "rfdetr-nano", "--rfdetr-resolution", "128")
    info = json.loads((out / "rfdetr-nano-trained.json").read_text())
    assert (out / "rfdetr-nano-trained.onnx").exists() and info["network_tries"] == []
    assert info["ort_shapes"]["labels"][2] == len(CLASSES) + 1  # as rfdetr exports it: a "no object" slot more
    (dataset,) = work.glob("train-rfdetr-nano-*/dataset")
    assert {p.name for p in dataset.glob("*/_annotations.coco.json")} == {"_annotations.coco.json"}
    assert sorted(p.parent.name for p in dataset.glob("*/_annotations.coco.json")) == ["test", "train", "valid"]
