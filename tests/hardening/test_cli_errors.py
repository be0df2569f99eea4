"""Issue 14, items 9-12: arguments and files are checked before TensorRT is needed, messages say what is wrong, one
exit-code rule (usage 2, runtime 1) for every command, and `--json -` leaves stdout to the JSON."""

import json
import sys

import numpy as np
import pytest

from tests import models
from tests.hardening import run_cli
from tests.runtime.fakes import fake_gpu  # noqa: F401 - fixture


@pytest.fixture
def no_tensorrt(monkeypatch):
    from trtkit import _lazy

    monkeypatch.setitem(sys.modules, "tensorrt", None)
    _lazy.import_module.cache_clear()
    yield
    _lazy.import_module.cache_clear()


@pytest.fixture
def files(tmp_path):
    (tmp_path / "m.onnx").write_bytes(models.tiny_conv().SerializeToString())
    (tmp_path / "empty.onnx").write_bytes(b"")
    (tmp_path / "folder").mkdir()
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 8, 8), np.float32))
    return tmp_path


@pytest.mark.parametrize("argv, code, message", [
    (["build", "{t}/nope.onnx"], 1, "'{t}/nope.onnx' does not exist"),
    (["build", "{t}/folder"], 1, "is a folder; give the path of an .onnx file"),
    (["build", "{t}/m.onnx"], 1, "no optimization profile was given. Add for example --shapes 'x:1x3x8x8"),
    (["build", "{t}/m.onnx", "--shapes", "y:1x3x8x8"], 1, "names input(s) ['y'] that the model does not have"),
    (["build", "{t}/m.onnx", "--shapes", "x:1x3x8x8", "--int8", "--calib", "{t}/nope"], 1,
     "--calib '{t}/nope' is not a folder"),
    (["run", "{t}/folder"], 1, "'{t}/folder' is a folder; give the engine file"),
    (["run", "{t}/m.onnx"], 1, "is an ONNX model, not an engine"),
    (["run", "{t}/e.engine", "--input", "x={t}/m.onnx"], 1, "it is not a .npy or .npz file of numeric arrays"),
    (["bench", "{t}/folder"], 1, "is a folder; give the engine file"),
    (["parity", "{t}/empty.onnx", "{t}/m.onnx"], 1, "'{t}/empty.onnx' is empty; expected an ONNX model"),
    (["parity", "{t}/m.onnx", "{t}/m.onnx"], 1, "is an ONNX model, not an engine"),
    (["inspect", "{t}/folder"], 1, "is a folder; give the engine file"),
    (["build", "{t}/m.onnx", "--workspace", "-4G"], 2, "'-4G' is negative"),
    (["build", "{t}/m.onnx", "--int8", "--calib", "{t}/folder", "--calib-batch", "0"], 2, "must be at least 1"),
    (["parity", "{t}/m.onnx", "{t}/e.engine", "--trials", "0"], 2, "must be at least 1"),
    (["parity", "{t}/m.onnx", "{t}/e.engine", "--value-range", "5,1"], 2, "LOW must be below HIGH"),
    (["bench", "{t}/e.engine", "--streams", "0"], 2, "--streams must be an integer >= 1"),
    (["run", "{t}/e.engine", "--iterations", "-5"], 2, "must be at least 1"),
    # what the model and the calibration settings tell, on a CPU
    (["build", "{t}/m.onnx", "--shapes", "x:1x3x8x8", "--int8"], 1, "--int8 needs calibration: give --calib DIR"),
    (["build", "{t}/m.onnx", "--shapes", "x:1x3x8x8", "--int8", "--calib", "{t}/folder"], 1,
     "Calibration folder '{t}/folder' has no image files"),
    (["build", "{t}/m.onnx", "--shapes", "x:1x3x8x8", "--int8", "--calib-cache", "{t}/nope.cache"], 1,
     "Calibration cache '{t}/nope.cache' does not exist and no calibration data was given"),
    (["build", "{t}/m.onnx", "--shapes", "x:1x3x8x8", "--int8", "--calib", "{t}/folder", "--int8-mode", "calibrator",
      "--calib-algo", "percentile"], 1, "TensorRT has no percentile calibrator; use --int8-mode qdq"),
    (["build", "{t}/m.onnx", "--shapes", "x:1x3x8x8", "--add-nms"], 1,
     "--add-nms needs one output (N, 4 + classes, anchors) as YOLOv8 exports it; found output 'y' (N, 4, 1, 1)"),
    (["build", "{t}/m.onnx", "--shapes", "x:2x3x8x8", "--add-nms", "--no-isolate"], 1, "--add-nms needs one output"),
    (["parity", "{t}/m.onnx", "{t}/e.engine", "--atol", "-1"], 2, "Tolerance --atol must be >= 0, got -1.0"),
    (["parity", "{t}/m.onnx", "{t}/e.engine", "--metric-threshold", "y:-0.5"], 2, "must be >= 0, got -0.5"),
])
def test_checked_before_tensorrt_is_needed(files, capsys, no_tensorrt, argv, code, message):
    argv = [a.format(t=files) for a in argv]
    got, _, err = run_cli(argv, capsys)
    assert got == code and message.format(t=files) in err, err
    assert "TensorRT's Python package is not installed" not in err and "Traceback" not in err


def test_json_dash_prints_only_json(files, capsys, fake_gpu):  # noqa: F811
    engine = files / "m.engine"
    assert run_cli(["build", str(files / "m.onnx"), "--shapes", "x:1x3x8x8,2x3x8x8,4x3x8x8", "--no-isolate",
                    "-o", str(engine)], capsys)[0] == 0
    for argv in (["inspect", str(files / "m.onnx"), "--json", "-"],
                 ["run", str(engine), "--json", "-"],
                 ["build", str(files / "m.onnx"), "--shapes", "x:1x3x8x8,2x3x8x8,4x3x8x8", "--no-isolate", "-o",
                  str(files / "n.engine"), "--json", "-"]):
        code, out, err = run_cli(argv, capsys)
        assert code == 0, err
        json.loads(out)  # the whole of stdout is one JSON document
        assert out.lstrip().startswith("{")


def test_bench_refuses_build_options_for_an_engine(files, capsys):
    code, _, err = run_cli(["bench", str(files / "e.engine"), "--fp16", "--workspace", "4G"], capsys)
    assert code == 2 and "--fp16, --workspace: build options apply when bench is given an ONNX model" in err


def test_a_calibration_folder_that_cannot_be_read_says_so_before_tensorrt(files, capsys, no_tensorrt, monkeypatch):
    import os
    from pathlib import Path

    folder = files / "folder"
    np.save(folder / "a.npy", np.zeros((1, 3, 8, 8), np.float32))
    real_access = os.access  # root reads any folder: make this one unreadable as far as the check can tell
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == folder else real_access(p, mode))
    code, _, err = run_cli(["build", str(files / "m.onnx"), "--shapes", "x:1x3x8x8", "--int8", "--calib",
                            str(folder)], capsys)
    assert code == 1 and f"'{folder}' cannot be read (permission denied)" in err, err


def test_a_qdq_model_needs_no_calibration_data(tmp_path, capsys, no_tensorrt):
    from onnx import TensorProto, helper, numpy_helper

    scale = numpy_helper.from_array(np.array(0.02, np.float32), "scale")
    nodes = [helper.make_node("QuantizeLinear", ["x", "scale"], ["q"], name="q"),
             helper.make_node("DequantizeLinear", ["q", "scale"], ["y"], name="dq")]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [scale])
    model = tmp_path / "q.onnx"
    model.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    code, _, err = run_cli(["build", str(model), "--int8", "--no-isolate"], capsys)
    assert code == 1 and "TensorRT's Python package is not installed" in err, err  # no check refused it first
