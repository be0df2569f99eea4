"""The committed digits CNN (scripts/train_digits.py): its files, and FP16 / Q/DQ accuracy on the held-out split,
evaluated with ONNX's reference evaluator (a CPU stand-in for the GPU measurements of benchmarks/precision_h200.py)."""

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx.reference import ReferenceEvaluator

from calibrators.algorithms import compute_amaxes
from calibrators.histogram import HistogramSet
from trtkit.model import with_outputs
from trtkit.quant.fp16 import convert_to_fp16
from trtkit.quant.qdq import insert_qdq, plan_qdq

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def digits():
    model = onnx.load(str(DATA / "digits_cnn.onnx"))
    hold = np.load(DATA / "digits_holdout.npz")
    calib = np.load(DATA / "digits_calib.npz")["x"]
    return model, hold["x"], hold["y"], calib


@pytest.fixture(scope="module")
def fp32_top1(digits):
    model, x, y, _ = digits
    return top1(model, x, y)


@pytest.fixture(scope="module")
def calibrated(digits):
    """The Q/DQ plan and histograms of its tensors over the calibration split."""
    model, _, _, calib = digits
    plan = plan_qdq(model)
    probe = with_outputs(model, plan.activations)
    names = [o.name for o in probe.graph.output]
    hists = HistogramSet()
    hists.update(dict(zip(names, ReferenceEvaluator(probe).run(names, {"images": calib}))))
    return plan, {n: hists[n] for n in plan.activations}


def top1(model, x, y) -> float:
    logits = ReferenceEvaluator(model).run(["logits"], {"images": x})[0]
    return float((logits.argmax(1) == y).mean())


def test_committed_files_are_small_and_consistent(digits, fp32_top1):
    model, x, y, calib = digits
    assert sum(p.stat().st_size for p in DATA.glob("digits*")) < 1_000_000
    assert [i.name for i in model.graph.input] == ["images"] and [o.name for o in model.graph.output] == ["logits"]
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param  # dynamic batch
    assert 13 <= model.opset_import[0].version <= 17
    assert x.shape[1:] == (1, 8, 8) and x.dtype == np.float32 and len(x) == len(y) >= 500
    assert calib.shape[1:] == (1, 8, 8)
    assert fp32_top1 >= 0.95


def test_fp16_cast_model_keeps_top1(digits, fp32_top1):
    model, x, y, _ = digits
    assert abs(top1(convert_to_fp16(model).model, x, y) - fp32_top1) <= 0.002


@pytest.mark.parametrize("algorithm", ["entropy", "minmax", "mse"])
def test_qdq_model_keeps_top1_within_one_point(digits, fp32_top1, calibrated, algorithm):
    model, x, y, _ = digits
    plan, hists = calibrated
    qdq, _ = insert_qdq(model, compute_amaxes(hists, algorithm), plan, strict=True)
    qdq.opset_import[0].version = 19  # the reference evaluator implements DequantizeLinear from opset 19
    assert top1(qdq, x, y) >= fp32_top1 - 0.01


def test_int8_with_fp16_rest_for_strongly_typed_builds(digits, fp32_top1, calibrated):
    from onnx import TensorProto

    from trtkit.quant.qdq import to_fp16_rest

    model, x, y, _ = digits
    plan, hists = calibrated
    qdq, _ = insert_qdq(model, compute_amaxes(hists, "entropy"), plan, strict=True)
    mixed, conversion = to_fp16_rest(qdq)
    onnx.checker.check_model(mixed, full_check=True)
    assert mixed.opset_import[0].version == 19
    scales = {n.input[1] for n in mixed.graph.node if n.op_type == "DequantizeLinear"}
    assert {t.data_type for t in mixed.graph.initializer if t.name in scales} == {TensorProto.FLOAT16}
    assert mixed.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT  # FP32 I/O kept
    assert top1(mixed, x, y) >= fp32_top1 - 0.01
