"""``scripts/make_detection_data.py``: seeded, byte-identical, COCO-valid procedural detection data."""

from __future__ import annotations

import importlib
import io
import json
import sys
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[2]


def load_script():
    # imported by name (not from a spec) so its worker function pickles for the process pool
    if str(ROOT / "scripts") not in sys.path:
        sys.path.insert(0, str(ROOT / "scripts"))
    return importlib.import_module("make_detection_data")


def test_render_is_seeded_and_differs_between_splits_and_seeds():
    data = load_script()
    first = data.render(0, "val", 3)
    assert first == data.render(0, "val", 3)
    assert first[0] != data.render(0, "train", 3)[0] != data.render(1, "val", 3)[0]


def test_split_is_byte_identical_whatever_the_workers_and_valid_coco(tmp_path):
    data = load_script()
    one = data.make_split(tmp_path / "a", "val", 6, seed=0, workers=1)
    two = data.make_split(tmp_path / "b", "val", 6, seed=0, workers=2)
    assert one.read_bytes() == two.read_bytes()
    for i in range(6):
        name = f"{i:06d}.jpg"
        assert (tmp_path / "a" / "val" / name).read_bytes() == (tmp_path / "b" / "val" / name).read_bytes()
    coco = json.loads(one.read_text())
    assert [c["id"] for c in coco["categories"]] == list(range(1, len(data.CLASSES) + 1))
    sizes = {im["id"]: (im["width"], im["height"]) for im in coco["images"]}
    for im in coco["images"]:
        with Image.open(tmp_path / "a" / "val" / im["file_name"]) as img:
            assert img.size == (im["width"], im["height"])
    for ann in coco["annotations"]:
        x, y, w, h = ann["bbox"]
        width, height = sizes[ann["image_id"]]
        assert w > 5 and h > 5 and x >= 0 and y >= 0 and x + w <= width + 0.01 and y + h <= height + 0.01


def test_objects_vary_in_class_and_size():
    data = load_script()
    objects = [obj for i in range(30) for obj in data.render(0, "train", i)[3]]
    assert {k for k, _ in objects} == set(range(len(data.CLASSES)))
    sides = [max(b[2], b[3]) for _, b in objects]
    assert min(sides) < 30 and max(sides) > 100
    image = Image.open(io.BytesIO(data.render(0, "train", 0)[0]))
    assert image.format == "JPEG" and image.mode == "RGB"
