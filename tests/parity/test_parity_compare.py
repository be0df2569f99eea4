"""Verdicts and their messages; tolerances per precision."""

from __future__ import annotations

import numpy as np
import pytest

from trtkit.errors import TrtkitError
from trtkit.parity.compare import compare_outputs, fmt, judge
from trtkit.parity.metrics import compute_metrics
from trtkit.parity.tolerance import DEFAULT_ERROR_RATIO, precision_from_manifest, tolerance_for


def _logits(max_abs_error: float, scale: float = 4.2):
    ref = np.array([[scale, 1.0, -2.0]], dtype=np.float64)
    out = ref.copy()
    out[0, 1] += max_abs_error
    return out, ref


def test_fp16_failure_message_names_every_number():
    out, ref = _logits(3.1e-2)
    result = judge(compute_metrics("logits", out, ref), tolerance_for("fp16", max_error_ratio=2e-3))
    assert not result.passed
    assert result.reasons == [
        "output 'logits': max abs error 3.1e-2 / max |ref| 4.2 = 7.38e-3 > 2e-3 allowed by metric_threshold "
        "(worst at index (0, 1): engine 1.03, reference 1)"
    ]


def test_default_fp16_tolerance_passes_the_same_error_and_says_why():
    out, ref = _logits(3.1e-2)
    result = judge(compute_metrics("logits", out, ref), tolerance_for("fp16"))
    assert result.passed and result.reasons == []
    assert "= 7.38e-3 <= 1e-2 allowed for fp16" in result.summary


@pytest.mark.parametrize("precision, passes", [("fp32", False), ("tf32", False), ("fp16", True), ("int8", True)])
def test_threshold_depends_on_precision(precision, passes):
    out, ref = _logits(4.2 * 5e-3)  # ratio 5e-3
    assert judge(compute_metrics("y", out, ref), tolerance_for(precision)).passed is passes


def test_boundary_is_inclusive():
    ref = np.array([1.0, -2.0])
    out = ref + np.array([0.0, 0.5])  # exactly representable: ratio 0.25
    assert judge(compute_metrics("y", out, ref), tolerance_for("tf32", max_error_ratio=0.25)).passed
    assert not judge(compute_metrics("y", out, ref), tolerance_for("tf32", max_error_ratio=0.2499)).passed


def test_nan_in_engine_output_fails_with_index():
    ref = np.array([[1.0, 2.0], [3.0, 4.0]])
    out = np.array([[1.0, 2.0], [np.nan, 4.0]])
    result = judge(compute_metrics("y", out, ref), tolerance_for("fp16"))
    assert not result.passed
    assert result.reasons[0] == (
        "output 'y': the engine output has 1 NaN and 0 Inf values where the ONNX model's output does not "
        "(first at index (1, 0))"
    )


def test_nan_in_reference_fails_and_blames_the_model():
    result = judge(compute_metrics("y", np.array([1.0, 2.0]), np.array([1.0, np.inf])), tolerance_for("fp32"))
    assert not result.passed
    assert "the ONNX model itself gives 0 NaN and 1 Inf values" in result.reasons[0]
    assert "use inputs on which the model is finite" in result.reasons[0]


def test_shared_nan_passes():
    x = np.array([1.0, np.nan])
    assert judge(compute_metrics("y", x, x.copy()), tolerance_for("fp32")).passed


def test_shape_mismatch_fails_with_both_shapes():
    result = judge(compute_metrics("y", np.zeros((1, 10)), np.zeros((1, 11))), tolerance_for("fp32"))
    assert result.reasons == ["output 'y': engine shape (1, 10) differs from the ONNX model's (1, 11)"]


def test_all_zero_reference_message():
    result = judge(compute_metrics("y", np.array([0.0, 0.5]), np.zeros(2)), tolerance_for("fp16"))
    assert not result.passed
    assert "max abs error 0.5 (the reference is all zeros) > 1e-2 allowed for fp16" in result.reasons[0]


def test_elementwise_check_counts_and_needs_arrays():
    ref = np.array([1.0, 10.0, 100.0])
    out = np.array([1.0, 10.5, 100.5])
    tol = tolerance_for("bf16", atol=0.1, rtol=0.001)
    result = judge(compute_metrics("y", out, ref), tol, out=out, ref=ref)
    assert result.elementwise_failures == 2
    assert result.reasons == [
        "output 'y': 2 of 3 elements exceed both atol 0.1 and rtol 1e-3 x |ref| (furthest over at index (1,))"
    ]


def test_cosine_and_top1_checks():
    ref = np.array([[0.0, 1.0], [1.0, 0.0]])
    out = np.array([[1.0, 0.0], [1.0, 0.0]])
    tol = tolerance_for("int8", max_error_ratio=10.0, min_top1=0.9)
    result = judge(compute_metrics("probs", out, ref), tol)
    assert result.reasons == [
        "output 'probs': cosine similarity 0.500000 < 0.99 required",
        "output 'probs': top-1 agreement 50.0% < 90.0% required",
    ]


def test_compare_outputs_reports_missing_output_and_ignores_extra():
    ref = {"a": np.ones(2), "b": np.ones(2)}
    results = compare_outputs({"a": np.ones(2), "debug": np.zeros(1)}, ref, tolerance_for("fp32"), trial=3)
    assert [(r.name, r.passed, r.trial) for r in results] == [("a", True, 3), ("b", False, 3)]
    assert results[1].reasons == ["output 'b': the engine has no output of that name (engine outputs: 'a', 'debug')"]


def test_tolerance_defaults_and_overrides():
    assert DEFAULT_ERROR_RATIO == {"fp32": 1e-4, "tf32": 2e-3, "fp16": 1e-2, "bf16": 5e-2, "int8": 1e-1}
    tol = tolerance_for("FP16", atol=1e-3)
    assert (tol.precision, tol.max_error_ratio, tol.atol, tol.rtol, tol.elementwise) == ("fp16", 1e-2, 1e-3, None, True)
    assert tolerance_for(None).precision == "fp32"
    assert tolerance_for("int8").min_cosine == 0.99
    assert tolerance_for("int8", min_cosine=0.9).min_cosine == 0.9


def test_tolerance_errors_say_what_is_allowed():
    with pytest.raises(TrtkitError, match="Unknown precision 'fp8'.*fp32, tf32, fp16, bf16, int8"):
        tolerance_for("fp8")
    with pytest.raises(TrtkitError, match="atol must be >= 0, got -1"):
        tolerance_for("fp32", atol=-1)
    with pytest.raises(TrtkitError, match="min_top1 must be between"):
        tolerance_for("fp32", min_top1=2)


def test_precision_from_manifest():
    assert precision_from_manifest({"build": {"precision": "fp32", "tf32": True}}) == "tf32"
    assert precision_from_manifest({"build": {"precision": "fp32", "tf32": False}}) == "fp32"
    assert precision_from_manifest({"build": {"precision": "fp16", "tf32": True}}) == "fp16"
    assert precision_from_manifest({"build": {"precision": "int8"}}) == "int8"
    assert precision_from_manifest({"build": {}}) is None
    assert precision_from_manifest(None) is None


@pytest.mark.parametrize("value, text", [(3.1e-2, "3.1e-2"), (2e-3, "2e-3"), (7.38e-3, "7.38e-3"), (4.2, "4.2"),
                                         (0.0, "0"), (12345.0, "1.23e4"), (None, "n/a")])
def test_number_format(value, text):
    assert fmt(value) == text


def test_a_ratio_just_over_the_limit_shows_the_digits_that_differ():
    ref = np.array([1.0, 1000.0])
    out = ref + np.array([0.0, 2.0004])  # ratio 2.0004e-3
    result = judge(compute_metrics("y", out, ref), tolerance_for("tf32"))
    assert "= 2.0004e-3 > 2e-3 allowed for tf32" in result.reasons[0]


def test_per_output_thresholds():
    tol = tolerance_for("fp16", max_error_ratio={"boxes": 5e-2, "": 2e-2})
    assert tol.max_error_ratio == 2e-2 and tol.source == "by metric_threshold"
    assert tol.for_output("boxes").max_error_ratio == 5e-2
    assert tol.for_output("scores") is tol
    assert tol.to_dict()["per_output"] == {"boxes": 5e-2}
    ref = {"boxes": np.array([10.0, 20.0]), "scores": np.array([1.0, 0.5])}
    out = {"boxes": np.array([10.0, 20.8]), "scores": np.array([1.0, 0.53])}  # ratios 4e-2 and 3e-2
    boxes, scores = compare_outputs(out, ref, tol)
    assert boxes.passed and "<= 5e-2 allowed by metric_threshold for this output" in boxes.summary
    assert not scores.passed and "= 3e-2 > 2e-2 allowed by metric_threshold" in scores.reasons[0]
    assert tolerance_for("fp16", max_error_ratio={"boxes": 5e-2}).max_error_ratio == 1e-2
    with pytest.raises(TrtkitError, match="max_error_ratio of 'boxes' must be >= 0, got -1.0"):
        tolerance_for("fp16", max_error_ratio={"boxes": -1})
