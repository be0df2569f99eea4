"""Build an engine in this process: ONNX → network → config → serialized engine, checking every step.

Use :func:`trtkit.builder.api.build` for the isolated (child-process) build that also writes files; this module is the
in-process core it runs.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable

from trtkit import _version_compat as compat
from trtkit._lazy import tensorrt
from trtkit.builder import constraints, opcheck, precision, precision_report, timeline, warm
from trtkit.builder.config import BuildConfig
from trtkit.builder.prepare import prepare
from trtkit.builder.profiles import may_have_shape_inputs, resolve_profiles
from trtkit.builder.result import BuildResult
from trtkit.builder.rewrites import ParserTarget
from trtkit.builder.timing_cache import TimingCacheFile, build_key
from trtkit.errors import BuildError, DependencyError, ParseError
from trtkit.log import make_trt_logger
from trtkit.manifest import BuildInfo, Manifest, ModelInfo, PrecisionPlanInfo, environment
from trtkit.model import load_model, model_inputs
from trtkit.runtime.engine import engine_information

# the log lines kept in a BuildResult (VERBOSE is streamed but not kept: it can be hundreds of MB)
_KEPT_SEVERITIES = ("INTERNAL_ERROR", "ERROR", "WARNING", "INFO")


def build_serialized(
    model,
    config: BuildConfig | None = None,
    *,
    trt=None,
    on_log: Callable[[str, str], None] | None = None,
    on_phase: Callable[[str], None] | None = None,
    log_severity: str = "INFO",
) -> BuildResult:
    """Parse an ONNX model and build a serialized TensorRT engine.

    Args:
        model: ONNX path, bytes, ``onnx.ModelProto`` or :class:`~trtkit.model.LoadedModel`.
        config: build settings (defaults: FP32, TensorRT's defaults).
        trt: the ``tensorrt`` module to use (default: the installed one; tests pass a fake).
        on_log: called with ``(severity, message)`` for each TensorRT log line at ``log_severity`` and above.
        on_phase: called with a phase name (``parse``, ``configure``, ``build``, ``inspect``) as each starts.
        log_severity: lowest TensorRT severity forwarded (``VERBOSE`` names each parsed node).

    Returns:
        A :class:`BuildResult`.

    Raises:
        ModelError / ParseError: the model cannot be read or parsed (every parser error is listed).
        ProfileError: profiles are missing or do not fit the model.
        UnsupportedError: an option does not exist in the installed TensorRT.
        BuildError: TensorRT could not build the engine.
    """
    marks = {"build_started": timeline.now()}
    model = load_model(model, external_data=False)  # a bad model is named before TensorRT is needed
    marks["model_loaded"] = timeline.now()
    trt = trt or tensorrt()
    config = config or BuildConfig()
    phase = on_phase or (lambda name: None)
    kept: list = []

    def sink(severity, msg):
        if severity in _KEPT_SEVERITIES:
            kept.append((severity, msg))
        if on_log is not None:
            on_log(severity, msg)

    with warm.borrow(trt, log_severity, sink) as (logger, builder):  # a build worker's own, made at its start
        if builder is None:
            logger = make_trt_logger(trt, min_severity=log_severity, sink=sink)
            builder = _create_builder(trt, logger)
        marks["builder_ready"] = timeline.now()
        result = _build_with(trt, logger, builder, model, config, phase, kept, marks)
    result.marks = marks
    return result


def _build_with(trt, logger, builder, model, config: BuildConfig, phase, kept: list, marks: dict) -> BuildResult:
    """:func:`build_serialized` once the model is read and the builder made (``marks`` gets the steps' ends)."""
    phase("prepare")
    if config.plugins:  # their ops are parsed and built from the plugin registry
        compat.load_plugin_libraries(trt, logger, config.plugins)
    query = trt.OnnxParser(builder.create_network(compat.network_flags(trt)), logger)
    prepared = prepare(
        model,
        target=ParserTarget.from_trt(trt, query),
        sanitize=config.sanitize,
        fold_constants=config.fold_constants,
        nms=config.add_nms,
        input_uint8_nhwc=config.input_uint8_nhwc,
    ).require_same_semantics()
    loaded = prepared.loaded
    if custom_ops(loaded.proto):  # plugin ops (EfficientNMS_TRT from add_nms) come from the registry: load it first
        compat.load_plugins(trt, logger)
    if config.save_prepared and prepared.changed:
        prepared.save(config.save_prepared)
    marks["prepared"] = timeline.now()
    inputs = model_inputs(loaded.proto)
    if not may_have_shape_inputs(loaded.proto):  # the common case: profile errors before any other work
        resolve_profiles(inputs, config.profiles)
    caps = compat.capabilities(trt)
    # what the settings say already (before calibration data is read), then again once the plan has chosen modes
    constraints.check_applicable(
        config.precision_constraints,
        config.precision,
        strongly_typed=config.strongly_typed,
        explicit_int8=config.precision == "int8" and config.int8_mode == "qdq",
    )
    plan = precision.plan_precision(
        trt, loaded, config, caps, build_statistics_engine=statistics_engine_builder(config, trt)
    )
    phase("parse")
    strongly_typed = plan.strongly_typed or config.strongly_typed
    constraints.check_applicable(
        config.precision_constraints,
        config.precision,
        strongly_typed=strongly_typed,
        explicit_int8=config.precision == "int8" and plan.calibrator is None,
    )
    network = builder.create_network(compat.network_flags(trt, strongly_typed=strongly_typed))
    parser = trt.OnnxParser(network, logger)
    # the op check runs only when the parse fails: a model that parses is not parsed a second time to be checked
    check = (lambda: _op_check(loaded, trt, query, phase)) if config.check else None
    _parse(parser, plan.model, prepared, check)
    marks["parsed"] = timeline.now()
    shape_inputs = compat.shape_tensor_inputs(network)  # known only once TensorRT has parsed the model
    profiles = resolve_profiles(inputs, config.profiles, shape_inputs)
    phase("configure")
    bconfig = builder.create_builder_config()
    trt_profiles = configure(trt, builder, bconfig, config, plan, profiles, shape_inputs)
    constrained = constraints.apply(trt, network, bconfig, config.precision, config.precision_constraints)
    if constrained:
        plan.notes.append(
            f"precision constraints ({config.precision_constraints}): {len(constrained)} convolution/"
            f"matrix multiply layer(s) set to {config.precision.upper()}"
        )
    timing = TimingCacheFile.resolve(config, trt, build_key(prepared.source_sha256, config))
    cache = timing.load(bconfig) if timing is not None else None
    marks["configured"] = timeline.now()
    phase("build")
    try:
        serialized = builder.build_serialized_network(network, bconfig)
    finally:
        plan.finish()  # a calibrator's own error (kept from TensorRT's callback) is raised here, not lost in the log
    marks["built"] = timeline.now()
    if serialized is None:
        message = failure_message(loaded.name, kept, config.workspace_bytes)
        raise BuildError(message, field=next((f for f in ("workspace_bytes", "on_log") if f in message), None))
    engine = bytes(serialized)
    marks["serialized"] = timeline.now()
    build_seconds = marks["serialized"] - marks["build_started"]
    phase("inspect")
    report = _precision_report(trt, logger, engine, config, precision_report)
    marks["detail_done"] = timeline.now()
    settings = {k: v for k, v in config.to_json().items() if k != "profiles"}
    manifest = Manifest(
        environment=environment(trt),
        model=ModelInfo(
            loaded.name,
            prepared.source_sha256,
            loaded.opset,
            {n: [d if isinstance(d, int) else str(d) for d in dims] for n, dims in inputs.items()},
            list(shape_inputs),
            {prop.key: prop.value for prop in loaded.proto.metadata_props},
        ),
        build=BuildInfo(
            settings,
            [p.to_json() for p in profiles],
            PrecisionPlanInfo(strongly_typed, list(plan.flags), list(plan.notes), dict(plan.calibration)),
            len(trt_profiles),
        ),
        build_seconds=round(build_seconds, 3),
        engine_bytes=len(engine),
        precision_report=report,
        prepare=prepared.to_json(),
        timing_cache=timing.to_json() if timing is not None else None,
    )
    if timing is not None:
        timing.save(bconfig, cache)
    return BuildResult(engine, manifest, bytes(cache.serialize()) if cache is not None else None, kept, report)


def shape_tensor_inputs(model, *, trt=None, sanitize: bool = True, fold_constants: bool = True) -> list[str]:
    """The inputs of ``model`` that TensorRT's ONNX parser makes shape tensors (their profile entries are values),
    parsed as a build parses it: after :func:`~trtkit.builder.prepare.prepare` for this parser, so a model that
    builds only with its compatibility rewrites (an op expanded from its ONNX function body) is answered too.

    Args:
        model: ONNX path, bytes, ``onnx.ModelProto`` or :class:`~trtkit.model.LoadedModel`.
        trt: the ``tensorrt`` module (default: the installed one; tests pass a fake).
        sanitize, fold_constants: as :class:`BuildConfig`'s (the same preparation as the build that follows).

    Raises:
        ParseError: the parser refused the prepared model (every error listed, with the rewrites tried).
    """
    trt = trt or tensorrt()
    logger = make_trt_logger(trt, min_severity="ERROR")
    builder = _create_builder(trt, logger)
    query = trt.OnnxParser(builder.create_network(compat.network_flags(trt)), logger)  # answers op support
    prepared = prepare(
        load_model(model, external_data=False),
        target=ParserTarget.from_trt(trt, query),
        sanitize=sanitize,
        fold_constants=fold_constants,
    )
    network = builder.create_network(compat.network_flags(trt))
    _parse(trt.OnnxParser(network, logger), prepared.loaded, prepared)
    return compat.shape_tensor_inputs(network)


def statistics_engine_builder(config: BuildConfig, trt=None) -> Callable[[object], bytes]:
    """The function calibration calls to build its FP32 statistics engine (``onnx.ModelProto -> engine bytes``).

    It builds in this process with the user's profiles, tactic sources, timing cache and workspace, in FP32, without
    calibration, precision checks or layer detail; the statistics engine only runs the calibration data once, so at
    optimization level 1 (or the user's, when lower).
    """
    level = 1 if config.optimization_level is None else min(int(config.optimization_level), 1)
    fp32 = dataclasses.replace(
        config,
        precision="fp32",
        calibration=None,
        require_precision=False,
        profiling_verbosity="NONE",
        strongly_typed=False,
        save_qdq_onnx=None,
        optimization_level=level,
    )

    def build_statistics_engine(model) -> bytes:
        return build_serialized(model, fp32, trt=trt).engine

    return build_statistics_engine


def custom_ops(proto) -> list[str]:
    """Op types of the graph that no ONNX opset defines (TensorRT builds them from its plugin registry)."""
    import onnx

    return sorted({n.op_type for n in proto.graph.node if not onnx.defs.has(n.op_type, n.domain or "")})


# 8.x: "Requested amount of GPU memory (N bytes) could not be allocated"; 10.x: "out of Memory (Requested size was
# N bytes.)"
_OOM = re.compile(r"Requested amount of (?:GPU )?memory \((?P<n>\d+) bytes\)|Requested size was (?P<m>\d+) bytes")


def failure_message(name: str, log: list, workspace_bytes: int | None) -> str:
    """Why the build failed, from TensorRT's log; out of GPU memory is said as such (8.6 then reports "Could not
    find any implementation for node", which reads like an unsupported op)."""
    errors = [m for s, m in log if s in ("ERROR", "INTERNAL_ERROR")]
    detail = "; ".join(errors[-5:]) or "TensorRT gave no reason (its log says more: on_log receives it)"
    requested = sorted(
        {int(found.group("n") or found.group("m")) for _, m in log if (found := _OOM.search(m))}, reverse=True
    )
    if not requested:
        return f"TensorRT could not build an engine for '{name}': {detail}"
    limit = f"{workspace_bytes / 2**20:.0f} MiB" if workspace_bytes else "TensorRT's default (the GPU's memory)"
    sizes = ", ".join(f"{n / 2**20:.0f} MiB" for n in requested[:5])
    return (
        f"TensorRT ran out of GPU memory building '{name}': it could not allocate {sizes} (workspace limit "
        f"{limit}). Free GPU memory, lower the profile's max shapes, or set workspace_bytes lower so that "
        f"tactics needing more are skipped. TensorRT said: {detail}"
    )


def _create_builder(trt, logger):
    try:
        builder = trt.Builder(logger)
    except TypeError as exc:  # pybind11 "factory function returned nullptr": CUDA could not be initialized
        raise DependencyError(
            "TensorRT could not create a builder: CUDA failed to initialize (no GPU, no driver, or a driver too "
            f"old for this TensorRT). Run `trtkit doctor` to see what is missing. ({exc})"
        ) from exc
    if builder is None:
        raise DependencyError("TensorRT could not create a builder; run `trtkit doctor`")
    return builder


def _op_check(loaded, trt, parser, phase):
    """The op check of a model whose parse failed (``None`` when the check itself fails: the parse error stands)."""
    phase("check")
    try:
        return opcheck.check_with_parser(loaded, trt, parser)
    except Exception:  # noqa: BLE001 - the parser's own errors are the message; the op table is extra
        return None


def _parse(parser, loaded, prepared=None, check=None) -> None:
    """Parse; a failure lists every parser error, the rewrites tried, and carries the op check as ``.report``
    (``check``: a callable making it, called only on failure)."""
    path = str(loaded.path) if loaded.path else None
    try:
        ok = parser.parse(loaded.data, path) if path else parser.parse(loaded.data)
    except (RuntimeError, OSError) as exc:  # e.g. 8.6's RoiAlign importer: "Unable to open library: libnvinfer_vc_..."
        issues = [_with_node(issue, loaded.proto) for issue in compat.parser_errors(parser)]
        where = f" at {issues[-1]}" if issues else ""
        raise ParseError(
            f"TensorRT's ONNX parser stopped parsing '{loaded.name}'{where}: {exc}. A library TensorRT loads for "
            "one of the model's ops is missing or broken: install TensorRT with its plugin libraries "
            "(libnvinfer_plugin, libnvinfer_vc_plugin), or replace the op.",
            issues,
        ) from exc
    if ok:
        return
    issues = [_with_node(issue, loaded.proto) for issue in compat.parser_errors(parser)]
    lines = "\n".join(f"  - {issue}" for issue in issues) or "  - (the parser reported no detail)"
    tried = [str(r) for r in (prepared.rewrites if prepared is not None else [])]
    tried_lines = "".join(f"\n  - {r}" for r in tried)
    error = ParseError(
        f"TensorRT's ONNX parser could not parse '{loaded.name}' ({len(issues)} error(s)):\n{lines}\n"
        + (f"Rewrites tried before parsing:{tried_lines}\n" if tried else "")
        + "trtkit's op check shows which ops this TensorRT supports.",
        issues,
    )
    error.report = check() if check is not None else None
    raise error


def _with_node(issue, proto):
    """Fill in the node's name and op type from the model where the parser gives only its index (TensorRT 8.6)."""
    nodes = proto.graph.node
    if issue.node_name or not 0 <= issue.node_index < len(nodes):
        return issue
    node = nodes[issue.node_index]
    return dataclasses.replace(issue, node_name=node.name or f"#{issue.node_index}", node_op=node.op_type)


def configure(trt, builder, bconfig, config: BuildConfig, plan, profiles, shape_inputs=()) -> list:
    """Apply ``config`` and the precision ``plan`` to a ``trt.IBuilderConfig``; returns the TensorRT profiles added
    (the entries of ``shape_inputs``, shape-tensor inputs, are their values)."""
    if config.workspace_bytes:
        compat.set_workspace(trt, bconfig, config.workspace_bytes)
    if config.optimization_level is not None:
        bconfig.builder_optimization_level = int(config.optimization_level)
    if config.tactic_sources is not None:
        if bconfig.set_tactic_sources(compat.tactic_source_mask(trt, config.tactic_sources)) is False:
            raise BuildError(f"TensorRT refused tactic sources {', '.join(config.tactic_sources)}")
    if compat.has_builder_flag(trt, "TF32"):
        compat.set_builder_flag(trt, bconfig, "TF32", config.tf32)
    compat.set_profiling_verbosity(trt, bconfig, config.profiling_verbosity)
    if config.hardware_compatibility:
        compat.set_hardware_compatibility(trt, bconfig, config.hardware_compatibility)
    if config.version_compatible:
        compat.set_builder_flag(trt, bconfig, "VERSION_COMPATIBLE")
    if config.max_aux_streams is not None:
        bconfig.max_aux_streams = int(config.max_aux_streams)
    for flag in plan.flags:
        compat.set_builder_flag(trt, bconfig, flag)
    added = []
    for profile in profiles:
        trt_profile = profile.to_trt(builder, shape_inputs)
        if bconfig.add_optimization_profile(trt_profile) < 0:
            raise BuildError(f"TensorRT refused optimization profile {profile.to_json()}")
        added.append(trt_profile)
    if plan.calibrator is not None:
        compat.set_int8_calibrator(trt, bconfig, plan.calibrator, added[0] if added else None)
    return added


def _precision_report(trt, logger, engine: bytes, config: BuildConfig, precision_report):
    if config.profiling_verbosity != "DETAILED":
        return None
    runtime = trt.Runtime(logger)
    deserialized = runtime.deserialize_cuda_engine(engine)
    if deserialized is None:
        raise BuildError(
            "TensorRT built an engine it cannot load back; its log says why (on_log receives it)", field="on_log"
        )
    report = precision_report.analyze(engine_information(trt, deserialized), config.precision)
    report.check(require=config.require_precision)
    return report.to_json()
