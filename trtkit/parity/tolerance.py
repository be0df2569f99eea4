"""Tolerances for parity verdicts, with defaults that depend on the engine's precision."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Mapping

from trtkit.errors import TrtkitError, UsageError
from trtkit.manifest import as_manifest

# Allowed max |out - ref| / max |ref| per precision (fp32: TF32 off). fp16 has a 10-bit mantissa (eps 9.8e-4) and
# errors accumulate over layers; bf16 has 7 bits (eps 7.8e-3); int8 spends 8 bits on the whole range of a tensor.
DEFAULT_ERROR_RATIO = {
    "fp32": 1e-4,
    "tf32": 2e-3,
    "fp16": 1e-2,
    "bf16": 5e-2,
    "int8": 1e-1,
}
# int8 errors are spread over every element, so the max-error check alone would pass an engine whose outputs are
# uniformly noisy; the cosine check catches that.
DEFAULT_MIN_COSINE = {"int8": 0.99}

PRECISIONS = tuple(DEFAULT_ERROR_RATIO)


@dataclass(frozen=True)
class Tolerance:
    """What an output must meet to PASS.

    Attributes:
        precision: the precision the defaults were taken from ("fp32", "tf32", "fp16", "bf16", "int8").
        max_error_ratio: allowed max |out - ref| / max |ref|.
        atol, rtol: optional element-wise check, Polygraphy's rule: an element fails when its error exceeds both
            ``atol`` and ``rtol * |ref|``. Off when both are None; a missing one counts as 0.
        min_cosine: optional lower bound on the cosine similarity.
        min_top1: optional lower bound on top-1 agreement (classifier-like outputs only).
        source: how the threshold was chosen, used in messages ("for fp16", "by --metric-threshold").
        per_output: ((output name, max_error_ratio), ...) overriding ``max_error_ratio`` for those outputs (a
            detector's boxes and scores rarely share one limit).
    """

    precision: str = "fp32"
    max_error_ratio: float = DEFAULT_ERROR_RATIO["fp32"]
    atol: float | None = None
    rtol: float | None = None
    min_cosine: float | None = None
    min_top1: float | None = None
    source: str = "for fp32"
    per_output: tuple = ()

    def for_output(self, name: str) -> "Tolerance":
        """The tolerance that applies to output ``name``."""
        ratio = dict(self.per_output).get(name)
        if ratio is None:
            return self
        return replace(self, max_error_ratio=ratio, source="by metric_threshold for this output", per_output=())

    @property
    def elementwise(self) -> bool:
        """Whether the element-wise atol/rtol check is on."""
        return self.atol is not None or self.rtol is not None

    def to_dict(self) -> dict:
        data = asdict(self)
        data["per_output"] = dict(self.per_output)
        return data


def tolerance_for(
    precision: str | None = None,
    *,
    max_error_ratio: float | Mapping[str, float] | None = None,
    atol: float | None = None,
    rtol: float | None = None,
    min_cosine: float | None = None,
    min_top1: float | None = None,
) -> Tolerance:
    """The default tolerance of a precision, with any given value overriding its default.

    Args:
        precision: one of ``PRECISIONS`` (None means "fp32").
        max_error_ratio: overrides the precision's allowed max |out - ref| / max |ref| (``--metric-threshold``):
            one number for every output, or {output name: number} for some (the key "" sets every other one).
        atol, rtol: turn on the element-wise check (``--atol``, ``--rtol``).
        min_cosine, min_top1: turn on those checks (``--min-cosine``, ``--min-top1``).

    Returns:
        A :class:`Tolerance`.

    Raises:
        TrtkitError: unknown precision, or a negative / out-of-range value.
    """
    precision = (precision or "fp32").lower()
    if precision not in DEFAULT_ERROR_RATIO:
        raise TrtkitError(
            f"Unknown precision '{precision}' for parity tolerances; use one of: {', '.join(PRECISIONS)}."
        )
    tol = Tolerance(
        precision=precision,
        max_error_ratio=DEFAULT_ERROR_RATIO[precision],
        min_cosine=DEFAULT_MIN_COSINE.get(precision),
        source=f"for {precision}",
    )
    if isinstance(max_error_ratio, Mapping):
        per_output = {k: float(v) for k, v in max_error_ratio.items()}
        max_error_ratio = per_output.pop("", None)
        tol = replace(tol, per_output=tuple(sorted(per_output.items())))
    if max_error_ratio is not None:
        tol = replace(tol, max_error_ratio=max_error_ratio, source="by metric_threshold")
    tol = replace(tol, atol=atol, rtol=rtol)
    if min_cosine is not None:
        tol = replace(tol, min_cosine=min_cosine)
    if min_top1 is not None:
        tol = replace(tol, min_top1=min_top1)
    _validate(tol)
    return tol


def _validate(tol: Tolerance) -> None:
    values = [(name, name, getattr(tol, name)) for name in ("atol", "rtol")]
    values += [("max_error_ratio", "metric_threshold", tol.max_error_ratio)]
    values += [(f"max_error_ratio of '{output}'", "metric_threshold", ratio) for output, ratio in tol.per_output]
    for name, field, value in values:
        if value is not None and not value >= 0:
            raise UsageError(f"Tolerance {name} must be >= 0, got {value}.", field=field, accepted="a number >= 0")
    for name in ("min_cosine", "min_top1"):
        value = getattr(tol, name)
        if value is not None and not -1.0 <= value <= 1.0:
            raise UsageError(
                f"Tolerance {name} must be between -1 and 1 (cosine) or 0 and 1 (top-1), got {value}.", field=name
            )


def precision_from_manifest(manifest) -> str | None:
    """The parity precision an engine was built for, from its trtkit manifest; None when it does not say.

    Args:
        manifest: a :class:`trtkit.manifest.Manifest`, its JSON dict, or None.

    An fp32 build with TF32 on (TensorRT's default) is judged as "tf32": its convolutions and matrix products
    round inputs to a 10-bit mantissa.
    """
    manifest = as_manifest(manifest)
    if manifest is None or manifest.build is None:
        return None
    precision = manifest.build.precision
    if not isinstance(precision, str) or precision.lower() not in DEFAULT_ERROR_RATIO:
        return None
    precision = precision.lower()
    return "tf32" if precision == "fp32" and manifest.build.tf32 else precision
