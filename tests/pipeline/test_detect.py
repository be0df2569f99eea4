"""``--post detection``: the pipeline's adapter over trtkit.detection on a fake engine whose head always finds one
box, so the box mapped back through the letterbox and drawn on the frame can be checked."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from PIL import Image

from tests import models
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


QUERIES, CLASSES = 3, 2


def detr_engine(path, *, uint8_nhwc=False, names=("dets", "labels"), metadata=None):
    """A DETR-family engine (RF-DETR's outputs by default) that ignores its input: query 1 is a box centred in the
    32x32 input, a quarter of its width and height, class 1 at logit 3 (score 0.95); every other logit is -6."""
    boxes = np.tile(np.array([0.2, 0.2, 0.1, 0.1], np.float32), (1, QUERIES, 1))
    boxes[0, 1] = [0.5, 0.5, 0.25, 0.25]
    logits = np.full((1, QUERIES, CLASSES), -6.0, np.float32)
    logits[0, 1, 1] = 3.0
    model = models.constant_outputs({names[0]: boxes, names[1]: logits}, size=SIDE, uint8_nhwc=uint8_nhwc,
                                    metadata=metadata)
    shape = [SIDE, SIDE, 3] if uint8_nhwc else [3, SIDE, SIDE]
    path.write_bytes(fake_engine_bytes(model, [{"images": [[1, *shape], [2, *shape], [4, *shape]]}]))
    return path


@pytest.mark.parametrize("uint8_nhwc, preprocess", [(False, "auto"), (True, "auto"), (True, "cpu")])
def test_a_detr_engine_streams_its_query_boxes_mapped_back(backends, tmp_path, uint8_nhwc, preprocess):
    """RF-DETR's outputs through --post detection, also from an engine taking uint8 NHWC pixels, letterboxed on the
    GPU (the fake kernels) or the CPU."""
    from trtkit.pipeline import ArraySource, CallbackSink, run_engine
    from trtkit.pipeline.detect import detection_processing

    engine, seen = detr_engine(tmp_path / "detr.engine", uint8_nhwc=uint8_nhwc), []
    frames = [frame_picture(i, 64, 48) for i in range(5)]  # letterboxed to 32x32: scale 0.5, 4 rows of padding
    report = run_engine(engine, ArraySource(frames), sinks=[CallbackSink(seen.append)],
                        processing=detection_processing(), preprocess=preprocess, **backends)
    assert report.frames_out == 5 and report.source["preprocess"]["on"] == ("cpu" if preprocess == "cpu" else "gpu")
    for frame in seen:
        assert frame.result.classes.tolist() == [1] and frame.result.scores[0] == pytest.approx(0.9526, abs=1e-4)
        np.testing.assert_allclose(frame.result.boxes[0], [24, 16, 40, 32], atol=1e-4)


def test_the_class_names_are_drawn(backends, tmp_path):
    from trtkit.pipeline import ArraySource, CallbackSink, run_engine
    from trtkit.pipeline.detect import detection_processing

    engine = detr_engine(tmp_path / "detr.engine")
    drawn = {}
    for names in (None, ["ellipse", "rectangle"]):
        seen = []
        run_engine(engine, ArraySource([frame_picture(0, 64, 48)]), sinks=[CallbackSink(seen.append)],
                   processing=detection_processing(class_names=names), **backends)
        drawn[names is None] = seen[0].image
    assert not np.array_equal(drawn[True], drawn[False])  # "rectangle 0.95" is not "1 0.95"


def run_cli(argv, capsys):
    from trtkit.cli import main as cli_main

    code = cli_main.main(argv)
    return code, capsys.readouterr().err


def test_cli_refusals_are_one_line_before_any_image_is_read(fake_gpu, engine_file, tmp_path, capsys):
    from tests.pipeline.media import make_image_folder

    make_image_folder(tmp_path / "in", count=2)
    detr = detr_engine(tmp_path / "detr.engine", names=("pred_boxes", "logits"))  # RT-DETR's or DETR's?
    names = tmp_path / "names.txt"
    names.write_text("ellipse\n")
    run = ["run", "--images", str(tmp_path / "in"), "--out", str(tmp_path / "out"), "--post", "detection"]
    for argv, message in (
        ([str(detr), "--head", "yolo"], "error: --head='yolo' is not a known layout; use one of: yolov8, yolov5, "
                                        "detr-sigmoid, detr-softmax, efficient-nms"),
        ([str(detr)], "error: The outputs 'pred_boxes' (?, 3, 4), 'logits' (?, 3, 2) fit detr-sigmoid"),
        ([str(detr), "--head", "detr-sigmoid", "--names", str(names)],
         "error: --names names 1 of the model's 2 classes: give one name per class"),
        ([str(engine_file)], "error: The outputs 'y' (?, 4, 1, 1) fit no known detector layout (yolov8: one output"),
    ):
        code, err = run_cli([run[0], *argv, *run[1:]], capsys)
        assert code == 2 and err.startswith(message) and err.count("\n") == 1, err
        assert not list(tmp_path.glob("out/*"))
    code, err = run_cli(["run", str(detr), "--images", str(tmp_path / "in"), "--head", "detr-sigmoid"], capsys)
    assert code == 2 and "--head and --names choose how --post detection decodes" in err


def test_cli_draws_the_names_of_the_models_metadata(fake_gpu, tmp_path, capsys):
    """The engine's manifest keeps its ONNX model's metadata; ``names`` there (as ultralytics writes it) is drawn."""
    from tests.pipeline.media import make_image_folder

    make_image_folder(tmp_path / "in", count=1, sizes=((64, 48),))
    outs = {}
    for label, metadata in (("plain", None), ("named", {"names": "{0: 'ellipse', 1: 'rectangle'}"})):
        engine = detr_engine(tmp_path / f"{label}.engine")
        if metadata:
            (tmp_path / f"{label}.engine.manifest.json").write_text(json.dumps({"model": {"metadata": metadata}}))
        code, err = run_cli(["run", str(engine), "--images", str(tmp_path / "in"), "--out", str(tmp_path / label),
                             "--post", "detection"], capsys)
        assert code == 0, err
        outs[label] = np.asarray(Image.open(next((tmp_path / label).iterdir())))
    assert not np.array_equal(outs["plain"], outs["named"])
