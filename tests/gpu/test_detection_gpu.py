"""Detection on a real GPU: the sample detector with --add-nms (EfficientNMS_TRT) gives the numpy NMS's detections,
and `trtkit eval detection` scores the engine next to its ONNX model.

Run on the GPU host: ``bash .gpu/bin/gpu-run pytest -m gpu -q tests/gpu/test_detection_gpu.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import GPU_TACTIC_SOURCES
from trtkit.builder.api import build
from trtkit.builder.config import BuildConfig
from trtkit.builder.profiles import parse_shapes
from trtkit.detection import Letterbox, NmsOptions, add_nms, box_iou, decode, from_efficient_nms
from trtkit.eval.detection import evaluate_detection

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "samples" / "detection" / "model" / "detector.onnx"
PROFILE = "images:1x3x320x320,8x3x320x320,8x3x320x320"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    sys.path.insert(0, str(ROOT / "scripts"))
    import make_detection_data

    folder = tmp_path_factory.mktemp("shapes")
    make_detection_data.make_split(folder, "val", 48, seed=0, workers=4)
    return folder


@pytest.fixture(scope="module")
def engines(tmp_path_factory, cache_dir):
    folder = tmp_path_factory.mktemp("detection")
    config = BuildConfig(profiles=[parse_shapes(PROFILE)], tactic_sources=GPU_TACTIC_SOURCES,
                         timing_cache=str(cache_dir / "detection.cache"))
    plain, nms = folder / "det.engine", folder / "det-nms.engine"
    build(str(MODEL), config, output=plain, isolate=False)
    build(add_nms(str(MODEL), NmsOptions(0.25, 0.45, 100)), config, output=nms, isolate=False)
    return plain, nms


def test_efficient_nms_engine_matches_numpy_nms(engines, data):
    from trtkit.runtime.runner import TrtRunner

    files = sorted((data / "val").glob("*.jpg"))[:8]
    batch, _ = Letterbox((320, 320))(files)
    with TrtRunner(str(engines[0])) as runner:
        ours = decode(runner.infer({"images": batch})["output0"], 0.25, 0.45, 100, multi_label=True)
    with TrtRunner(str(engines[1])) as runner:
        out = runner.infer({"images": batch})
    theirs = from_efficient_nms(out["num_dets"], out["boxes"], out["scores"], out["classes"])
    assert sum(len(d) for d in ours) > 8
    for a, b in zip(theirs, ours):
        assert len(a) == len(b)
        for box, cls in zip(a.boxes, a.classes):
            same = b.boxes[b.classes == cls]
            assert box_iou(box, same).max() >= 0.99


def test_eval_detection_engine_next_to_onnx(engines, data):
    result = evaluate_detection(engines[0], data / "val", data / "val.json", reference=MODEL, batch=8)
    engine, onnx = result.row("model").metrics, result.row("onnx").metrics
    assert onnx.map > 50 and abs(engine.map - onnx.map) < 1.0
    nms = evaluate_detection(engines[1], data / "val", data / "val.json", batch=8).rows[0].metrics
    assert nms.map > 50 and np.isfinite(nms.map50)


def test_uint8_nhwc_engine_takes_pixels_and_finds_the_float_engines_detections(engines, data, tmp_path, cache_dir):
    """TensorRT takes the UINT8 input feeding the prepended Cast; the FP32 engine on uint8 NHWC pixels gives the
    float engine's detections, through the sample's Detector (CUDA graph, output views) and through trtkit eval."""
    sys.path.insert(0, str(ROOT / "samples" / "detection"))
    from detect import RUNNER_OPTIONS, Detector

    from trtkit.eval.models import open_model

    config = BuildConfig(profiles=[parse_shapes("images:1x320x320x3,8x320x320x3,8x320x320x3")],
                         tactic_sources=GPU_TACTIC_SOURCES, timing_cache=str(cache_dir / "detection.cache"),
                         input_uint8_nhwc=True)
    fast = tmp_path / "det-uint8.engine"
    build(str(MODEL), config, output=fast, isolate=False)
    files = sorted((data / "val").glob("*.jpg"))[:12]
    found = {}
    for name, engine in (("float", engines[0]), ("uint8", fast)):
        with open_model(str(engine), runner_options=RUNNER_OPTIONS) as model:
            detector = Detector(model)
            found[name] = [detector([path])[0] for path in files] + [detector([path])[0] for path in files]
            detector.close()
    assert sum(len(d) for d in found["float"]) > 12
    for a, b in zip(found["uint8"], found["float"]):
        assert len(a) == len(b)
        for box, cls in zip(a.boxes, a.classes):
            assert box_iou(box, b.boxes[b.classes == cls]).max() >= 0.99
    ours = evaluate_detection(fast, data / "val", data / "val.json", batch=8).rows[0].metrics
    theirs = evaluate_detection(engines[0], data / "val", data / "val.json", batch=8).rows[0].metrics
    assert abs(ours.map - theirs.map) < 0.2
