"""Comparisons of an engine against its ONNX model, with verdicts.

    from trtkit.parity import compare_engine_to_onnx
    report = compare_engine_to_onnx("model.onnx", "model.engine", trials=4)
    report.passed, report.verdict()

Modules: ``inputs`` (shapes within a profile, random or loaded feeds), ``reference`` (the ONNX model on CPU),
``metrics`` (per-output numbers), ``tolerance`` (defaults per precision), ``compare`` (verdicts with reasons),
``report`` (``ParityReport`` and its JSON), ``engine`` (the engine side), ``polygraphy_compat`` (Polygraphy's
comparator as a cross-check), ``api`` (``compare_engine_to_onnx``).
"""

from __future__ import annotations

from trtkit._lazy import lazy_exports

_EXPORTS = {
    "compare_engine_to_onnx": "trtkit.parity.api",
    "ParityReport": "trtkit.parity.report",
    "Tolerance": "trtkit.parity.tolerance",
    "tolerance_for": "trtkit.parity.tolerance",
    "OnnxReference": "trtkit.parity.reference",
    "compute_metrics": "trtkit.parity.metrics",
    "compare_outputs": "trtkit.parity.compare",
}

__all__ = list(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS, globals())
