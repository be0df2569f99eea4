"""samples/detection: detect.py annotates a folder, names and counts unreadable images; its README's commands run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
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
    assert "letterbox: cpu (" in proc.stderr and "does not run through TensorRT)" in proc.stderr
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


def _detect_module():
    sys.path.insert(0, str(SAMPLE))
    try:
        import detect
    finally:
        sys.path.remove(str(SAMPLE))
    return detect


@pytest.mark.parametrize("letterbox", ["gpu", "cpu"], ids=["device-letterbox", "numpy-letterbox"])
def test_a_uint8_input_engine_finds_what_the_float_model_finds(tmp_path, letterbox):
    """The sample on a fake-TensorRT engine built with input_uint8_nhwc (uint8 NHWC batches, a CUDA graph, output
    views; the letterbox in the fake GPU's kernels or in numpy) against the ONNX model on float batches: the same
    detections (to the bit where both run on onnx's reference evaluator; within float rounding where the reference is
    ONNX Runtime, which the eval extra installs)."""
    from tests.fakes.fake_cuda import FakeCudart
    from tests.fakes.fake_trt import make_fake_trt
    from trtkit.builder.api import build
    from trtkit.builder.config import BuildConfig
    from trtkit.builder.profiles import parse_shapes
    from trtkit.eval.models import open_model
    from trtkit.runtime.cuda import Cuda

    detect = _detect_module()
    model = models.conv_detector(size=32, classes=2, seed=3)
    trt = make_fake_trt("8.6.0")
    config = BuildConfig(profiles=[parse_shapes("images:1x32x32x3,2x32x32x3,4x32x32x3")], input_uint8_nhwc=True)
    build(model, config, output=tmp_path / "det.engine", trt=trt, isolate=False)
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in ((48, 64), (30, 20), (32, 32), (70, 50))]
    options = dict(detect.RUNNER_OPTIONS, trt=trt, cuda=Cuda(FakeCudart()))
    with open_model(str(tmp_path / "det.engine"), runner_options=options) as engine:
        detector = detect.Detector(engine, conf=0.3, letterbox=letterbox)
        assert detector.letterbox.where == letterbox and engine.input_dtype == np.uint8
        assert (detector.letterbox_reason is None) == (letterbox == "gpu")
        assert letterbox == "gpu" or detector.letterbox.raw
        ours = [detector([image])[0] for image in images + images]  # the second round replays the graph
        ours += detector(images[:2])
    with open_model(model) as reference:
        float_detector = detect.Detector(reference, conf=0.3)
        assert not float_detector.letterbox.raw
        theirs = [float_detector([image])[0] for image in images + images] + float_detector(images[:2])
    assert sum(len(d) for d in theirs) > 0
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.boxes, b.boxes, rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(a.scores, b.scores, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(a.classes, b.classes)
    assert len(detector.times["pre"]) == len(ours) - 1
