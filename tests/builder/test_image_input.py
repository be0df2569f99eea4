"""``input_uint8_nhwc`` / ``trtkit build --input-uint8-nhwc``: the image normalization prepended to the graph, its
wiring through BuildConfig, the CLI and the manifest, and the combinations refused."""

from __future__ import annotations

import json
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from tests import models
from tests.fakes.fake_trt import make_fake_trt
from trtkit.builder.api import build
from trtkit.builder.config import BuildConfig, CalibrationSettings
from trtkit.builder.image_input import add_uint8_nhwc_input
from trtkit.builder.prepare import prepare
from trtkit.builder.profiles import parse_shapes
from trtkit.cli.main import main
from trtkit.detection import Letterbox
from trtkit.errors import ModelError, ProfileError, UsageError

NHWC = [parse_shapes("images:1x32x32x3,2x32x32x3,4x32x32x3")]


def _pixels(n=2, size=32, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, size, size, 3), dtype=np.uint8)


def test_the_prepended_steps_give_what_the_cpu_normalization_gives():
    model = models.conv_detector(size=32)
    prepared = prepare(model, input_uint8_nhwc=True)
    pixels = _pixels()
    ours = ReferenceEvaluator(prepared.proto).run(None, {"images": pixels})[0]
    # the float batch the CPU made before: Letterbox's NCHW float32 x / 255
    batch = Letterbox((32, 32)).to_batch(pixels)
    theirs = ReferenceEvaluator(model).run(None, {"images": batch})[0]
    np.testing.assert_array_equal(ours, theirs)


def test_the_input_keeps_its_name_and_batch_dim_and_becomes_uint8_nhwc():
    prepared = prepare(models.conv_detector(size=32), input_uint8_nhwc=True)
    (value,) = prepared.proto.graph.input
    dims = [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]
    assert value.name == "images" and value.type.tensor_type.elem_type == TensorProto.UINT8
    assert dims == ["N", 32, 32, 3]
    assert [n.op_type for n in prepared.proto.graph.node[:3]] == ["Cast", "Mul", "Transpose"]
    record = prepared.rewrites[-1]
    assert (record.rewrite, record.where, record.status) == ("uint8-nhwc-input", "input 'images'", "applied")
    assert "(Nx32x32x3) uint8" in record.what
    onnx.checker.check_model(prepared.proto)


def test_an_fp16_input_is_cast_to_fp16_and_scaled_in_fp16():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 3, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 3, 4, 4])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    rewritten, _ = add_uint8_nhwc_input(model)
    out = ReferenceEvaluator(rewritten).run(None, {"x": np.full((1, 4, 4, 3), 255, np.uint8)})[0]
    assert out.dtype == np.float16 and out.shape == (1, 3, 4, 4)
    np.testing.assert_array_equal(out, np.float16(255) * np.float16(1 / 255))


def _model(inputs):
    nodes = [helper.make_node("Identity", [inputs[0].name], ["y"])]
    out = helper.make_tensor_value_info("y", inputs[0].type.tensor_type.elem_type, None)
    return helper.make_model(helper.make_graph(nodes, "g", inputs, [out]), opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    "inputs, found",
    [
        ([helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 3, 8, 8]),
          helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 3, 8, 8])], "the model has 2 inputs: 'a' FLOAT"),
        ([helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 8, 8, 3])], "found 'a' FLOAT (1, 8, 8, 3)"),
        ([helper.make_tensor_value_info("a", TensorProto.UINT8, [1, 3, 8, 8])], "found 'a' UINT8 (1, 3, 8, 8)"),
        ([helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 3, 8])], "found 'a' FLOAT (1, 3, 8)"),
    ],
)
def test_models_without_one_float_nchw_image_input_are_refused_saying_what_they_have(inputs, found):
    with pytest.raises(ModelError, match="needs one float image input \\(N, 3, H, W\\)") as info:
        prepare(_model(inputs), input_uint8_nhwc=True)
    assert found in str(info.value) and info.value.field == "input_uint8_nhwc"


def test_calibrated_int8_with_uint8_input_is_refused():
    with pytest.raises(UsageError, match="input_uint8_nhwc cannot be combined with INT8 calibration data"):
        BuildConfig(precision="int8", calibration=CalibrationSettings(source="calib"), input_uint8_nhwc=True)
    with pytest.raises(UsageError, match="input_uint8_nhwc"):
        BuildConfig(input_uint8_nhwc="yes")


def test_nchw_shapes_for_a_uint8_engine_are_refused_with_the_layout_to_use(fake_trt):
    config = BuildConfig(profiles=[parse_shapes("images:1x3x32x32,2x3x32x32,4x3x32x32")], input_uint8_nhwc=True)
    with pytest.raises(ProfileError, match=r"give its shapes in that layout, e\.g\. images:1x32x32x3"):
        build(models.conv_detector(size=32), config, trt=fake_trt, isolate=False)


def test_the_engine_takes_uint8_nhwc_and_the_manifest_says_so(tmp_path):
    trt = make_fake_trt("8.6.0")
    path = tmp_path / "det.engine"
    result = build(models.conv_detector(size=32), BuildConfig(profiles=NHWC, input_uint8_nhwc=True), output=path,
                   trt=trt, isolate=False)
    manifest = json.loads((tmp_path / "det.engine.manifest.json").read_text())
    assert manifest["build"]["input_uint8_nhwc"] is True
    assert [r["rewrite"] for r in manifest["prepare"]["rewrites"]][-1] == "uint8-nhwc-input"
    engine = trt.Runtime(trt.Logger()).deserialize_cuda_engine(result.engine)
    assert engine.get_tensor_dtype("images") == trt.DataType.UINT8
    assert tuple(engine.get_tensor_profile_shape("images", 0)[2]) == (4, 32, 32, 3)


def test_cli_flag_reaches_the_build_and_the_summary(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", make_fake_trt("8.6.0"))
    path = tmp_path / "det.onnx"
    onnx.save(models.conv_detector(size=32), path)
    code = main(["build", str(path), "--input-uint8-nhwc", "--shapes", "images:1x32x32x3,2x32x32x3,4x32x32x3",
                 "--no-isolate", "-o", str(tmp_path / "det.engine"), "--json", str(tmp_path / "b.json")])
    out = capsys.readouterr().out
    assert code == 0 and "image input" in out and "uint8 pixels" in out
    assert json.loads((tmp_path / "b.json").read_text())["build"]["input_uint8_nhwc"] is True


def test_cli_refusals_name_the_flags(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", make_fake_trt("8.6.0"))
    path = tmp_path / "det.onnx"
    onnx.save(models.conv_detector(size=32), path)
    (tmp_path / "calib").mkdir()
    code = main(["build", str(path), "--input-uint8-nhwc", "--int8", "--calib", str(tmp_path / "calib"),
                 "--shapes", "images:1x32x32x3", "-o", str(tmp_path / "a.engine")])
    assert code == 2 and "--input-uint8-nhwc cannot be combined with INT8 calibration data" in capsys.readouterr().err
    code = main(["build", str(path), "--input-uint8-nhwc", "--shapes", "images:1x3x32x32", "--no-isolate",
                 "-o", str(tmp_path / "b.engine")])
    err = capsys.readouterr().err
    assert code == 1 and "With --input-uint8-nhwc the engine's input 'images' is (N, H, W, 3) uint8" in err
    onnx.save(_model([helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 1, 8, 8])]), tmp_path / "cls.onnx")
    code = main(["build", str(tmp_path / "cls.onnx"), "--input-uint8-nhwc", "--no-isolate",
                 "-o", str(tmp_path / "c.engine")])
    err = capsys.readouterr().err
    assert code == 1 and "--input-uint8-nhwc needs one float image input (N, 3, H, W)" in err
    assert not any((tmp_path / n).exists() for n in ("a.engine", "b.engine", "c.engine"))
