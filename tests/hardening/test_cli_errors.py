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
    (["build", "{t}/m.onnx"], 1, "no optimization profile was given. Its only dynamic axis is the first: give "
     "the sizes of the first axis, e.g. --batch 1,8,8 (MIN,OPT,MAX), or a profile with every input, e.g. "
     "'x:1x3x8x8,8x3x8x8"),
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
    (["build", "{t}/m.onnx", "--shapes", "x:1x3x8x8", "--int8"], 1, "--calib: INT8 needs calibration data"),
    (["build", "{t}/m.onnx", "--shapes", "x:1x3x8x8", "--int8", "--calib", "{t}/folder"], 1,
     "Calibration folder '{t}/folder' has no image files"),
    (["build", "{t}/m.onnx", "--shapes", "x:1x3x8x8", "--int8", "--calib-cache", "{t}/nope.cache"], 1,
     "Calibration cache '{t}/nope.cache' does not exist and no calibration data was given"),
    (["build", "{t}/m.onnx", "--shapes", "x:1x3x8x8", "--int8", "--calib", "{t}/folder", "--int8-mode", "calibrator",
      "--calib-algo", "mse"], 1, "TensorRT has no mse calibrator; use --int8-mode 'qdq'"),
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


SHAPES = "x:1x3x8x8,2x3x8x8,4x3x8x8"


@pytest.mark.parametrize("argv, message", [
    (["sanitize", "{t}/m.onnx", "-o", "{t}/m.onnx"], "is the same file as model"),
    (["build", "{t}/m.onnx", "--shapes", SHAPES, "--int8", "--calib", "{t}/folder", "--calib-preprocess", "bogus"],
     "--calib-preprocess item 'bogus' is not KEY=VALUE with a key of: size=HxW"),
    (["build", "{t}/m.onnx", "--shapes", SHAPES, "--int8", "--calib", "{t}/folder", "--calib-preprocess",
      "resize=crop"], "--calib-preprocess: Resize mode 'crop' is not known; use one of: stretch, letterbox"),
    (["build", "{t}/m.onnx", "--shapes", SHAPES, "--add-nms", "--nms-score", "2"],
     "--nms-score must be a number from 0 up to 1 (1 excluded), not 2.0"),
    (["build", "{t}/m.onnx", "--shapes", SHAPES, "--add-nms", "--nms-iou", "0"],
     "--nms-iou must be a number above 0.0 and <= 1.0, not 0.0"),
    (["build", "{t}/m.onnx", "--shapes", SHAPES, "--nms-iou", "0.5"], "--nms-iou applies only with --add-nms"),
    (["build", "{t}/m.onnx", "--shapes", SHAPES, "--nms-score", "0.3", "--nms-max-det", "5"],
     "--nms-score, --nms-max-det apply only with --add-nms"),
    (["inspect", "{t}/m.onnx", "--layers"], "--layers lists an engine's layers; '{t}/m.onnx' is an ONNX model"),
    (["inspect", "{t}/m.onnx", "--ignore-manifest"], "--ignore-manifest loads an engine; '{t}/m.onnx' is an ONNX"),
    (["inspect", "{t}/x.npy", "--check"], "--check inspects ONNX models"),
    (["parity", "{t}/e.engine", "{t}/m.onnx"],
     "parity takes the ONNX model first, then the engine: `trtkit parity {t}/m.onnx {t}/e.engine`"),
    (["bench", "{t}/e.engine", "--iterations", "0"], "--iterations must be an integer >= 1, not 0\n"),
    (["bench", "{t}/e.engine", "--warmup-ms", "-1"], "--warmup-ms must be a number >= 0, not -1.0\n"),
    (["build", "{t}/m.onnx", "--batch", "4,1"], "argument --batch: '4,1': give MIN,OPT,MAX batch sizes of 1 or more"),
    (["build", "{t}/m.onnx", "--batch", "1,2,4", "--shapes", SHAPES], "give --batch or --shapes, not both"),
])
def test_usage_errors_exit_2_naming_the_flag_in_the_cli_words(files, capsys, no_tensorrt, argv, message):
    before = sorted(p.name for p in files.iterdir())
    code, _, err = run_cli([a.format(t=files) for a in argv], capsys)
    assert code == 2 and message.format(t=files) in err, err
    assert "or None" not in err and "(int)" not in err and "(float)" not in err and "Traceback" not in err
    assert sorted(p.name for p in files.iterdir()) == before


def test_shapes_help_shows_the_separator_and_the_shorter_forms(capsys):
    for command in ("build", "bench"):
        code, out, _ = run_cli([command, "--help"], capsys)
        text = " ".join(out.split())
        assert code == 0 and "inputs separated by a space or ';'" in text, text
        assert "NAME:MIN,MAX sets OPT to MAX" in text, text
    assert "--batch MIN,OPT,MAX" in " ".join(run_cli(["build", "--help"], capsys)[1].split())


def test_the_hint_for_an_input_left_out_is_one_profile_that_builds(tmp_path, capsys, fake_gpu):  # noqa: F811
    model = tmp_path / "two.onnx"
    model.write_bytes(models.two_inputs().SerializeToString())
    code, _, err = run_cli(["build", str(model), "--shapes", "a:1x4,2x4,4x4", "--no-isolate"], capsys)
    assert code == 1 and "--shapes: Profile 0 gives no shapes for dynamic input(s) ['b']" in err, err
    hint = err.split("e.g. ")[-1].strip().strip("'")
    assert hint == "a:1x4,2x4,4x4 b:1x4,2x4,4x4"  # b's first axis is a's: both are named N
    code, _, err = run_cli(["build", str(model), "--shapes", hint, "--no-isolate", "-o", str(tmp_path / "h.engine")],
                           capsys)
    assert code == 0, err


def test_a_space_after_the_colon_or_a_semicolon_between_inputs(tmp_path, capsys, fake_gpu):  # noqa: F811
    model = tmp_path / "two.onnx"
    model.write_bytes(models.two_inputs().SerializeToString())
    for spec in ("a: 1x4, 4x4 b: 1x4,4x4", "a:1x4,4x4;b: 1x4 , 4x4"):
        argv = ["build", str(model), "--shapes", spec, "--no-isolate", "-o", str(tmp_path / "s.engine")]
        code, _, err = run_cli(argv, capsys)
        assert code == 0, err
        profile = json.loads((tmp_path / "s.engine.manifest.json").read_text())["build"]["profiles"][0]
        assert profile["b"] == {"min": [1, 4], "opt": [4, 4], "max": [4, 4]}  # MIN,MAX: opt = max


def test_the_default_engine_name_carries_the_precision(files, capsys, fake_gpu):  # noqa: F811
    for precision, name in ((["--fp16"], "m.fp16.engine"), ([], "m.fp32.engine")):
        code, out, err = run_cli(["build", str(files / "m.onnx"), "--shapes", SHAPES, "--no-isolate", *precision],
                                 capsys)
        assert code == 0 and (files / name).is_file() and name in out, err
    assert not (files / "m.engine").exists()


def test_batch_sets_the_first_axis_of_every_input(tmp_path, capsys, fake_gpu):  # noqa: F811
    model = tmp_path / "two.onnx"
    model.write_bytes(models.two_inputs().SerializeToString())
    code, _, err = run_cli(["build", str(model), "--no-isolate"], capsys)
    assert code == 1 and "e.g. --batch 1,8,8 (MIN,OPT,MAX)" in err, err
    code, _, err = run_cli(["build", str(model), "--batch", "1,2,4", "--no-isolate", "-o", str(tmp_path / "b.engine")],
                           capsys)
    assert code == 0, err
    profiles = json.loads((tmp_path / "b.engine.manifest.json").read_text())["build"]["profiles"]
    assert profiles == [{n: {"min": [1, 4], "opt": [2, 4], "max": [4, 4]} for n in ("a", "b")}]


def test_batch_is_refused_naming_the_input_and_its_other_dynamic_axis(tmp_path, capsys, fake_gpu):  # noqa: F811
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, "H", 8])
    proto = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    (tmp_path / "h.onnx").write_bytes(proto.SerializeToString())
    code, _, err = run_cli(["build", str(tmp_path / "h.onnx"), "--batch", "1,2,4", "--no-isolate"], capsys)
    assert code == 1 and "--batch sets the first axis only, and input 'x' (dims ['N', 3, 'H', 8]) has dynamic " \
                         "axis 2; give its shapes in full, e.g. 'x:1x3x1x8,8x3x8x8,8x3x8x8'" in err, err
    assert not list(tmp_path.glob("*.engine"))


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
