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
    (["build", "{t}/m.onnx"], 1, "no optimization profile was given. Its only dynamic axis is the first: give the "
     "sizes of that axis, e.g. --batch 1,8,8 (MIN,OPT,MAX), or a profile with every input, e.g. 'x:1x3x8x8,8x3x8x8"),
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
