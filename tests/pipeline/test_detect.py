"""``--post detection``: the pipeline's adapter over trtkit.detection on a fake engine whose head always finds one
box, so the box mapped back through the letterbox and drawn on the frame can be checked."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.pipeline.media import frame_picture
from tests.runtime.fakes import fake_engine_bytes
from trtkit.errors import DependencyError

ANCHORS, SIDE = 16, 32


def constant_head_engine(path):
    """images (N,3,32,32) → a YOLO-style head (N, 4 + 2 classes, 16 anchors) that ignores its input: anchor 0 is a
    box centred at (16, 16), 8x8 input pixels, class 1 with score 0.9; every other score is 0."""
    head = np.zeros((1, 6, ANCHORS), np.float32)
    head[0, :4, 0] = [16, 16, 8, 8]
    head[0, 5, 0] = 0.9
    nodes = [helper.make_node("ReduceMean", ["images"], ["m"], axes=[1, 2, 3], keepdims=1),
             helper.make_node("Mul", ["m", "zero"], ["z"]),
             helper.make_node("Reshape", ["z", "shape"], ["z3"]),
             helper.make_node("Add", ["z3", "head"], ["output0"])]
    inits = [numpy_helper.from_array(np.zeros((), np.float32), "zero"),
             numpy_helper.from_array(np.array([-1, 1, 1], np.int64), "shape"),
             numpy_helper.from_array(head, "head")]
    graph = helper.make_graph(nodes, "head",
                              [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, SIDE, SIDE])],
                              [helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["N", 6, ANCHORS])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path.write_bytes(fake_engine_bytes(model, [{"images": [[1, 3, SIDE, SIDE], [2, 3, SIDE, SIDE],
                                                           [4, 3, SIDE, SIDE]]}]))
    return path


def test_detections_are_mapped_back_to_the_frame_and_drawn(backends, tmp_path):
    pytest.importorskip("trtkit.detection")
    from trtkit.pipeline import ArraySource, CallbackSink, JsonLinesSink, run_engine
    from trtkit.pipeline.detect import detection_processing

    engine, seen = constant_head_engine(tmp_path / "det.engine"), []
    frames = [frame_picture(i, 64, 48) for i in range(6)]  # letterboxed to 32x32: scale 0.5, 4 rows of padding
    report = run_engine(engine, ArraySource(frames), sinks=[CallbackSink(seen.append),
                                                            JsonLinesSink(tmp_path / "r.jsonl")],
                        processing=detection_processing(), **backends)
    assert report.frames_out == 6 and list(report.stages)[3:5] == ["postprocess", "annotate"]
    for frame in seen:
        assert len(frame.result) == 1 and int(frame.result.classes[0]) == 1
        np.testing.assert_allclose(frame.result.boxes[0], [24, 16, 40, 32], atol=1e-4)
        assert frame.image.shape == (48, 64, 3) and not np.array_equal(frame.image, frames[frame.index])
    line = json.loads((tmp_path / "r.jsonl").read_text().splitlines()[0])
    assert np.allclose(line["result"]["boxes"], [[24, 16, 40, 32]], atol=1e-4)


def test_without_trtkit_detection_the_error_says_so(monkeypatch):
    from trtkit.pipeline.detect import detection_processing

    monkeypatch.setitem(sys.modules, "trtkit.detection", None)
    with pytest.raises(DependencyError, match="Detection postprocessing needs trtkit.detection.*run without it"):
        detection_processing()


def _iou(a, b) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - ix * iy
    return ix * iy / union


def test_the_detection_samples_detector_finds_the_shapes_of_the_pipeline_samples_video(fake_gpu, tmp_path, capsys):
    """The real detector (samples/detection, run by the fake engine with onnx's reference evaluator) through
    ``trtkit run --video --post detection``: each frame's three shapes, their classes and boxes."""
    import importlib.util
    from pathlib import Path

    import onnx

    from trtkit.cli import main as cli_main

    pytest.importorskip("trtkit.detection")
    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("pipeline_sample", root / "samples" / "pipeline" / "run.py")
    sample = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sample)
    video = sample.shapes_video(tmp_path / "shapes.mp4", frames=2)
    engine = tmp_path / "det.engine"
    engine.write_bytes(fake_engine_bytes(onnx.load(str(sample.DETECTOR)),
                                         [{"images": [[1, 3, 320, 320], [2, 3, 320, 320], [2, 3, 320, 320]]}]))
    code = cli_main.main(["run", str(engine), "--video", str(video), "--out", str(tmp_path / "out.mp4"), "--post",
                          "detection", "--results", str(tmp_path / "r.jsonl"), "--decoder", "pyav"])
    assert code == 0, capsys.readouterr().err
    for i, line in enumerate((tmp_path / "r.jsonl").read_text().splitlines()):
        result = json.loads(line)["result"]
        x = 40 + 3 * i  # where shapes_video drew frame i's ellipse (class 0), rectangle (1) and triangle (2)
        truth = {0: [x, 60, x + 110, 150], 1: [640 - x - 130, 190, 640 - x - 20, 300], 2: [x + 150, 200, x + 270, 320]}
        found = dict(zip(result["classes"], result["boxes"]))
        assert sorted(found) == [0, 1, 2] and min(result["scores"]) > 0.5
        assert all(_iou(found[c], truth[c]) > 0.8 for c in truth), (found, truth)
