"""The one place that knows how TensorRT 8.6, 10.x and 11.x differ.

Every function takes the ``tensorrt`` module (or a TensorRT object) as an argument, so it works with the installed
TensorRT, with another version's real bindings (the ``surface`` test tier) and with trtkit's fake backend alike.
Features are detected with ``hasattr`` on the module, never by comparing version strings; enum masks are built from
member *names* because TensorRT 11 renumbered the values.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from trtkit.errors import DependencyError, UnsupportedError, UsageError

# Which TensorRT versions have (or lost) a feature, for error messages.
_WHERE = {
    "FP16": "TensorRT 8.6 to 10.x (removed in 11: use FP16 mode 'cast', a strongly typed FP16 model)",
    "INT8": "TensorRT 8.6 to 10.x (removed in 11: use INT8 mode 'qdq', explicit Q/DQ nodes)",
    "BF16": "TensorRT 9.0 to 10.x as a builder flag (in 11 use a strongly typed BF16 model)",
    "TF32": "TensorRT 8.6 and later",
    "STRONGLY_TYPED": "TensorRT 9.1 and later",
    "calibrator": "TensorRT 8.6 to 10.x (removed in 11: use INT8 mode 'qdq')",
    "VERSION_COMPATIBLE": "TensorRT 8.6 and later",
    "hardware_compatibility_level": "TensorRT 8.6 and later (Ampere+ GPUs)",
}


def version(trt) -> tuple[int, ...]:
    """TensorRT's version as a tuple of ints, e.g. ``(8, 6, 0)`` or ``(11, 4, 0, 106)``."""
    parts = []
    for piece in str(getattr(trt, "__version__", "0")).split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts) or (0,)


def version_parts(text) -> tuple[int, ...]:
    """The leading numeric parts of a version string: ``"8.6.1.6"`` -> (8, 6, 1, 6); ``"9.3.0.post12.dev1"`` ->
    (9, 3, 0); ``None`` -> ()."""
    parts = []
    for piece in str(text or "").split("."):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


def version_string(trt) -> str:
    return str(getattr(trt, "__version__", "unknown"))


def timing_cache_shared_across_builds(trt) -> bool:
    """Whether one timing cache serves builds of other models and settings. TensorRT 8.x cannot read another
    build's Myelin timings from a cache (it logs "Myelin error from unknown graph" and builds without the cache), so
    there a cache is kept per build."""
    return version(trt) >= (10,)


def enum_name(value) -> str:
    """The member name of a TensorRT enum value (``"FLOAT"``), whatever the binding's style.

    Some 8.6 enums expose ``name`` as a property, others (the ONNX parser's ``ErrorCode``) as a method.
    """
    name = getattr(value, "name", None)
    if callable(name):
        try:
            name = name()
        except TypeError:
            name = None
    if not isinstance(name, str):
        name = str(value)
    return name.split(".")[-1]


def _members(enum) -> set[str]:
    members = getattr(enum, "__members__", None)
    if members is not None:
        return set(members)
    return {name for name in dir(enum) if name.isupper()}


@dataclass(frozen=True)
class Capabilities:
    """What the given TensorRT offers, detected from its API."""

    version: tuple[int, ...]
    builder_flags: frozenset[str]
    network_flags: frozenset[str]
    has_calibrators: bool
    has_minmax_calibrator: bool

    @property
    def fp16_flag(self) -> bool:
        return "FP16" in self.builder_flags

    @property
    def int8_flag(self) -> bool:
        return "INT8" in self.builder_flags

    @property
    def strongly_typed(self) -> bool:
        return "STRONGLY_TYPED" in self.network_flags


def capabilities(trt) -> Capabilities:
    """Detect what the given ``tensorrt`` module supports."""
    return Capabilities(
        version=version(trt),
        builder_flags=frozenset(_members(trt.BuilderFlag)),
        network_flags=frozenset(_members(trt.NetworkDefinitionCreationFlag)),
        has_calibrators=hasattr(trt, "IInt8EntropyCalibrator2"),
        has_minmax_calibrator=hasattr(trt, "IInt8MinMaxCalibrator"),
    )


# --- network -------------------------------------------------------------------------------------------------------


def network_flags(trt, *, strongly_typed: bool = False) -> int:
    """Creation flags for ``Builder.create_network``.

    8.6 needs EXPLICIT_BATCH (the ONNX parser refuses implicit-batch networks); 10 ignores it; 11 removed it.
    STRONGLY_TYPED exists from 9.1 and is implied in 11.

    Raises:
        UnsupportedError: ``strongly_typed`` was asked for on a TensorRT without it.
    """
    members = _members(trt.NetworkDefinitionCreationFlag)
    flags = 0
    if "EXPLICIT_BATCH" in members and version(trt) < (10,):
        flags |= 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    if strongly_typed:
        if "STRONGLY_TYPED" not in members:
            raise UnsupportedError(
                f"Strongly typed networks are not available in TensorRT {version_string(trt)}; "
                f"they exist in {_WHERE['STRONGLY_TYPED']}."
            )
        flags |= 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    return flags


# --- builder config ------------------------------------------------------------------------------------------------


def tactic_source_mask(trt, names) -> int:
    """Bit mask of the named tactic sources, built from names (values differ between versions).

    Args:
        names: iterable of names such as ``"CUBLAS"``, ``"EDGE_MASK_CONVOLUTIONS"`` (case-insensitive).

    Raises:
        UnsupportedError: a name is not a tactic source of this TensorRT; the message lists the valid ones.
    """
    available = _members(trt.TacticSource)
    mask = 0
    for name in names:
        key = name.strip().upper().replace("-", "_")
        if key not in available:
            raise UnsupportedError(
                f"Tactic source '{name}' does not exist in TensorRT {version_string(trt)}; "
                f"valid here: {', '.join(sorted(available))}."
            )
        mask |= 1 << int(getattr(trt.TacticSource, key))
    return mask


def has_builder_flag(trt, name: str) -> bool:
    return name in _members(trt.BuilderFlag)


def set_builder_flag(trt, config, name: str, on: bool = True) -> None:
    """Set or clear ``BuilderFlag.<name>``.

    Raises:
        UnsupportedError: the flag does not exist in this TensorRT; says which versions have it and what to use.
    """
    if not has_builder_flag(trt, name):
        where = _WHERE.get(name, "other TensorRT versions")
        raise UnsupportedError(
            f"BuilderFlag.{name} does not exist in TensorRT {version_string(trt)}; it exists in {where}."
        )
    flag = getattr(trt.BuilderFlag, name)
    if on:
        config.set_flag(flag)
    else:
        config.clear_flag(flag)


def set_workspace(trt, config, nbytes: int) -> None:
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(nbytes))


def set_hardware_compatibility(trt, config, level: str) -> None:
    """Set ``config.hardware_compatibility_level`` from a name such as ``"AMPERE_PLUS"``."""
    enum = getattr(trt, "HardwareCompatibilityLevel", None)
    if enum is None or not hasattr(config, "hardware_compatibility_level"):
        raise UnsupportedError(
            f"Hardware compatibility is not available in TensorRT {version_string(trt)}; "
            f"it exists in {_WHERE['hardware_compatibility_level']}."
        )
    key = level.strip().upper().replace("-", "_")
    if key not in _members(enum):
        raise UnsupportedError(
            f"Hardware compatibility level '{level}' is not known to TensorRT {version_string(trt)}; "
            f"valid: {', '.join(sorted(_members(enum)))}."
        )
    config.hardware_compatibility_level = getattr(enum, key)


def set_profiling_verbosity(trt, config, name: str) -> None:
    config.profiling_verbosity = getattr(trt.ProfilingVerbosity, name)


# --- parser --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ParserIssue:
    """One error reported by TensorRT's ONNX parser."""

    code: str
    description: str
    node_index: int = -1
    node_name: str = ""
    node_op: str = ""

    def __str__(self) -> str:
        where = ""
        if self.node_name or self.node_op:
            where = f"node '{self.node_name}' ({self.node_op}): "
        elif self.node_index >= 0:
            where = f"node #{self.node_index}: "
        return f"{where}{self.description} [{self.code}]"


def parser_errors(parser) -> list[ParserIssue]:
    """Every error of an ``OnnxParser``, with node name and op type where the version reports them (10+)."""
    issues = []
    for i in range(parser.num_errors):
        err = parser.get_error(i)
        code = enum_name(err.code())
        node_name = err.node_name() if hasattr(err, "node_name") else ""
        node_op = err.node_operator() if hasattr(err, "node_operator") else ""
        issues.append(ParserIssue(code, err.desc(), int(err.node()), node_name or "", node_op or ""))
    return issues


def parser_supports_model(parser, model_bytes: bytes, path: str | None = None) -> tuple[bool, list]:
    """Ask the ONNX parser which parts of a model it supports.

    ``supports_model_v2`` (10.1+, the only form in 11) then ``num_subgraphs`` / ``get_subgraph_nodes`` /
    ``is_subgraph_supported``; else ``supports_model`` (8.6, 10.0), which returns the subgraphs directly. Both parse
    the model, so run this where a parser crash is contained (a child process).

    Returns:
        ``(all_supported, [(node indices, supported), ...])``: subgraphs of nodes the parser can import.
    """
    args = (model_bytes, path) if path else (model_bytes,)
    if hasattr(parser, "supports_model_v2"):
        ok = bool(parser.supports_model_v2(*args))
        subgraphs = [
            ([int(i) for i in parser.get_subgraph_nodes(k)], bool(parser.is_subgraph_supported(k)))
            for k in range(int(parser.num_subgraphs))
        ]
        return ok, subgraphs
    ok, subgraphs = parser.supports_model(*args)
    return bool(ok), [([int(i) for i in nodes], bool(supported)) for nodes, supported in subgraphs]


def parser_supports_operator(parser, op_type: str) -> bool | None:
    """Whether the parser has an importer for ``op_type`` (``supports_operator``; ``None`` if not exposed)."""
    if not hasattr(parser, "supports_operator"):
        return None
    return bool(parser.supports_operator(op_type))


# --- plugins -------------------------------------------------------------------------------------------------------

# id -> the module itself: holding it keeps its id from going to another module (a test's fake) once it is freed
_PLUGINS_LOADED: dict = {}


def plugins_loaded(trt) -> bool:
    """Whether :func:`load_plugins` has registered this module's plugins."""
    return _PLUGINS_LOADED.get(id(trt)) is trt


def load_plugins(trt, logger) -> bool:
    """Register TensorRT's own plugins (``EfficientNMS_TRT`` and the rest) in its plugin registry, once per module.

    The ONNX parser builds an op it has no importer for from the registry by name, and deserializing an engine that
    holds a plugin layer needs the same registry; neither fills it by itself.

    Returns:
        Whether the plugins are registered (False where this TensorRT has no ``init_libnvinfer_plugins``).

    Raises:
        UnsupportedError: TensorRT's plugin library (libnvinfer_plugin) could not be loaded.
    """
    if plugins_loaded(trt):
        return True
    init = getattr(trt, "init_libnvinfer_plugins", None)
    if init is None:
        return False
    try:
        ok = init(logger, "")
    except (OSError, RuntimeError, TypeError) as exc:
        raise UnsupportedError(
            f"TensorRT's plugin library (libnvinfer_plugin) could not be loaded: {exc}. Install the TensorRT build "
            "that ships it, or build the model without plugin ops."
        ) from exc
    if ok is not False:
        _PLUGINS_LOADED[id(trt)] = trt
    return ok is not False


def check_plugin_files(paths) -> None:
    """Refuse, before anything loads, a plugin library path that is not a file.

    Raises:
        UsageError: the first such path, named.
    """
    from pathlib import Path

    for path in paths:
        if not Path(path).is_file():
            raise UsageError(
                f"Plugin library '{path}' does not exist; give the path of a TensorRT plugin library (.so)",
                field="plugins",
                accepted="paths of shared libraries",
            )


def load_plugin_libraries(trt, logger, paths) -> None:
    """Load plugin libraries into this process as trtexec's ``--staticPlugins`` does, then TensorRT's own plugins.

    Each library is opened with ``RTLD_GLOBAL`` (its creators register themselves in TensorRT's plugin registry as it
    loads, and may use each other's symbols); :func:`load_plugins` then registers TensorRT's, as TensorRT's Python
    samples do in 8.6, 10 and 11 alike. Loading a library twice is harmless (the loader keeps one copy).

    Raises:
        UsageError: a path is not a file.
        DependencyError: a library does not load (the loader's reason quoted).
    """
    import ctypes
    from pathlib import Path

    check_plugin_files(paths)
    for path in paths:
        try:
            ctypes.CDLL(str(Path(path).absolute()), mode=ctypes.RTLD_GLOBAL)
        except OSError as exc:
            raise DependencyError(f"Plugin library '{path}' does not load: {exc}", field="plugins") from exc
    load_plugins(trt, logger)


# --- engine --------------------------------------------------------------------------------------------------------


def device_memory_size(engine) -> int:
    """Scratch device memory the engine needs (``device_memory_size_v2`` from 10.1, else ``device_memory_size``)."""
    if hasattr(engine, "device_memory_size_v2"):
        return int(engine.device_memory_size_v2)
    return int(engine.device_memory_size)


def create_execution_context(trt, engine):
    """An execution context that owns its device memory (10+ names the strategy; 8.6 has only this form).

    Returns ``None`` when TensorRT could not create one (e.g. out of device memory), as TensorRT does.
    """
    strategy = getattr(trt, "ExecutionContextAllocationStrategy", None)
    if strategy is not None and hasattr(strategy, "STATIC"):
        return engine.create_execution_context(strategy.STATIC)
    return engine.create_execution_context()


def contexts_share_profiles(trt) -> bool:
    """Whether contexts of one engine can use the same profile by default (10+; 8.6 needs PROFILE_SHARING_0806)."""
    if version(trt) >= (10,):
        return True
    preview = getattr(trt, "PreviewFeature", None)
    return preview is None or "PROFILE_SHARING_0806" not in _members(preview)


@dataclass
class InspectedLayer:
    name: str
    layer_type: str = ""
    precision: str = ""
    tactic: str = ""
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    raw: dict = field(default_factory=dict)


def inspector_layers(engine_info_json: str) -> list[InspectedLayer]:
    """Layers of ``IEngineInspector.get_engine_information(JSON)`` across versions.

    With ``ProfilingVerbosity.DETAILED`` each layer is an object; otherwise only names (strings) are available.
    """
    data = json.loads(engine_info_json, strict=False)  # TensorRT 8.6 leaves control characters in names
    layers = []
    for item in data.get("Layers", []):
        if isinstance(item, str):
            layers.append(InspectedLayer(name=item))
            continue
        layers.append(
            InspectedLayer(
                name=str(item.get("Name", "")),
                layer_type=str(item.get("LayerType", "")),
                precision=_layer_precision(item),
                tactic=str(item.get("TacticName", item.get("TacticValue", ""))),
                inputs=list(item.get("Inputs", [])),
                outputs=list(item.get("Outputs", [])),
                raw=item,
            )
        )
    return layers


def _layer_precision(item: dict) -> str:
    if item.get("Precision"):
        return str(item["Precision"])
    for tensor in item.get("Outputs", []) + item.get("Inputs", []):
        fmt = tensor.get("Format/Datatype", "") if isinstance(tensor, dict) else ""
        for name in ("Int8", "FP16", "Half", "BF16", "FP8", "Float", "FP32", "Int32"):
            if name.lower() in fmt.lower():
                return {"Half": "FP16", "Float": "FP32", "Int8": "INT8"}.get(name, name.upper())
    return ""


def set_int8_calibrator(trt, config, calibrator, calibration_profile=None) -> None:
    """Attach an INT8 calibrator (TensorRT < 11) and the profile to calibrate with."""
    if not hasattr(trt, "IInt8Calibrator") or not hasattr(config, "int8_calibrator"):
        raise UnsupportedError(
            f"INT8 calibrators do not exist in TensorRT {version_string(trt)}; they exist in {_WHERE['calibrator']}."
        )
    config.int8_calibrator = calibrator
    if calibration_profile is not None and hasattr(config, "set_calibration_profile"):
        config.set_calibration_profile(calibration_profile)


# --- ONNX parser limits (for trtkit.builder.rewrites) ---------------------------------------------------------------


def has_int64_io(trt) -> bool:
    """Whether engines can take and return INT64 tensors (``DataType.INT64``, TensorRT 10 and later)."""
    return "INT64" in _members(trt.DataType)


def shape_tensor_inputs(network) -> list[str]:
    """Names of a parsed network's inputs that are shape tensors (their *values* become shapes: the ``shape`` of
    Expand/Reshape, the ``sizes`` of Resize...), in network order. ``ITensor.is_shape_tensor`` in every version."""
    inputs = (network.get_input(i) for i in range(network.num_inputs))
    return [t.name for t in inputs if getattr(t, "is_shape_tensor", False)]


def profile_shape_values(engine, name: str, profile: int) -> tuple:
    """``(min, opt, max)`` *values* of shape-tensor input ``name`` in ``profile`` of a deserialized engine.

    10.x/11.x: ``get_tensor_profile_values(profile, name)`` (the bindings' argument names are swapped: the profile
    index comes first); 8.6: ``get_profile_shape_input(profile, name)``, deprecated in 8.6 and removed in 10.
    """
    if hasattr(engine, "get_tensor_profile_values"):
        found = engine.get_tensor_profile_values(int(profile), name)
    else:
        found = engine.get_profile_shape_input(int(profile), name)
    return tuple(tuple(int(v) for v in values) for values in found)
