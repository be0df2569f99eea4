"""Precision reports recomputed from inspector JSON that TensorRT 8.6.0 wrote on the GPU host (H200, digits CNN,
dynamic batch): formats read "N/A due to dynamic shapes" even with an execution context, so kernel names and weight
types carry the report. The shares are the ones the GPU run printed."""

import gzip
import json
from pathlib import Path

import pytest

from trtkit.builder.precision_report import analyze
from trtkit.errors import BuildError

DATA = Path(__file__).resolve().parents[1] / "data" / "inspector86"


def report(name: str, requested: str):
    raw = (DATA / name).read_bytes()
    data = json.loads(gzip.decompress(raw) if name.endswith(".gz") else raw)
    assert data["tensorrt"] == "8.6.0"
    assert "N/A due to dynamic shapes" in data["with_context"]
    return analyze(data["with_context"], requested)


def test_fp16_flag_alone_is_seen_running_in_fp32_and_warned():
    r = report("digits-fp16-flag-alone.json", "fp16")
    assert r.share("FP32") + r.share("TF32") > 0.99 and r.share("FP16") == 0
    assert r.share("unknown") < 0.01
    assert r.check() and "FP16 was asked but 100% of the engine's FLOPs run in FP32/TF32" in r.warnings[0]
    with pytest.raises(BuildError, match="require_precision makes this an error"):
        report("digits-fp16-flag-alone.json", "fp16").check(require=True)


@pytest.mark.parametrize("name, requested, precision", [
    ("digits-fp16-flag-prefer.json", "fp16", "FP16"),
    ("digits-int8-calibrator-prefer.json", "int8", "INT8")])
def test_precision_constraints_are_seen_in_the_kernels(name, requested, precision):
    r = report(name, requested)
    assert r.share(precision) > 0.99, r.shares()
    assert r.layers_by_precision[precision] >= 3
    assert r.check() == []


@pytest.mark.parametrize("name, int8_layers, higher", [
    ("resnet50-int8-calibrator.json.gz", 55, {}),
    # Q/DQ keeps the final classifier Gemm out of INT8 (trtkit's placement keeps the last layer in higher precision):
    # its TF32 GEMM and the reformats around it are where batch 1 loses to the calibrator engine (0.94x)
    ("resnet50-int8-qdq.json.gz", 53, {"TF32": 1, "FP32": 1})])
def test_resnet50_int8_engines_no_math_layers_are_none_not_unknown(name, int8_layers, higher):
    r = report(name, "int8")
    assert r.layers_by_precision["INT8"] == int8_layers
    assert {p: n for p, n in r.layers_by_precision.items() if p in ("TF32", "FP32")} == higher
    assert r.layers_by_precision["none"] >= 89  # 47 constants, 41 Myelin reformats, reformats, no-ops
    assert r.layers_by_precision.get("unknown", 0) == 0
    assert r.share("INT8") > 0.99 and r.share("none") == 0
