"""samples/detection: detect.py annotates a folder, names and counts unreadable images; its README's commands run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from PIL import Image

from tests import models

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "samples" / "detection"


def run(*args, cwd=ROOT):
    return subprocess.run([sys.executable, str(SAMPLE / "detect.py"), *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


def test_annotates_each_readable_image_and_counts_the_rest(tmp_path):
    head = np.array([[[16], [16], [10], [8], [0.9], [0.1]]], np.float32)  # one box of class 0
    onnx.save(models.constant_detector(head, size=32), tmp_path / "det.onnx")
    (tmp_path / "classes.txt").write_text("disc\nsquare\n")
    images = tmp_path / "images"
    images.mkdir()
    for name, size in (("a.png", (64, 32)), ("b.jpg", (20, 40))):
        Image.new("RGB", size, (0, 0, 0)).save(images / name)
    (images / "c.jpg").write_bytes(b"not an image")
    proc = run(tmp_path / "det.onnx", images, "--out", tmp_path / "out", "--batch", "2", "--timing")
    assert proc.returncode == 0, proc.stderr
    assert "2 image(s) annotated" in proc.stdout and "1 skipped (unreadable)" in proc.stdout
    assert "c.jpg" in proc.stderr and "per image, median ms: pre" in proc.stdout
    out = Image.open(tmp_path / "out" / "a.jpg")
    assert out.size == (64, 32)
    # the box (input 11..21 x 12..20 in a 32x32 letterbox of a 64x32 image: scale 0.5, pad_y 8) drawn from x = 22,
    # y = 8 to 24
    assert max(out.getpixel((22, 22))) > 150 and max(out.getpixel((32, 22))) < 100  # the label covers the top


def test_first_readme_command_runs_on_the_cpu_with_the_committed_model(tmp_path):
    command = next(line.split() for line in (SAMPLE / "README.md").read_text().splitlines()
                   if line.startswith("    python samples/detection/detect.py"))
    assert command[2] == "samples/detection/model/detector.onnx"
    sys.path.insert(0, str(ROOT / "scripts"))
    import make_detection_data

    images = tmp_path / "images"
    images.mkdir()
    (images / "0.jpg").write_bytes(make_detection_data.render(0, "val", 0)[0])
    proc = run(ROOT / command[2], images, "--out", tmp_path / "annotated")
    assert proc.returncode == 0, proc.stderr
    truth = len(make_detection_data.render(0, "val", 0)[3])
    assert f"0.jpg: {truth} detection(s)" in proc.stdout


def test_help():
    proc = run("--help")
    assert proc.returncode == 0 and "--out" in proc.stdout
