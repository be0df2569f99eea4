"""Build settings as plain dataclasses; turned into TensorRT objects only in :mod:`trtkit.builder.builder`.

:class:`CalibrationSettings` lives with the rest of calibration (:mod:`calibrators.settings`) and is importable from
here as well.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from calibrators.settings import CALIB_ALGORITHMS, HISTOGRAM_DEVICES, CalibrationSettings
from trtkit.builder.profiles import Profile
from trtkit.errors import TrtkitError

__all__ = ["BuildConfig", "CalibrationSettings", "PRECISIONS", "FP16_MODES", "INT8_MODES", "CONSTRAINT_MODES",
           "CALIB_ALGORITHMS", "HISTOGRAM_DEVICES", "VERBOSITIES"]

PRECISIONS = ("fp32", "fp16", "bf16", "int8")
FP16_MODES = ("auto", "flag", "cast")
INT8_MODES = ("auto", "calibrator", "qdq")
CONSTRAINT_MODES = ("none", "prefer", "obey")  # see trtkit.builder.constraints
VERBOSITIES = ("LAYER_NAMES_ONLY", "DETAILED", "NONE")


@dataclass
class BuildConfig:
    """Everything that decides how an engine is built. ``None`` means TensorRT's default.

    Attributes:
        precision: ``fp32``, ``fp16``, ``bf16`` or ``int8`` (int8 also allows fp16 where it is faster).
        fp16_mode: ``flag`` (BuilderFlag.FP16, TensorRT < 11), ``cast`` (FP16 model, strongly typed) or ``auto``.
        int8_mode: ``calibrator`` (TensorRT < 11), ``qdq`` (explicit Q/DQ made by trtkit) or ``auto``.
        calibration: INT8 calibration settings.
        profiles: optimization profiles; needed when the model has dynamic dimensions.
        workspace_bytes: workspace memory pool limit.
        optimization_level: builder optimization level 0-5.
        tactic_sources: names of tactic sources to enable (others off), e.g. ``("EDGE_MASK_CONVOLUTIONS",
            "JIT_CONVOLUTIONS")``.
        tf32: allow TF32 for FP32 layers.
        profiling_verbosity: ``DETAILED`` keeps per-layer detail for ``trtkit inspect`` and precision reports.
        timing_cache: file to load the timing cache from and save it back to.
        hardware_compatibility: e.g. ``AMPERE_PLUS`` for engines that run on any Ampere or newer GPU.
        version_compatible: build a version-compatible plan (loads on later TensorRT versions).
        strongly_typed: build a strongly typed network (types come from the model).
        require_precision: fail the build if the engine does not mostly run in the asked precision.
        precision_constraints: ``none`` (TensorRT keeps FP32 where faster), ``prefer`` or ``obey``: set the math
            layers to the asked precision (see :mod:`trtkit.builder.constraints`).
        qdq_keep_heads: with ``int8_mode=qdq``, keep the final compute layers (detection heads, the classifier) in
            higher precision (the default; docs/performance.md says why); False quantizes them too.
        qdq_exclude: with ``int8_mode=qdq``, ONNX node names kept in higher precision.
        max_aux_streams: limit on auxiliary streams TensorRT may use.
        sanitize: apply the compatibility rewrites (:mod:`trtkit.builder.rewrites`) before parsing.
        fold_constants: fold constant subgraphs into initializers before parsing.
        check: ask the parser which ops it supports before parsing; a failed parse then carries the op table.
        save_prepared: also write the prepared model (rewritten, folded) here, when preparing changed it.
        add_nms: a :class:`trtkit.detection.NmsOptions`: append TensorRT's ``EfficientNMS_TRT`` plugin to a
            YOLOv8-style head while preparing (the engine then returns ``num_dets, boxes, scores, classes``).
    """

    precision: str = "fp32"
    fp16_mode: str = "auto"
    int8_mode: str = "auto"
    calibration: CalibrationSettings | None = None
    profiles: list = field(default_factory=list)
    workspace_bytes: int | None = None
    optimization_level: int | None = None
    tactic_sources: tuple | None = None
    tf32: bool = True
    profiling_verbosity: str = "DETAILED"
    timing_cache: str | None = None
    hardware_compatibility: str | None = None
    version_compatible: bool = False
    strongly_typed: bool = False
    require_precision: bool = False
    precision_constraints: str = "none"
    qdq_keep_heads: bool = True
    qdq_exclude: tuple = ()
    max_aux_streams: int | None = None
    save_qdq_onnx: str | None = None
    sanitize: bool = True
    fold_constants: bool = True
    check: bool = True
    save_prepared: str | None = None
    add_nms: object = None

    def __post_init__(self):
        _choice("precision", self.precision, PRECISIONS)
        _choice("fp16_mode", self.fp16_mode, FP16_MODES)
        _choice("int8_mode", self.int8_mode, INT8_MODES)
        _choice("profiling_verbosity", self.profiling_verbosity, VERBOSITIES)
        _choice("precision_constraints", self.precision_constraints, CONSTRAINT_MODES)
        if self.optimization_level is not None and not 0 <= int(self.optimization_level) <= 5:
            raise TrtkitError(f"optimization_level must be 0-5, got {self.optimization_level}")
        if self.workspace_bytes is not None and int(self.workspace_bytes) <= 0:
            raise TrtkitError(f"workspace_bytes must be positive, got {self.workspace_bytes}")
        if self.calibration is not None:
            _choice("calibration algorithm", self.calibration.algorithm, CALIB_ALGORITHMS)
            _choice("calibration histograms", self.calibration.histograms, HISTOGRAM_DEVICES)
        if self.tactic_sources is not None:
            self.tactic_sources = tuple(self.tactic_sources)
        self.qdq_exclude = tuple(self.qdq_exclude)
        if self.timing_cache is not None:
            self.timing_cache = str(Path(self.timing_cache))

    def to_json(self) -> dict:
        """A JSON-ready summary (for the manifest and cache keys); calibration data sources become strings."""
        data = asdict(self)
        data["profiles"] = [p.to_json() if isinstance(p, Profile) else p for p in self.profiles]
        if self.calibration is not None:
            data["calibration"]["source"] = _describe_source(self.calibration.source)
        return data


def _choice(what: str, value, allowed) -> None:
    if value not in allowed:
        raise TrtkitError(f"{what} must be one of {', '.join(allowed)}; got '{value}'")


def _describe_source(source) -> str | None:
    if source is None or isinstance(source, (str, Path)):
        return None if source is None else str(source)
    return f"<{type(source).__name__}>"
