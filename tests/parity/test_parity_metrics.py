"""Metrics on hand-made arrays: exact values, worst index, NaN/Inf bookkeeping."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trtkit.parity.metrics import compute_metrics, cosine_similarity, elementwise_failures, top1_agreement


def test_max_abs_error_ratio_and_worst_index_are_exact():
    ref = np.array([[1.0, -4.0], [2.0, 0.5]], dtype=np.float32)
    out = np.array([[1.5, -4.0], [2.0, 0.25]], dtype=np.float32)
    m = compute_metrics("y", out, ref)
    assert m.max_abs_error == 0.5
    assert m.max_abs_ref == 4.0
    assert m.error_ratio == 0.125
    assert m.mean_abs_error == pytest.approx(0.75 / 4)
    assert m.worst_index == (0, 0)
    assert (m.worst_value, m.worst_ref) == (1.5, 1.0)
    assert m.ratio_basis == "max_abs_ref"


def test_relative_error_percentiles_floor_the_denominator():
    ref = np.array([0.0, 1.0, 2.0, 4.0])
    out = np.array([0.001, 1.1, 2.0, 4.0])
    m = compute_metrics("y", out, ref)
    # |d| / max(|ref|, 1e-3 * 4): the zero reference divides by 0.004, not by 0
    rel = np.array([0.001 / 0.004, 0.1, 0.0, 0.0])
    assert m.rel_error["max"] == pytest.approx(0.25)
    assert m.rel_error["p50"] == pytest.approx(np.percentile(rel, 50))
    assert m.rel_error["p99"] == pytest.approx(np.percentile(rel, 99))


def test_all_zero_reference_falls_back_to_absolute_error():
    m = compute_metrics("y", np.array([0.0, 1e-3]), np.zeros(2))
    assert m.ratio_basis == "absolute"
    assert m.error_ratio == 1e-3
    assert m.cosine == 0.0


def test_identical_outputs_have_zero_error_and_cosine_one():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    m = compute_metrics("y", x, x.copy())
    assert (m.max_abs_error, m.error_ratio, m.mean_abs_error) == (0.0, 0.0, 0.0)
    assert m.cosine == 1.0
    assert m.top1_agreement == 1.0


def test_shape_mismatch_fills_only_shapes():
    m = compute_metrics("y", np.zeros((1, 10)), np.zeros((1, 11)))
    assert not m.shapes_match
    assert (m.shape, m.ref_shape) == ((1, 10), (1, 11))
    assert m.max_abs_error is None and m.error_ratio is None


def test_nan_in_engine_output_is_counted_and_excluded_from_errors():
    ref = np.array([1.0, 2.0, 3.0, 4.0])
    out = np.array([1.0, np.nan, 3.5, np.inf])
    m = compute_metrics("y", out, ref)
    assert (m.nonfinite.out_nan, m.nonfinite.out_inf) == (1, 1)
    assert m.nonfinite.engine_bad == 2 and m.nonfinite.reference_bad == 0
    assert m.nonfinite.first_index == (1,)
    assert m.max_abs_error == 0.5  # over the finite positions only
    assert m.top1_agreement is None


def test_matching_nan_and_inf_are_not_errors():
    ref = np.array([np.nan, np.inf, -np.inf, 1.0])
    out = np.array([np.nan, np.inf, -np.inf, 1.0])
    m = compute_metrics("y", out, ref)
    assert m.nonfinite.matched == 3
    assert m.nonfinite.engine_bad == 0 and m.nonfinite.reference_bad == 0
    assert m.max_abs_error == 0.0


def test_opposite_infinities_and_reference_nan_are_disagreements():
    ref = np.array([np.inf, np.nan, 1.0])
    out = np.array([-np.inf, 2.0, 1.0])
    m = compute_metrics("y", out, ref)
    assert m.nonfinite.out_inf == 1
    assert (m.nonfinite.ref_inf, m.nonfinite.ref_nan) == (1, 1)
    assert m.nonfinite.first_index == (0,)


def test_all_nonfinite_leaves_error_metrics_empty():
    m = compute_metrics("y", np.array([np.nan]), np.array([1.0]))
    assert m.error_ratio is None and m.cosine is None


def test_cosine_similarity_values():
    assert cosine_similarity([1, 0], [0, 1]) == 0.0
    assert cosine_similarity([1, 2], [2, 4]) == pytest.approx(1.0)
    assert cosine_similarity([1, 0], [-1, 0]) == -1.0
    assert cosine_similarity([0, 0], [0, 0]) == 1.0
    assert cosine_similarity([1, 1], [1, 0]) == pytest.approx(1 / math.sqrt(2))


def test_top1_agreement_for_classifier_shapes_only():
    ref = np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    out = np.array([[0.2, 0.8], [0.1, 0.9], [0.3, 0.7], [0.6, 0.4]])
    assert top1_agreement(out, ref) == 0.75
    assert top1_agreement(out.reshape(4, 2, 1, 1), ref.reshape(4, 2, 1, 1)) == 0.75
    assert top1_agreement(out.reshape(4, 2, 1), ref.reshape(4, 2, 1)) is None  # (N, A, K): not a classifier
    assert top1_agreement(np.zeros((2, 1)), np.zeros((2, 1))) is None  # one class
    assert top1_agreement(np.zeros((2, 2, 3, 3)), np.zeros((2, 2, 3, 3))) is None  # feature map


def test_elementwise_failures_follow_polygraphys_rule():
    ref = np.array([1.0, 10.0, 100.0, 0.0])
    out = np.array([1.05, 10.5, 100.5, 0.02])
    # allowance per element: max(atol 0.1, rtol 0.01 * |ref|) = 0.1, 0.1, 1.0, 0.1
    assert elementwise_failures(out, ref, atol=0.1, rtol=0.01) == (1, (1,))
    assert elementwise_failures(out, ref, atol=0.6, rtol=0.0) == (0, None)
    count, worst = elementwise_failures(out, ref, atol=0.0, rtol=0.004)
    assert count == 4 and worst == (1,)


def test_integer_and_bool_outputs_are_compared_numerically():
    m = compute_metrics("idx", np.array([3, 7], dtype=np.int64), np.array([3, 5], dtype=np.int64))
    assert m.max_abs_error == 2.0 and m.error_ratio == pytest.approx(2 / 5)
    b = compute_metrics("mask", np.array([True, False]), np.array([True, True]))
    assert b.max_abs_error == 1.0


def test_to_dict_is_json_ready():
    import json

    m = compute_metrics("y", np.array([[1.0, np.nan]]), np.array([[1.0, 2.0]]))
    data = m.to_dict()
    json.dumps(data)
    assert data["worst_index"] == [0, 0]
    assert data["nonfinite"]["engine_bad"] == 1
