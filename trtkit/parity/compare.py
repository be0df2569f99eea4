"""Verdicts: each output's metrics judged against a tolerance, with the reason in words."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from trtkit.parity.metrics import OutputMetrics, _jsonable, compute_metrics, elementwise_failures
from trtkit.parity.tolerance import Tolerance


@dataclass
class OutputResult:
    """One output of one trial: its metrics, the verdict, and why.

    Attributes:
        name: output name.
        trial: index of the trial (input set) it comes from.
        passed: the verdict.
        reasons: one sentence per failed check (empty when passed).
        summary: one sentence on the headline metric, whether it passed or not.
        metrics: the :class:`OutputMetrics`, or None when the engine did not produce this output.
        elementwise_failures: elements failing the atol/rtol check (None when that check is off).
        polygraphy_passed: Polygraphy's own verdict with the same atol/rtol (None when not run).
    """

    name: str
    trial: int
    passed: bool
    reasons: list[str] = field(default_factory=list)
    summary: str = ""
    metrics: OutputMetrics | None = None
    elementwise_failures: int | None = None
    polygraphy_passed: bool | None = None

    def to_dict(self) -> dict:
        return _jsonable(
            {
                "name": self.name,
                "trial": self.trial,
                "passed": self.passed,
                "reasons": list(self.reasons),
                "summary": self.summary,
                "elementwise_failures": self.elementwise_failures,
                "polygraphy_passed": self.polygraphy_passed,
                "metrics": self.metrics.to_dict() if self.metrics is not None else None,
            }
        )


def fmt(value: float | None, digits: int = 3) -> str:
    """Numbers in verdict messages: 3 significant digits, scientific below 0.1 and from 1e4 (``7.4e-3``, ``2e-3``)."""
    if value is None:
        return "n/a"
    if value == 0 or 0.1 <= abs(value) < 1e4 or not np.isfinite(value):
        return f"{value:.{digits}g}"
    mantissa, exponent = f"{value:.{digits - 1}e}".split("e")
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"


def _at(index) -> str:
    return f"index {tuple(index)}" if index is not None else "no index"


def judge(metrics: OutputMetrics, tolerance: Tolerance, *, trial: int = 0, out=None, ref=None) -> OutputResult:
    """Judge one output's metrics against a tolerance.

    Args:
        metrics: from :func:`compute_metrics`.
        tolerance: what to meet.
        trial: the trial index, carried into the result.
        out, ref: the arrays themselves; needed only for the element-wise atol/rtol check.

    Returns:
        An :class:`OutputResult` whose ``reasons`` name every failed check.
    """
    name = metrics.name
    result = OutputResult(name=name, trial=trial, passed=True, metrics=metrics)
    if not metrics.shapes_match:
        result.reasons.append(
            f"output '{name}': engine shape {tuple(metrics.shape)} differs from the ONNX model's "
            f"{tuple(metrics.ref_shape)}"
        )
        result.summary = result.reasons[0]
        result.passed = False
        return result
    result.reasons.extend(_nonfinite_reasons(metrics))
    result.summary = _ratio_sentence(metrics, tolerance)
    if metrics.error_ratio is not None and metrics.error_ratio > tolerance.max_error_ratio:
        result.reasons.append(result.summary)
    result.reasons.extend(_optional_checks(metrics, tolerance))
    if tolerance.elementwise and out is not None and ref is not None:
        result.elementwise_failures, reason = _elementwise(name, out, ref, tolerance)
        result.reasons.extend([reason] if reason else [])
    result.passed = not result.reasons
    return result


def _ratio_sentence(m: OutputMetrics, tol: Tolerance) -> str:
    if m.error_ratio is None:
        return f"output '{m.name}': no finite values to compare"
    op = ">" if m.error_ratio > tol.max_error_ratio else "<="
    if m.ratio_basis == "absolute":
        head = f"max abs error {fmt(m.max_abs_error)} (the reference is all zeros)"
    else:
        ratio = _distinct(m.error_ratio, tol)
        head = f"max abs error {fmt(m.max_abs_error)} / max |ref| {fmt(m.max_abs_ref)} = {ratio}"
    worst = f"worst at {_at(m.worst_index)}: engine {fmt(m.worst_value)}, reference {fmt(m.worst_ref)}"
    return f"output '{m.name}': {head} {op} {fmt(tol.max_error_ratio)} allowed {tol.source} ({worst})"


def _distinct(ratio: float, tol: Tolerance) -> str:
    """The ratio with enough digits that "2.0004e-3 > 2e-3" never reads "2e-3 > 2e-3"."""
    for digits in range(3, 8):
        text = fmt(ratio, digits)
        if ratio == tol.max_error_ratio or text != fmt(tol.max_error_ratio, digits):
            return text
    return repr(ratio)


def _nonfinite_reasons(m: OutputMetrics) -> list[str]:
    nf, reasons = m.nonfinite, []
    where = f"first at {_at(nf.first_index)}"
    if nf.engine_bad:
        reasons.append(
            f"output '{m.name}': the engine output has {nf.out_nan} NaN and {nf.out_inf} Inf values where the ONNX "
            f"model's output does not ({where})"
        )
    if nf.reference_bad:
        reasons.append(
            f"output '{m.name}': the ONNX model itself gives {nf.ref_nan} NaN and {nf.ref_inf} Inf values where the "
            f"engine does not ({where}); use inputs on which the model is finite"
        )
    return reasons


def _optional_checks(m: OutputMetrics, tol: Tolerance) -> list[str]:
    reasons = []
    if tol.min_cosine is not None and m.cosine is not None and m.cosine < tol.min_cosine:
        reasons.append(f"output '{m.name}': cosine similarity {m.cosine:.6f} < {tol.min_cosine} required")
    if tol.min_top1 is not None and m.top1_agreement is not None and m.top1_agreement < tol.min_top1:
        reasons.append(f"output '{m.name}': top-1 agreement {m.top1_agreement:.1%} < {tol.min_top1:.1%} required")
    return reasons


def _elementwise(name: str, out, ref, tol: Tolerance) -> tuple[int, str | None]:
    atol, rtol = tol.atol or 0.0, tol.rtol or 0.0
    count, worst = elementwise_failures(out, ref, atol=atol, rtol=rtol)
    if not count:
        return 0, None
    size = int(np.asarray(ref).size)
    return count, (
        f"output '{name}': {count} of {size} elements exceed both atol {fmt(atol)} and rtol {fmt(rtol)} x |ref| "
        f"(furthest over at {_at(worst)})"
    )


def compare_outputs(
    outputs: Mapping[str, np.ndarray],
    reference: Mapping[str, np.ndarray],
    tolerance: Tolerance,
    *,
    trial: int = 0,
) -> list[OutputResult]:
    """Compare every reference output with the engine's output of the same name.

    Args:
        outputs: the engine's outputs by name.
        reference: the ONNX model's outputs by name (every one is judged; engine-only outputs are ignored).
        tolerance: what each output must meet (``tolerance.for_output(name)``).
        trial: the trial index, carried into the results.

    Returns:
        One :class:`OutputResult` per reference output, in the reference's order.
    """
    results = []
    for name, ref in reference.items():
        if name not in outputs:
            given = ", ".join(f"'{n}'" for n in outputs) or "none"
            reason = f"output '{name}': the engine has no output of that name (engine outputs: {given})"
            results.append(OutputResult(name=name, trial=trial, passed=False, reasons=[reason], summary=reason))
            continue
        out = outputs[name]
        metrics = compute_metrics(name, out, ref)
        results.append(judge(metrics, tolerance.for_output(name), trial=trial, out=out, ref=ref))
    return results
