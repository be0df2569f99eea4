"""Build settings as plain dataclasses; turned into TensorRT objects only in :mod:`trtkit.builder.builder`.

:class:`CalibrationSettings` lives with the rest of calibration (:mod:`calibrators.settings`) and is importable from
here as well.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from calibrators.settings import CALIB_ALGORITHMS, HISTOGRAM_DEVICES, CalibrationSettings
from trtkit import _check
from trtkit.builder.profiles import Profile
from trtkit.errors import UsageError

__all__ = [
    "BuildConfig",
    "CalibrationSettings",
    "PRECISIONS",
    "FP16_MODES",
    "INT8_MODES",
    "CONSTRAINT_MODES",
    "CALIB_ALGORITHMS",
    "HISTOGRAM_DEVICES",
    "VERBOSITIES",
]

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
        timing_cache: the timing cache file to load and merge this build's timings back into; ``None``: the default
            cache of this GPU and TensorRT in the user's cache folder (:mod:`trtkit.builder.timing_cache`). A named
            file that does not load, or was written for another GPU or TensorRT, is an error (it is never overwritten
            silently) unless ``timing_cache_reset``.
        timing_cache_reset: replace a ``timing_cache`` file that does not load with a new cache (with a warning).
        use_timing_cache: False builds without a timing cache file (none is read or written).
        hardware_compatibility: e.g. ``AMPERE_PLUS`` for engines that run on any Ampere or newer GPU.
        version_compatible: build a version-compatible plan (loads on later TensorRT versions).
        strongly_typed: build a strongly typed network (types come from the model).
        require_precision: fail the build if the engine does not mostly run in the asked precision.
        precision_constraints: ``none`` (TensorRT keeps FP32 where faster), ``prefer`` or ``obey``: set the math
            layers to the asked precision (see :mod:`trtkit.builder.constraints`).
        qdq_keep_heads: with ``int8_mode=qdq``, keep the final compute layers (detection heads, the classifier) in
            higher precision, where INT8 costs the most accuracy (the default); False quantizes them too.
        qdq_exclude: with ``int8_mode=qdq``, ONNX node names kept in higher precision.
        qdq_residual_activations: with ``int8_mode=qdq``, quantize the skip input of residual adds whose other input
            is a quantized convolution through its activation (SiLU, ReLU, ...), not only a bare convolution
            (:class:`~trtkit.quant.qdq.QdqOptions` ``residual_through_activation``), and its other input too, so the
            add runs as an INT8 pointwise layer (``quantize_add_inputs``). On by default, with the next one: faster
            on YOLO-style detectors, the same plan on ResNet-like models.
        qdq_concat_shared_scale: with ``int8_mode=qdq``, quantize the inputs of Concats whose output is quantized,
            with one scale for them and the output (``QdqOptions.concat_shared_scale``). On by default.
        max_aux_streams: limit on auxiliary streams TensorRT may use.
        sanitize: apply the compatibility rewrites (:mod:`trtkit.builder.rewrites`) before parsing.
        fold_constants: fold constant subgraphs into initializers before parsing.
        check: when the parse fails, ask the parser which ops it supports, so the error carries the op table (a
            model that parses is not parsed twice).
        save_prepared: also write the prepared model (rewritten, folded) here, when preparing changed it.
        add_nms: a :class:`trtkit.detection.NmsOptions`: append TensorRT's ``EfficientNMS_TRT`` plugin to a
            YOLOv8-style head while preparing (the engine then returns ``num_dets, boxes, scores, classes``).
        input_uint8_nhwc: the engine takes the image input as ``(N, H, W, 3)`` uint8 pixels and casts, scales
            (1/255) and transposes them itself (:mod:`trtkit.builder.image_input`); profiles then give NHWC shapes.
        plugins: paths of plugin libraries (``.so``) to load before parsing, for models with custom ops; the engine
            then needs them to load too (``TrtRunner(plugins=...)``).
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
    timing_cache_reset: bool = False
    use_timing_cache: bool = True
    hardware_compatibility: str | None = None
    version_compatible: bool = False
    strongly_typed: bool = False
    require_precision: bool = False
    precision_constraints: str = "none"
    qdq_keep_heads: bool = True
    qdq_exclude: tuple = ()
    qdq_residual_activations: bool = True
    qdq_concat_shared_scale: bool = True
    max_aux_streams: int | None = None
    save_qdq_onnx: str | None = None
    sanitize: bool = True
    fold_constants: bool = True
    check: bool = True
    save_prepared: str | None = None
    add_nms: object = None
    input_uint8_nhwc: bool = False
    plugins: tuple = ()

    def __post_init__(self):
        _check.choice("precision", self.precision, PRECISIONS)
        _check.choice("fp16_mode", self.fp16_mode, FP16_MODES)
        _check.choice("int8_mode", self.int8_mode, INT8_MODES)
        _check.instance("calibration", self.calibration, CalibrationSettings, "a CalibrationSettings", optional=True)
        if self.calibration is not None:
            _check_calibration(self.calibration)
        self.profiles = _profiles(self.profiles)
        _check.integer("workspace_bytes", self.workspace_bytes, low=1, optional=True)
        _check.integer("optimization_level", self.optimization_level, low=0, high=5, optional=True)
        self.tactic_sources = _check.names("tactic_sources", self.tactic_sources, optional=True)
        _check.boolean("tf32", self.tf32)
        _check.choice("profiling_verbosity", self.profiling_verbosity, VERBOSITIES)
        _check.path("timing_cache", self.timing_cache, optional=True)
        _check.boolean("timing_cache_reset", self.timing_cache_reset)
        _check.boolean("use_timing_cache", self.use_timing_cache)
        _check_timing_cache(self)
        self.plugins = _check.paths("plugins", self.plugins)
        _check.instance(
            "hardware_compatibility",
            self.hardware_compatibility,
            str,
            "a level name such as 'AMPERE_PLUS'",
            optional=True,
        )
        for name in (
            "version_compatible",
            "strongly_typed",
            "require_precision",
            "qdq_keep_heads",
            "qdq_residual_activations",
            "qdq_concat_shared_scale",
        ):
            _check.boolean(name, getattr(self, name))
        _check.choice("precision_constraints", self.precision_constraints, CONSTRAINT_MODES)
        self.qdq_exclude = _check.names("qdq_exclude", self.qdq_exclude)
        _check.integer("max_aux_streams", self.max_aux_streams, low=0, optional=True)
        _check.path("save_qdq_onnx", self.save_qdq_onnx, optional=True)
        for name in ("sanitize", "fold_constants", "check"):
            _check.boolean(name, getattr(self, name))
        _check.path("save_prepared", self.save_prepared, optional=True)
        if self.add_nms is not None and type(self.add_nms).__name__ != "NmsOptions":
            _check.fail("add_nms", self.add_nms, "a trtkit.detection.NmsOptions or None")
        _check.boolean("input_uint8_nhwc", self.input_uint8_nhwc)
        if self.input_uint8_nhwc and self.calibration is not None:
            raise UsageError(
                "input_uint8_nhwc cannot be combined with INT8 calibration data: the calibration images are fed "
                "as the model's float (N, 3, H, W) input. Use input_uint8_nhwc with FP32/FP16 builds, or build the "
                "calibrated engine without it",
                field="input_uint8_nhwc",
                accepted="False when calibration is set",
            )
        for name in ("calibration", "save_qdq_onnx"):
            if getattr(self, name) is not None and self.precision != "int8":
                raise UsageError(
                    f"{name} is used only with precision 'int8', and precision is '{self.precision}'",
                    field=name,
                    accepted="None unless precision is 'int8'",
                )

    def to_json(self) -> dict:
        """A JSON-ready summary (for the manifest and cache keys); calibration data sources become strings."""
        data = asdict(self)
        data["profiles"] = [p.to_json() if isinstance(p, Profile) else p for p in self.profiles]
        if self.calibration is not None:
            data["calibration"]["source"] = _describe_source(self.calibration.source)
        return data


def _check_timing_cache(self: BuildConfig) -> None:
    """``timing_cache`` normalized; the timing cache settings that would do nothing refused."""
    if self.timing_cache is not None:
        self.timing_cache = str(Path(self.timing_cache))
    if self.timing_cache is not None and not self.use_timing_cache:
        raise UsageError(
            "timing_cache names a file and use_timing_cache=False builds without one; give one or the other",
            field="use_timing_cache",
            accepted="True when timing_cache is set",
        )
    if self.timing_cache_reset and self.timing_cache is None:
        raise UsageError(
            "timing_cache_reset replaces a timing_cache file that does not load; the default cache is replaced "
            "by itself, so give timing_cache too or leave timing_cache_reset out",
            field="timing_cache_reset",
            accepted="False unless timing_cache is set",
        )


def _check_calibration(self: CalibrationSettings) -> None:
    """Types and ranges of calibration settings (made part of a BuildConfig)."""
    if isinstance(self.source, (bytes, bytearray, dict)) or not (
        self.source is None or isinstance(self.source, (str, Path)) or hasattr(self.source, "__iter__")
    ):
        _check.fail(
            "calibration.source", self.source, "a folder path, a calibration source or an iterable of feed dicts"
        )
    if isinstance(self.source, str) and not self.source:
        _check.fail("calibration.source", self.source, "a folder path")
    _check.path("calibration.cache_path", self.cache_path, optional=True)
    if self.algorithm is not None:
        _check.choice("calibration.algorithm", self.algorithm, CALIB_ALGORITHMS)
    _check.integer("calibration.max_samples", self.max_samples, low=1, optional=True)
    _check.integer("calibration.batch_size", self.batch_size, low=1, optional=True)
    _check.boolean("calibration.force", self.force)
    _check.instance("calibration.preprocess", self.preprocess, dict, "a dict of preprocessing settings")
    _check.choice("calibration.histograms", self.histograms, HISTOGRAM_DEVICES)


def _profiles(value) -> list:
    """A list of :class:`Profile`; ``parse_shapes`` text in the list is parsed."""
    from trtkit.builder.profiles import parse_shapes

    accepted = "a list of Profile (e.g. [trtkit.parse_shapes('images:1x3x224x224,8x3x224x224,32x3x224x224')])"
    if isinstance(value, (str, bytes, Profile)) or not isinstance(value, (list, tuple)):
        _check.fail("profiles", value, accepted)
    if not all(isinstance(p, (Profile, str)) for p in value):
        _check.fail("profiles", value, accepted)
    return [parse_shapes(p) if isinstance(p, str) else p for p in value]


def _describe_source(source) -> str | None:
    if source is None or isinstance(source, (str, Path)):
        return None if source is None else str(source)
    return f"<{type(source).__name__}>"
