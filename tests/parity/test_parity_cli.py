"""``trtkit parity``: help, a run with a fake engine injected, exit codes, JSON, error lines."""

from __future__ import annotations

import io
import json

import numpy as np
import onnx
import pytest

from tests import models
from trtkit.cli import parity as parity_cli
from trtkit.cli.main import main, make_parser
from trtkit.cli.render import make_console
from trtkit.errors import ProfileError, TrtkitError
from trtkit.parity import OnnxReference


@pytest.fixture
def model_path(tmp_path):
    path = tmp_path / "tiny.onnx"
    onnx.save(models.tiny_conv(), str(path))
    return path


def _engine(scale: float = 1.0):
    ref = OnnxReference(models.tiny_conv())

    def engine(feed):
        return {k: v * np.float32(scale) for k, v in ref(feed).items()}

    return engine


def _run(argv, engine):
    args = make_parser("parity").parse_args(["parity", *argv])
    console = make_console(file=io.StringIO(), width=200)
    code = parity_cli.run(args, console, engine=engine)
    return code, console.file.getvalue()


def test_help_lists_the_options(capsys):
    assert main(["parity", "--help"]) == 0
    text = capsys.readouterr().out
    for option in ("--shapes", "--trials", "--inputs", "--atol", "--rtol", "--metric-threshold", "--precision",
                   "--json", "--profile-index", "--reference"):
        assert option in text


def test_passing_run_prints_table_and_pass_verdict(model_path):
    code, text = _run([str(model_path), "fake.engine", "--shapes", "x:2x3x8x8", "--precision", "fp16",
                       "--trials", "2"], _engine())
    assert code == 0
    assert "2 trial(s) of random inputs (seed 0), shapes x 2x3x8x8" in text
    assert "tolerance for fp16: ratio = max|err| / max|ref| <= 1e-2" in text
    assert "ratio" in text and "2x4x1x1" in text
    assert "PASS: 1 output(s) within tolerance for fp16 over 2 trials" in text


def test_failing_run_exits_1_with_reason(model_path):
    code, text = _run([str(model_path), "fake.engine", "--shapes", "x:2x3x8x8", "--precision", "fp16"],
                      _engine(scale=1.1))
    assert code == 1
    assert "- output 'y': max abs error" in text
    assert "> 1e-2 allowed for fp16" in text
    assert "FAIL: 1 of 1 output(s) out of tolerance ('y')" in text


def test_thresholds_from_the_command_line(model_path):
    argv = [str(model_path), "e", "--shapes", "x:1x3x8x8", "--precision", "fp16"]
    assert _run(argv + ["--metric-threshold", "0.2"], _engine(scale=1.1))[0] == 0
    code, text = _run(argv + ["--atol", "1e-9", "--rtol", "1e-9"], _engine(scale=1.0 + 1e-6))
    assert code == 1
    assert ">tol" in text
    assert "Polygraphy's verdict (CompareFunc.simple, atol 1e-09, rtol 1e-09): 'y' fail" in text
    assert "exceed both atol 1e-9 and rtol 1e-9" in text


def test_json_file_and_stdout(model_path, tmp_path, capsys):
    out = tmp_path / "parity.json"
    code, text = _run([str(model_path), "e", "--shapes", "x:1x3x8x8", "--json", str(out)], _engine())
    data = json.loads(out.read_text())
    assert code == 0 and data["passed"] is True and data["schema"] == "trtkit.parity/1"
    assert "PASS" in text
    code, text = _run([str(model_path), "e", "--shapes", "x:1x3x8x8", "--json", "-"], _engine(scale=2.0))
    data = json.loads(capsys.readouterr().out)
    assert code == 1 and data["passed"] is False and text.strip() == ""  # stdout holds only the JSON


def test_min_opt_max_spec_uses_opt_and_repeated_shapes_are_refused(model_path):
    code, text = _run([str(model_path), "e", "--shapes", "x:1x3x8x8,5x3x8x8,8x3x8x8"], _engine())
    assert code == 0 and "shapes x 5x3x8x8" in text
    with pytest.raises(ProfileError, match="give --shapes once"):
        _run([str(model_path), "e", "--shapes", "x:1x3x8x8", "--shapes", "x:2x3x8x8"], _engine())


def test_errors_are_one_line_and_exit_1(model_path, tmp_path, capsys):
    assert main(["parity", str(model_path), str(tmp_path / "missing.engine")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: Engine file '{tmp_path / 'missing.engine'}' does not exist; build one with "
                   f"`trtkit build MODEL.onnx`."]
    assert main(["parity", str(tmp_path / "nope.onnx"), "e"]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_usage_errors_exit_2(model_path):
    assert main(["parity", str(model_path)]) == 2
    assert main(["parity", str(model_path), "e", "--trials", "0"]) == 2


def test_value_range_reaches_the_random_inputs(model_path):
    seen = []
    inner = _engine()

    def engine(feed):
        seen.append(feed["x"])
        return inner(feed)

    code, _ = _run([str(model_path), "e", "--shapes", "x:2x3x8x8", "--value-range", "0,255"], engine)
    assert code == 0 and seen[0].min() >= 0 and seen[0].max() > 1.0
    assert main(["parity", str(model_path), "e", "--value-range", "5,1"]) == 2
    assert main(["parity", str(model_path), "e", "--value-range", "abc"]) == 2


def test_metric_threshold_per_output(model_path, capsys):
    argv = [str(model_path), "e", "--shapes", "x:1x3x8x8", "--precision", "fp16"]
    code, text = _run(argv + ["--metric-threshold", "y:0.2"], _engine(scale=1.1))
    assert code == 0 and "tolerance for fp16: ratio = max|err| / max|ref| <= 1e-2; 'y' <= 0.2" in text
    with pytest.raises(TrtkitError, match=r"metric_threshold names output\(s\) \['logits'\] the model does not "
                                          r"have \(outputs: y\)"):
        _run(argv + ["--metric-threshold", "logits:0.2"], _engine())
    assert main(["parity", str(model_path), "e", "--metric-threshold", "y:big"]) == 2
    assert "is not a number or OUTPUT:NUMBER" in capsys.readouterr().err
