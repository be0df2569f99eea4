"""The whole path on a CPU: engine files built by trtkit with the fake TensorRT, run by TrtRunner on fake CUDA.

The fake engine runs the ONNX model it embeds with onnx's reference evaluator, so an engine built from the same
model matches exactly and one built from a model with other weights does not: the same two cases the GPU test runs.
"""

from __future__ import annotations

import io
import json

import pytest

from tests import models
from tests.fakes.fake_cuda import FakeCudart
from tests.fakes.fake_trt import make_fake_trt
from trtkit.builder.api import build
from trtkit.builder.config import BuildConfig
from trtkit.builder.profiles import parse_shapes
from trtkit.cli import parity as parity_cli
from trtkit.cli.main import make_parser
from trtkit.cli.render import make_console
from trtkit.errors import ProfileError
from trtkit.parity import compare_engine_to_onnx
from trtkit.runtime.cuda import Cuda

PROFILES = ["x:1x3x8x8,2x3x8x8,4x3x8x8", "x:8x3x8x8,8x3x8x8,16x3x8x8"]


@pytest.fixture
def fake():
    return make_fake_trt("8.6.0")


def _options(trt):
    return {"trt": trt, "cuda": Cuda(FakeCudart())}


def _engine(tmp_path, trt, *, precision="fp16", tf32=True, model=None, name="tiny.engine"):
    config = BuildConfig(precision=precision, tf32=tf32, profiles=[parse_shapes(p) for p in PROFILES],
                         tactic_sources=("EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS"))
    path = tmp_path / name
    build(model or models.tiny_conv(), config, output=path, trt=trt)
    return path


def test_engine_file_passes_with_precision_and_shapes_from_the_engine(tmp_path, fake):
    path = _engine(tmp_path, fake)
    report = compare_engine_to_onnx(models.tiny_conv(), path, trials=2, runner_options=_options(fake))
    assert report.passed, report.verdict()
    assert report.precision == "fp16" and report.notes == ["precision fp16 taken from the engine's manifest"]
    assert report.shapes == {"x": (2, 3, 8, 8)}  # profile 0's opt
    assert report.engine == str(path)


def test_second_profile_runs_at_its_opt_shape(tmp_path, fake):
    path = _engine(tmp_path, fake)
    report = compare_engine_to_onnx(models.tiny_conv(), path, profile_index=1, runner_options=_options(fake))
    assert report.passed and report.shapes == {"x": (8, 3, 8, 8)}
    with pytest.raises(ProfileError, match=r"outside the engine's profile \(min \(8, 3, 8, 8\), max \(16, 3, 8, 8\)\)"):
        compare_engine_to_onnx(models.tiny_conv(), path, profile_index=1, shapes={"x": (4, 3, 8, 8)},
                               runner_options=_options(fake))


def test_engine_of_another_model_fails_with_a_clear_verdict(tmp_path, fake):
    path = _engine(tmp_path, fake, model=models.tiny_conv(seed=1))
    report = compare_engine_to_onnx(models.tiny_conv(), path, runner_options=_options(fake))
    assert not report.passed
    assert report.verdict().startswith("FAIL: 1 of 1 output(s) out of tolerance ('y'); output 'y': max abs error")
    assert "allowed for fp16 (worst at index" in report.verdict()


@pytest.mark.parametrize("tf32, expected", [(True, "tf32"), (False, "fp32")])
def test_fp32_engines_are_judged_by_their_tf32_setting(tmp_path, fake, tf32, expected):
    path = _engine(tmp_path, fake, precision="fp32", tf32=tf32)
    report = compare_engine_to_onnx(models.tiny_conv(), path, runner_options=_options(fake))
    assert report.precision == expected and report.passed


def test_an_open_runner_is_used_in_its_own_profile(tmp_path, fake):
    from trtkit.runtime.runner import TrtRunner

    path = _engine(tmp_path, fake)
    with TrtRunner(path, profile=1, **_options(fake)) as runner:
        report = compare_engine_to_onnx(models.tiny_conv(), runner, precision="fp16")
    assert report.passed and report.shapes == {"x": (8, 3, 8, 8)}


def test_cli_on_engine_files_exit_codes_and_json(tmp_path, fake):
    good, bad = _engine(tmp_path, fake), _engine(tmp_path, fake, model=models.tiny_conv(seed=1), name="bad.engine")
    onnx_path = tmp_path / "tiny.onnx"
    onnx_path.write_bytes(models.tiny_conv().SerializeToString())
    results = {}
    for path in (good, bad):
        out = tmp_path / f"{path.stem}.json"
        args = make_parser("parity").parse_args(["parity", str(onnx_path), str(path), "--trials", "2",
                                                 "--json", str(out)])
        console = make_console(file=io.StringIO(), width=200)
        results[path.stem] = (parity_cli.run(args, console, runner_options=_options(fake)),
                              console.file.getvalue(), json.loads(out.read_text()))
    code, text, data = results["tiny"]
    assert code == 0 and "PASS: 1 output(s) within tolerance for fp16 over 2 trials" in text
    assert data["precision"] == "fp16" and data["inputs"]["shapes"] == {"x": [2, 3, 8, 8]}
    code, text, data = results["bad"]
    assert code == 1 and "FAIL: 1 of 1 output(s) out of tolerance ('y')" in text
    assert data["passed"] is False and data["failures"][0].startswith("output 'y': max abs error")
