"""Proof of precision: how many layers, and what share of the FLOPs, an engine runs in each precision.

Read from the engine inspector's JSON (``ProfilingVerbosity.DETAILED``). A layer's precision is the data type its math
runs in: for convolutions and matrix multiplies the type of their input (an INT8 convolution may write ``Float``),
for other layers that of their output; ``Float`` layers with a TF32 kernel count as TF32. Where TensorRT 8.6 reports
no formats (dynamic shapes), the kernel name (``i8i8``, ``f16f16``, ``tf32``) and the weights' type stand in, and
layers with neither count as ``unknown``. FLOPs are estimated from the inspector's dimensions and weight counts (2 per
multiply-add; dynamic dimensions count as 1, which keeps the shares right since every layer shares the batch).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

from trtkit._version_compat import inspector_layers
from trtkit.errors import BuildError

logger = logging.getLogger("trtkit")

PRECISIONS = ("INT8", "FP8", "FP16", "BF16", "TF32", "FP32", "INT32", "BOOL", "unknown", "none")
# Layers that do no math (constants, reformats, no-ops; most of a CNN's layers on TensorRT 8.6): precision "none" and
# no FLOPs when their formats are not reported, rather than "unknown".
_NO_MATH = frozenset({"constant", "reformat", "myelinreformat", "noop"})
_FULL = ("FP32", "TF32")
# Substrings of "Format/Datatype" (full "Row major linear FP16 format" or short "Half") → precision, checked in order.
_DATATYPES = (
    ("int8", "INT8"),
    ("fp8", "FP8"),
    ("bf16", "BF16"),
    ("bfloat", "BF16"),
    ("fp16", "FP16"),
    ("half", "FP16"),
    ("fp32", "FP32"),
    ("float", "FP32"),
    ("int32", "INT32"),
    ("int64", "INT32"),
    ("bool", "BOOL"),
)
# Kernel-name fragments → precision, for layers whose formats the inspector does not give ("N/A due to dynamic
# shapes" when no context with concrete shapes was available). Checked in order; only the math-carrying layers
# (convolutions, matrix multiplies) have such tactic names.
_TACTIC_WORDS = (
    ("i8i8", "INT8"),
    ("imma", "INT8"),
    ("int8", "INT8"),
    ("bf16", "BF16"),
    ("f16f16", "FP16"),
    ("fp16", "FP16"),
    ("h884", "FP16"),
    ("h1688", "FP16"),
    ("hmma", "FP16"),
    ("tf32", "TF32"),
    ("f32f32", "FP32"),
    ("fp32", "FP32"),
    ("sgemm", "FP32"),
    ("scudnn", "FP32"),
)
_CONV_WORDS = ("convolution", "deconvolution")
_MATMUL_WORDS = ("matrixmultiply", "fullyconnected", "gemm")


@dataclass
class LayerPrecision:
    """One engine layer: its name, kind, precision and estimated FLOPs."""

    name: str
    layer_type: str
    precision: str
    flops: float


@dataclass
class PrecisionReport:
    """Layers and FLOPs per precision for one engine.

    Attributes:
        requested: the precision asked for (``fp32``, ``fp16``, ``bf16``, ``int8``).
        layers_by_precision: precision → number of layers.
        flops_by_precision: precision → estimated FLOPs.
        total_layers, total_flops: sums.
        layers: per-layer detail.
        warnings: problems found by :meth:`check`.
    """

    requested: str
    layers_by_precision: dict = field(default_factory=dict)
    flops_by_precision: dict = field(default_factory=dict)
    total_layers: int = 0
    total_flops: float = 0.0
    layers: list = field(default_factory=list)
    warnings: list = field(default_factory=list)

    def share(self, precision: str) -> float:
        """Share (0..1) of the FLOPs in ``precision`` (of the layers, when no FLOPs could be estimated)."""
        if self.total_flops > 0:
            return self.flops_by_precision.get(precision, 0.0) / self.total_flops
        return self.layers_by_precision.get(precision, 0) / self.total_layers if self.total_layers else 0.0

    def shares(self) -> dict:
        return {p: round(self.share(p), 4) for p in PRECISIONS if self.layers_by_precision.get(p)}

    def to_json(self) -> dict:
        return {
            "requested": self.requested,
            "total_layers": self.total_layers,
            "layers_by_precision": dict(self.layers_by_precision),
            "total_flops": self.total_flops,
            "flops_by_precision": dict(self.flops_by_precision),
            "flops_share": self.shares(),
            "warnings": list(self.warnings),
        }

    def summary(self) -> str:
        """One line, e.g. ``INT8 81.2% (53 layers), FP16 18.1% (12), FP32 0.7% (9) of 4.1 GFLOPs``."""
        parts = [
            f"{p} {self.share(p) * 100:.1f}% ({self.layers_by_precision[p]})"
            for p in PRECISIONS
            if self.layers_by_precision.get(p)
        ]
        return ", ".join(parts) + f" of {_human_flops(self.total_flops)} in {self.total_layers} layers"

    def check(self, require: bool = False) -> list:
        """Warn loudly (or raise with ``require``) when the engine does not run in the asked precision.

        ``--fp16``/``--bf16``/``--int8`` with most FLOPs still in FP32/TF32 is a problem, and so is ``--int8`` with
        no INT8 layer at all.

        Raises:
            BuildError: ``require`` and a problem was found (``--require-precision``).
        """
        problem = self._problem()
        if problem is None:
            return []
        self.warnings.append(problem)
        if require:
            raise BuildError(problem + "; require_precision makes this an error.", field="require_precision")
        logger.warning("PRECISION WARNING: %s", problem)
        return [problem]

    def _problem(self) -> str | None:
        if self.requested not in ("fp16", "bf16", "int8") or not self.total_layers:
            return None
        full = sum(self.share(p) for p in _FULL)
        if full > 0.5:
            return (
                f"{self.requested.upper()} was asked but {full * 100:.0f}% of the engine's FLOPs run in "
                f"FP32/TF32 ({self.summary()}); TensorRT found no faster {self.requested.upper()} kernels or the "
                "model forces FP32 (check the layer report with `trtkit inspect`)"
            )
        if self.requested == "int8" and not self.layers_by_precision.get("INT8"):
            return f"INT8 was asked but no layer runs in INT8 ({self.summary()})"
        return None


def describe(report_json: dict | None) -> str:
    """One line for a build summary from :meth:`PrecisionReport.to_json` output, e.g.
    ``INT8 97.1% of FLOPs (4 layers), FP16 2.9% (4), FP32 0.0% (1)``; empty when there is no report."""
    if not report_json or not report_json.get("layers_by_precision"):
        return ""
    layers, shares = report_json["layers_by_precision"], report_json.get("flops_share", {})
    order = [p for p in PRECISIONS if p in layers] + [p for p in layers if p not in PRECISIONS]
    parts = []
    for i, p in enumerate(order):
        share = f"{shares[p] * 100:.1f}%" if p in shares else "?"
        parts.append(f"{p} {share}" + (" of FLOPs" if i == 0 else "") + f" ({layers[p]}{' layers' if i == 0 else ''})")
    text = ", ".join(parts)
    if report_json.get("warnings"):
        text += " — WARNING: " + "; ".join(report_json["warnings"])
    return text


def analyze(engine_info_json: str, requested: str) -> PrecisionReport:
    """Per-precision layer counts and FLOPs of an engine, from its inspector JSON."""
    report = PrecisionReport(requested)
    for layer in inspector_layers(engine_info_json):
        precision = layer_precision(layer.raw)
        flops = 0.0 if precision == "none" else layer_flops(layer.raw)
        entry = LayerPrecision(layer.name, layer.layer_type, precision, flops)
        report.layers.append(entry)
        report.layers_by_precision[entry.precision] = report.layers_by_precision.get(entry.precision, 0) + 1
        report.flops_by_precision[entry.precision] = report.flops_by_precision.get(entry.precision, 0.0) + entry.flops
    report.total_layers = len(report.layers)
    report.total_flops = sum(report.flops_by_precision.values())
    return report


# --- one layer -----------------------------------------------------------------------------------------------------


def _kind(raw: dict) -> str:
    # fused layers name the convolution inside them: "ConvActPool" with ConvParameterType "Convolution"
    text = f"{raw.get('ParameterType', '')} {raw.get('ConvParameterType', '')} {raw.get('LayerType', '')}".lower()
    if any(word in text for word in _CONV_WORDS):
        return "conv"
    if any(word in text for word in _MATMUL_WORDS):
        return "matmul"
    return "other"


def _lookup(text, table) -> str:
    text = str(text).lower()
    return next((precision for word, precision in table if word in text), "unknown")


def datatype(fmt: str) -> str:
    """Precision named by a ``Format/Datatype`` string ("Row major linear FP16 format", "Half", "Int8", ...)."""
    return _lookup(fmt, _DATATYPES)


def layer_precision(raw) -> str:
    """The precision a layer's math runs in (see the module docstring)."""
    if not isinstance(raw, dict) or not raw:
        return "unknown"
    if raw.get("Precision"):
        return datatype(raw["Precision"]) if datatype(raw["Precision"]) != "unknown" else str(raw["Precision"])
    tensors = raw.get("Inputs", []) if _kind(raw) != "other" else raw.get("Outputs", []) or raw.get("Inputs", [])
    tensors = [t for t in tensors if isinstance(t, dict) and "Format/Datatype" in t]
    precision = datatype(tensors[0]["Format/Datatype"]) if tensors else "unknown"
    if precision == "unknown":
        precision = precision_from_tactic(raw.get("TacticName", ""))
    if precision == "unknown" and _kind(raw) != "other":
        precision = _weights_precision(raw)
    if precision == "unknown" and str(raw.get("LayerType", "")).lower() in _NO_MATH:
        return "none"
    if precision == "FP32" and "tf32" in str(raw.get("TacticName", "")).lower():
        return "TF32"
    return precision


def _weights_precision(raw: dict) -> str:
    """A convolution's or matrix multiply's precision from its weights' type ("Int8", "Half", "Float"): the last
    resort when neither formats (dynamic shapes) nor the kernel name say it."""
    weights = _weights(raw)
    return datatype(weights.get("Type", "")) if weights else "unknown"


def _weights(raw: dict) -> dict:
    """A layer's weights entry: ``Weights``, or ``ConvWeights`` in fused conv + activation + pool layers."""
    weights = raw.get("Weights", raw.get("ConvWeights"))
    return weights if isinstance(weights, dict) else {}


def precision_from_tactic(tactic: str) -> str:
    """Precision named by a kernel (tactic) name such as ``sm90_xmma_fprop_implicit_gemm_f16f16_f16f16_f16...``."""
    return _lookup(tactic, _TACTIC_WORDS)


def _elements(tensor) -> int:
    dims = tensor.get("Dimensions", []) if isinstance(tensor, dict) else []
    return math.prod(d if isinstance(d, int) and d > 0 else 1 for d in dims) if dims else 0


def layer_flops(raw) -> float:
    """Estimated FLOPs of a layer (2 per multiply-add for convolutions and matrix multiplies, else 1 per output)."""
    if not isinstance(raw, dict):
        return 0.0
    outputs = [t for t in raw.get("Outputs", []) if isinstance(t, dict)]
    out_elems = _elements(outputs[0]) if outputs else 0
    kind = _kind(raw)
    weights = _weights(raw).get("Count", 0)
    if kind == "conv" and weights:
        maps = raw.get("OutMaps") or raw.get("ConvOutMaps") or _channels(outputs[0] if outputs else {}) or 1
        return 2.0 * weights * out_elems / maps
    if kind == "matmul":
        return _matmul_flops(raw, weights, out_elems)
    return float(out_elems)


def _channels(tensor) -> int:
    dims = tensor.get("Dimensions", [])
    return dims[1] if len(dims) > 1 and isinstance(dims[1], int) and dims[1] > 0 else 0


def _matmul_flops(raw: dict, weights: int, out_elems: int) -> float:
    inputs = [t for t in raw.get("Inputs", []) if isinstance(t, dict)]
    if inputs:
        dims = inputs[0].get("Dimensions", [])
        k = dims[-1] if dims and isinstance(dims[-1], int) and dims[-1] > 0 else 0
        if k:
            return 2.0 * out_elems * k
    if weights:
        return 2.0 * weights
    return float(out_elems)


def _human_flops(flops: float) -> str:
    for unit, size in (("TFLOPs", 1e12), ("GFLOPs", 1e9), ("MFLOPs", 1e6), ("kFLOPs", 1e3)):
        if flops >= size:
            return f"{flops / size:.1f} {unit}"
    return f"{flops:.0f} FLOPs"
