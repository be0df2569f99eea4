"""Per-output error metrics between an engine's output and the ONNX model's reference output (pure numpy).

The headline metric is the largest absolute error divided by the largest absolute reference value (``error_ratio``).
It does not depend on the output's scale, which makes one threshold per precision meaningful for logits, feature maps
and boxes alike; an absolute ``atol`` does not.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

# Relative errors divide by |ref|; near-zero references would dominate every percentile, so the denominator is
# floored at this fraction of the largest |ref| of the output.
REL_FLOOR_FRACTION = 1e-3
REL_PERCENTILES = (50, 90, 99)


@dataclass
class NonFinite:
    """Where the engine output and the reference disagree about NaN / Inf.

    Attributes:
        out_nan, out_inf: NaN / Inf in the engine output where the reference holds something else.
        ref_nan, ref_inf: NaN / Inf in the reference where the engine output holds something else.
        matched: positions where both hold the same non-finite value (NaN and NaN, +Inf and +Inf); not errors.
        first_index: index of the first disagreeing position, or None.
    """

    out_nan: int = 0
    out_inf: int = 0
    ref_nan: int = 0
    ref_inf: int = 0
    matched: int = 0
    first_index: tuple[int, ...] | None = None

    @property
    def engine_bad(self) -> int:
        """NaN/Inf values of the engine output where the reference disagrees."""
        return self.out_nan + self.out_inf

    @property
    def reference_bad(self) -> int:
        """NaN/Inf values of the reference where the engine output disagrees."""
        return self.ref_nan + self.ref_inf


@dataclass
class OutputMetrics:
    """Error metrics of one output of one trial.

    All error figures are over positions where both arrays are finite. ``None`` means "not computed" (shapes
    differ, or the metric does not apply, e.g. ``top1_agreement`` for outputs that are not classifier-like).

    Attributes:
        name: output name.
        shape, ref_shape: shapes of the engine output and of the reference.
        dtype, ref_dtype: dtype names.
        size: number of elements.
        max_abs_error: largest |out - ref|.
        max_abs_ref: largest |ref|.
        error_ratio: max_abs_error / max_abs_ref (max_abs_error itself when the reference is all zeros).
        ratio_basis: "max_abs_ref", or "absolute" when the reference is all zeros.
        mean_abs_error: mean |out - ref|.
        rel_error: percentiles ("p50", "p90", "p99", "max") of |out - ref| / max(|ref|, 1e-3 * max|ref|).
        cosine: cosine similarity of the flattened arrays (1.0 for two all-zero arrays).
        top1_agreement: for (N, C) or (N, C, 1, 1) float outputs, the share of rows whose argmax agrees.
        worst_index: index of max_abs_error; worst_value / worst_ref: the two values there.
        nonfinite: NaN/Inf disagreements (see :class:`NonFinite`).
    """

    name: str
    shape: tuple[int, ...]
    ref_shape: tuple[int, ...]
    dtype: str
    ref_dtype: str
    size: int = 0
    max_abs_error: float | None = None
    max_abs_ref: float | None = None
    error_ratio: float | None = None
    ratio_basis: str = "max_abs_ref"
    mean_abs_error: float | None = None
    rel_error: dict[str, float] = field(default_factory=dict)
    cosine: float | None = None
    top1_agreement: float | None = None
    worst_index: tuple[int, ...] | None = None
    worst_value: float | None = None
    worst_ref: float | None = None
    nonfinite: NonFinite = field(default_factory=NonFinite)

    @property
    def shapes_match(self) -> bool:
        return tuple(self.shape) == tuple(self.ref_shape)

    def to_dict(self) -> dict:
        """A JSON-ready dict (tuples as lists, numpy scalars as Python numbers)."""
        data = asdict(self)
        data["nonfinite"]["engine_bad"] = self.nonfinite.engine_bad
        data["nonfinite"]["reference_bad"] = self.nonfinite.reference_bad
        return _jsonable(data)


def compute_metrics(name: str, out, ref) -> OutputMetrics:
    """Compare one engine output with its reference.

    Args:
        name: the output's name (carried into the result).
        out: the engine's output (array-like).
        ref: the ONNX model's output for the same inputs.

    Returns:
        :class:`OutputMetrics`. When the shapes differ only shapes and dtypes are filled in.
    """
    out, ref = np.asarray(out), np.asarray(ref)
    metrics = OutputMetrics(
        name=name, shape=tuple(out.shape), ref_shape=tuple(ref.shape), dtype=str(out.dtype), ref_dtype=str(ref.dtype)
    )
    if not metrics.shapes_match:
        return metrics
    metrics.size = int(out.size)
    out64, ref64 = out.astype(np.float64), ref.astype(np.float64)
    finite, metrics.nonfinite = _nonfinite(out64, ref64)
    _fill_errors(metrics, out64, ref64, finite)
    if metrics.nonfinite.engine_bad == 0 and metrics.nonfinite.reference_bad == 0:
        metrics.top1_agreement = top1_agreement(out64, ref64)
    return metrics


def _nonfinite(out: np.ndarray, ref: np.ndarray) -> tuple[np.ndarray, NonFinite]:
    """Mask of positions where both are finite, and the count of NaN/Inf disagreements."""
    out_fin, ref_fin = np.isfinite(out), np.isfinite(ref)
    with np.errstate(invalid="ignore"):
        same_inf = np.isinf(out) & (out == ref)
    matched = (np.isnan(out) & np.isnan(ref)) | same_inf
    bad_out = ~out_fin & ~matched
    bad_ref = ~ref_fin & ~matched
    report = NonFinite(
        out_nan=int(np.count_nonzero(np.isnan(out) & bad_out)),
        out_inf=int(np.count_nonzero(np.isinf(out) & bad_out)),
        ref_nan=int(np.count_nonzero(np.isnan(ref) & bad_ref)),
        ref_inf=int(np.count_nonzero(np.isinf(ref) & bad_ref)),
        matched=int(np.count_nonzero(matched)),
    )
    disagree = bad_out | bad_ref
    if disagree.any():
        report.first_index = _index(int(np.argmax(disagree.ravel())), out.shape)
    return out_fin & ref_fin, report


def _fill_errors(m: OutputMetrics, out: np.ndarray, ref: np.ndarray, finite: np.ndarray) -> None:
    """Absolute, relative and cosine metrics over the finite positions."""
    if not finite.any():
        return
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf at masked-out positions
        diff = np.where(finite, np.abs(out - ref), -1.0)
    flat = int(np.argmax(diff.ravel()))
    m.worst_index = _index(flat, out.shape)
    m.worst_value, m.worst_ref = float(out.ravel()[flat]), float(ref.ravel()[flat])
    d, r, o = diff[finite], np.abs(ref[finite]), out[finite]
    m.max_abs_error, m.max_abs_ref, m.mean_abs_error = float(d.max()), float(r.max()), float(d.mean())
    if m.max_abs_ref > 0:
        m.error_ratio = m.max_abs_error / m.max_abs_ref
    else:
        m.error_ratio, m.ratio_basis = m.max_abs_error, "absolute"
    floor = REL_FLOOR_FRACTION * m.max_abs_ref if m.max_abs_ref > 0 else 1.0
    rel = d / np.maximum(r, floor)
    m.rel_error = {f"p{p}": float(np.percentile(rel, p)) for p in REL_PERCENTILES}
    m.rel_error["max"] = float(rel.max())
    m.cosine = cosine_similarity(o, ref[finite])


def cosine_similarity(a, b) -> float:
    """Cosine similarity of two arrays, flattened; 1.0 when both are all zeros, 0.0 when only one is."""
    a, b = np.asarray(a, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 or nb == 0.0:
        return 1.0 if na == nb else 0.0
    return float(np.clip(np.dot(a, b) / (na * nb), -1.0, 1.0))


def top1_agreement(out, ref) -> float | None:
    """Share of rows whose argmax over classes agrees, for classifier-like outputs; None for other shapes.

    Classifier-like means (N, C) or (N, C, 1, 1) with C >= 2: detection heads and feature maps are not compared
    this way because an argmax over their last axis means nothing.
    """
    out, ref = np.asarray(out), np.asarray(ref)
    if out.shape != ref.shape or out.ndim not in (2, 4) or out.shape[0] == 0 or out.shape[1] < 2:
        return None
    if out.ndim == 4 and out.shape[2:] != (1, 1):
        return None
    out2, ref2 = out.reshape(out.shape[0], -1), ref.reshape(ref.shape[0], -1)
    return float(np.mean(np.argmax(out2, axis=1) == np.argmax(ref2, axis=1)))


def elementwise_failures(out, ref, *, atol: float, rtol: float) -> tuple[int, tuple[int, ...] | None]:
    """Count elements failing Polygraphy's element-wise rule: |out - ref| > atol and |out - ref| > rtol * |ref|.

    Args:
        out, ref: arrays of the same shape.
        atol, rtol: tolerances (0 disables one side: an element then has to meet the other).

    Returns:
        (number of failing elements, index of the element with the largest excess over its allowance or None).
        Non-finite positions are left to the NaN/Inf check and not counted here.
    """
    out, ref = np.asarray(out, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        diff = np.abs(out - ref)
        allowed = np.maximum(atol, rtol * np.abs(ref))
        failing = np.isfinite(diff) & (diff > allowed)
    count = int(np.count_nonzero(failing))
    if count == 0:
        return 0, None
    excess = np.where(failing, diff - allowed, -np.inf)
    return count, _index(int(np.argmax(excess.ravel())), out.shape)


def _index(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(int(flat), shape)) if shape else ()


def _jsonable(value):
    """Tuples to lists, numpy scalars to Python, non-finite floats to strings JSON can carry."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return str(value)
    return value
