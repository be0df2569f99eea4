"""The result of a parity run: every output of every trial, the worst trial per output, and the overall verdict."""

from __future__ import annotations

from dataclasses import dataclass, field

from trtkit.parity.compare import OutputResult
from trtkit.parity.metrics import _jsonable
from trtkit.parity.tolerance import Tolerance

SCHEMA = "trtkit.parity/1"


@dataclass
class ParityReport:
    """What :func:`trtkit.parity.compare_engine_to_onnx` found.

    Attributes:
        model: the ONNX model's description (path, or "<ModelProto>").
        engine: the engine's description (path, "<bytes>", or the callable's name).
        tolerance: the :class:`Tolerance` applied.
        results: every output of every trial, trial-major.
        shapes: the input shapes used, by input name.
        trials: how many input sets were run.
        seed: seed of the random inputs (None when inputs were given).
        input_source: "random" or where the inputs came from.
        reference_backend: "onnx-reference" or "onnxruntime".
        notes: things the user should know that are not failures (assumed precision, skipped Polygraphy check).
        timings: seconds spent in the reference and in the engine, by those keys.
    """

    model: str
    engine: str
    tolerance: Tolerance
    results: list[OutputResult] = field(default_factory=list)
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    trials: int = 1
    seed: int | None = None
    input_source: str = "random"
    reference_backend: str = "onnx-reference"
    notes: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """True when every output of every trial passed (and there was something to compare)."""
        return bool(self.results) and all(r.passed for r in self.results)

    @property
    def precision(self) -> str:
        return self.tolerance.precision

    @property
    def max_error_ratio(self) -> float | None:
        """The largest max |out - ref| / max |ref| over every output and trial (one number for summary tables)."""
        ratios = [
            r.metrics.error_ratio for r in self.results if r.metrics is not None and r.metrics.error_ratio is not None
        ]
        return max(ratios) if ratios else None

    def worst(self) -> list[OutputResult]:
        """One result per output: its failing trial if any, else the trial with the largest error ratio."""
        by_name: dict[str, OutputResult] = {}
        for result in self.results:
            kept = by_name.get(result.name)
            if kept is None or _badness(result) > _badness(kept):
                by_name[result.name] = result
        return list(by_name.values())

    def failures(self) -> list[str]:
        """Every failure reason, without repeats, worst trial first per output."""
        seen: dict[str, None] = {}
        for result in self.worst() + self.results:
            for reason in result.reasons:
                seen.setdefault(reason, None)
        return list(seen)

    def verdict(self) -> str:
        """One line: PASS or FAIL, and why."""
        worst = self.worst()
        if not worst:
            return "FAIL: nothing was compared (the ONNX model has no outputs)"
        failed = [r for r in worst if not r.passed]
        trials = f"{self.trials} trial{'s' if self.trials != 1 else ''}"
        if not failed:
            return f"PASS: {len(worst)} output(s) within tolerance {self.tolerance.source} over {trials}"
        names = ", ".join(f"'{r.name}'" for r in failed)
        return f"FAIL: {len(failed)} of {len(worst)} output(s) out of tolerance ({names}); {failed[0].reasons[0]}"

    def to_dict(self) -> dict:
        """The JSON document written by ``trtkit parity --json`` (schema ``trtkit.parity/1``)."""
        return _jsonable(
            {
                "schema": SCHEMA,
                "passed": self.passed,
                "verdict": self.verdict(),
                "model": self.model,
                "engine": self.engine,
                "precision": self.precision,
                "max_error_ratio": self.max_error_ratio,
                "tolerance": self.tolerance.to_dict(),
                "reference_backend": self.reference_backend,
                "inputs": {
                    "source": self.input_source,
                    "seed": self.seed,
                    "trials": self.trials,
                    "shapes": self.shapes,
                },
                "outputs": [r.to_dict() for r in self.worst()],
                "trials": [r.to_dict() for r in self.results],
                "failures": self.failures(),
                "notes": list(self.notes),
                "timings_s": dict(self.timings),
            }
        )


def _badness(result: OutputResult) -> tuple[int, float]:
    ratio = result.metrics.error_ratio if result.metrics is not None else None
    return (0 if result.passed else 1, ratio if ratio is not None else float("inf"))
