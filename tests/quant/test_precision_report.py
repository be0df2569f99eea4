"""Proof of precision from TensorRT 8.6 detailed-inspector JSON samples (digits CNN in FP32/TF32, FP16, INT8)."""

import json
import logging
from pathlib import Path

import pytest

from tests.quant.qmodels import capture_trtkit_log
from trtkit.builder.precision_report import analyze, datatype, describe, layer_flops, layer_precision
from trtkit.errors import BuildError

DATA = Path(__file__).parent / "data"


def _info(name):
    return (DATA / f"inspector_trt86_digits_{name}.json").read_text()


@pytest.mark.parametrize("fmt, expected", [
    ("Row major linear FP32 format", "FP32"), ("Float", "FP32"), ("Half", "FP16"),
    ("Channel major FP16 format where channel % 8 == 0", "FP16"), ("Two wide channel vectorized row major FP16 format",
                                                                   "FP16"),
    ("Thirty-two wide channel vectorized row major Int8 format", "INT8"), ("Int8", "INT8"),
    ("Row major linear BF16 format", "BF16"), ("Row major linear Int32 format", "INT32"), ("", "unknown")])
def test_datatype_names(fmt, expected):
    assert datatype(fmt) == expected


def test_int8_engine_counts_layers_and_flops_per_precision():
    report = analyze(_info("int8"), "int8")
    assert report.total_layers == 9
    assert report.layers_by_precision == {"FP16": 4, "INT8": 4, "FP32": 1}
    # conv2 (16→32, 3x3 on 8x8): 2 * 4608 weights * 64 positions; conv1 stays FP16 (first layer, 144 weights)
    assert report.flops_by_precision["INT8"] == pytest.approx(589824 + 512 + 512 + 65536)
    assert report.share("INT8") == pytest.approx(656384 / report.total_flops)
    assert report.check() == []
    assert report.to_json()["flops_share"]["INT8"] == pytest.approx(0.9707, abs=1e-4)
    assert "INT8 97.1% (4), FP16 2.9% (4), FP32 0.0% (1)" in report.summary()


def test_convolution_reads_int8_but_writes_fp16_counts_as_int8():
    layer = json.loads(_info("int8"))["Layers"][5]  # fc1 as a 1x1 convolution: Int8 in, FP16 out
    assert layer["Outputs"][0]["Format/Datatype"].endswith("FP16 format")
    assert layer_precision(layer) == "INT8"
    assert layer_flops(layer) == 2 * 512 * 64


def test_tf32_kernels_are_told_apart_from_fp32():
    report = analyze(_info("fp32_tf32"), "fp32")
    assert report.layers_by_precision == {"FP32": 5, "TF32": 4}
    assert report.share("TF32") > 0.99
    assert report.check() == []


def test_fp16_engine_passes_the_fp16_check():
    report = analyze(_info("fp16"), "fp16")
    assert report.layers_by_precision["FP16"] == 8
    assert report.check(require=True) == []


def test_fp16_asked_but_mostly_fp32_warns_loudly(caplog):
    report = analyze(_info("fp32_tf32"), "fp16")
    with capture_trtkit_log(caplog, logging.WARNING):
        problems = report.check()
    assert problems and "FP16 was asked but 100% of the engine's FLOPs run in FP32/TF32" in problems[0]
    assert "PRECISION WARNING" in caplog.text
    assert report.to_json()["warnings"] == problems


def test_require_precision_makes_it_an_error():
    with pytest.raises(BuildError,
                       match="INT8 was asked but 100% .* require_precision makes this an error"):
        analyze(_info("fp32_tf32"), "int8").check(require=True)
    with pytest.raises(BuildError, match="INT8 was asked but no layer runs in INT8"):
        analyze(_info("fp16"), "int8").check(require=True)


def test_names_only_inspector_output_is_counted_as_unknown():
    report = analyze(json.dumps({"Layers": ["conv", "relu"], "Bindings": ["x", "y"]}), "fp16")
    assert report.layers_by_precision == {"unknown": 2}
    assert report.check() == []  # nothing to prove either way


def test_describe_for_the_build_summary():
    report = analyze(_info("int8"), "int8")
    report.check()
    assert describe(report.to_json()) == "INT8 97.1% of FLOPs (4 layers), FP16 2.9% (4), FP32 0.0% (1)"
    warned = analyze(_info("fp32_tf32"), "fp16")
    warned.check()
    assert "— WARNING: FP16 was asked but" in describe(warned.to_json())
    assert describe(None) == ""


@pytest.mark.parametrize("fmt, tactic, expected", [
    ("N/A due to dynamic shapes", "sm90_xmma_fprop_implicit_gemm_f16f16_f16f16_f16_nhwckrsc_nhwc_tilesize128x128x64",
     "FP16"),
    ("N/A due to dynamic shapes", "sm80_xmma_fprop_implicit_gemm_interleaved_i8i8_i8i32_f32_nchw_vect_c_32kcrs",
     "INT8"),
    ("N/A due to dynamic shapes", "sm90_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc", "TF32"),
    ("N/A due to dynamic shapes", "", "unknown"),
    ("Row major linear FP16 format", "sm90_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32", "FP16"),
])
def test_tactic_name_stands_in_when_formats_are_not_available(fmt, tactic, expected):
    from trtkit.builder.precision_report import layer_precision

    raw = {"Name": "conv", "LayerType": "CaskConvolution", "ParameterType": "Convolution", "TacticName": tactic,
           "Inputs": [{"Name": "x", "Format/Datatype": fmt}], "Outputs": [{"Name": "y", "Format/Datatype": fmt}]}
    assert layer_precision(raw) == expected


def test_dynamic_shape_engines_fall_back_to_tactic_then_weights():
    """TensorRT 8.6 reports no formats for dynamic-shape engines: kernel names, then weight types, stand in."""
    data = json.loads(_info("int8"))
    for layer in data["Layers"]:
        for tensor in layer.get("Inputs", []) + layer.get("Outputs", []):
            tensor["Format/Datatype"] = "N/A due to dynamic shapes"
    data["Layers"][2]["TacticName"] = "0x1234"  # conv2: no readable kernel name, Int8 weights
    report = analyze(json.dumps(data), "int8")
    precisions = {layer.name: layer.precision for layer in report.layers}
    assert precisions["/conv1/Conv + /relu1/Relu"] == "FP16"  # f16f16 kernel
    assert precisions["/conv2/Conv + /relu2/Relu"] == "INT8"  # from its Int8 weights
    assert precisions["/fc1/Gemm + /relu3/Relu"] == "INT8"  # i8i8 kernel
    assert precisions["reshape_after_/fc2/Gemm"] == "none"  # a NoOp: no math, no FLOPs
    assert report.share("INT8") > 0.9 and report.check() == []
