"""``trtkit.builder``: build an engine from an ONNX model and write it and its manifest atomically."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Callable

from trtkit import _version_compat as compat
from trtkit._atomic import check_outputs, write_files_atomic
from trtkit.builder import isolate, timeline, worker
from trtkit.builder.config import BuildConfig
from trtkit.builder.crash_report import model_crash_context
from trtkit.builder.progress import BuildProgress
from trtkit.builder.result import BuildResult
from trtkit.builder.sanitize import saved_files
from trtkit.errors import UsageError
from trtkit.log import logger
from trtkit.manifest import manifest_path
from trtkit.model import model_files


def build(
    model,
    config: BuildConfig | None = None,
    *,
    output=None,
    isolate: bool = True,
    trt=None,
    on_log: Callable[[str, str], None] | None = None,
    on_phase: Callable[[str], None] | None = None,
    log_severity: str = "INFO",
    on_progress: Callable | None = None,
) -> BuildResult:
    """Build a TensorRT engine from an ONNX model.

    Args:
        model: ONNX path, bytes or ``onnx.ModelProto``.
        config: build settings; defaults to FP32 with TensorRT's defaults.
        output: where to write the engine (its manifest goes beside it as ``<output>.manifest.json``); nothing is
            written when ``None``. Files are written only after a successful build, atomically.
        isolate: parse and build in a child process, so a crash inside TensorRT raises an error here instead of
            killing this process (a warm worker reused by the next isolated build: :mod:`trtkit.builder.worker`).
        trt: the ``tensorrt`` module (tests pass a fake; implies ``isolate=False``).
        on_log: receives ``(severity, message)`` for TensorRT's log lines.
        on_phase: receives the name of each build phase as it starts.
        log_severity: lowest TensorRT severity passed to ``on_log``.
        on_progress: receives a :class:`~trtkit.builder.progress.ProgressEvent` at each phase and each layer
            TensorRT chooses kernels for, with an ETA (TensorRT then logs at VERBOSE; ``on_log`` still gets
            ``log_severity`` and above).

    Returns:
        A :class:`~trtkit.builder.builder.BuildResult`.

    Raises:
        TrtkitError: see :func:`~trtkit.builder.builder.build_serialized`. Before building: UsageError when an
            output (engine, manifest, timing cache, calibration cache, Q/DQ model) is a folder or the same file as
            the model, the calibration data or another output; WriteError when its folder is missing or read-only.
    """
    check_arguments(
        model,
        config,
        output=output,
        isolate=isolate,
        on_log=on_log,
        on_phase=on_phase,
        log_severity=log_severity,
        on_progress=on_progress,
    )
    marks = {"process_start": timeline.process_start(), "build_called": timeline.now()}
    config = config or BuildConfig()
    if isolate and trt is None:  # the worker starts and warms up while this process checks the files and the model
        worker.prestart(_warmup())
    check_outputs(output_files(config, output), input_files(model, config))
    check_inputs(model, config)
    marks["inputs_checked"] = timeline.now()
    severity = log_severity
    if on_progress is not None:  # the tracker reads VERBOSE lines; on_log still gets log_severity and above
        on_log, on_phase, severity = _with_progress(on_progress, on_log, on_phase, log_severity)
    if isolate and trt is None:
        # callbacks stay in this process; the child streams log lines and phases back to them: those at
        # log_severity and above, and of the VERBOSE ones only what the progress tracker counts
        result = build_isolated(
            model,
            config,
            on_log=on_log,
            on_phase=on_phase,
            log_severity=log_severity,
            progress_lines=on_progress is not None,
            marks=marks,
        )
    else:
        from trtkit.builder.builder import build_serialized

        result = build_serialized(model, config, trt=trt, on_log=on_log, on_phase=on_phase, log_severity=severity)
    result.marks = {**marks, **result.marks}
    result.manifest = replace(result.manifest, timings_s=timeline.relative(result.marks))
    if output is not None:
        save(result, output)
        result.marks["written"] = timeline.now()
        result.manifest = replace(result.manifest, timings_s=timeline.relative(result.marks))
    return result


def check_arguments(
    model, config, *, output=None, isolate=True, on_log=None, on_phase=None, log_severity="INFO", on_progress=None
) -> None:
    """Type checks of :func:`build`'s arguments, before anything is read or run.

    Raises:
        UsageError: an argument of the wrong type or value (``field`` names it).
    """
    from trtkit import _check
    from trtkit.log import SEVERITIES
    from trtkit.model import LoadedModel

    if (isinstance(model, str) and not model) or (
        not isinstance(model, (str, os.PathLike, bytes, bytearray, memoryview, LoadedModel))
        and type(model).__name__ != "ModelProto"
    ):
        _check.fail("model", model, "an ONNX path, the model's bytes or an onnx.ModelProto")
    if config is not None and not isinstance(config, BuildConfig):
        accepted = "a BuildConfig or None"
        if isinstance(config, str):
            accepted += f" (e.g. BuildConfig(precision={config!r}))"
        _check.fail("config", config, accepted)
    _check.path("output", output, optional=True)
    _check.boolean("isolate", isolate)
    _check.callable_("on_log", on_log)
    _check.callable_("on_phase", on_phase)
    _check.callable_("on_progress", on_progress)
    _check.choice("log_severity", log_severity, SEVERITIES)


def _check_uint8_profiles(proto, profiles: list) -> None:
    """The profiles against the engine's uint8 (N, H, W, 3) input; a profile in the model's NCHW layout is named."""
    from trtkit.builder.image_input import image_input, nhwc_dims
    from trtkit.builder.profiles import resolve_profiles
    from trtkit.errors import ProfileError
    from trtkit.model import model_inputs

    value, dims = image_input(proto)
    inputs = dict(model_inputs(proto), **{value.name: nhwc_dims(dims)})
    try:
        resolve_profiles(inputs, profiles)
    except ProfileError as exc:
        example = "x".join(str(d) if isinstance(d, int) else "1" for d in nhwc_dims(dims))
        raise ProfileError(
            f"{exc}. With input_uint8_nhwc the engine's input '{value.name}' is (N, H, W, 3) uint8: give its "
            f"shapes in that layout, e.g. {value.name}:{example}",
            field="input_uint8_nhwc",
        ) from exc


def check_inputs(model, config: BuildConfig):
    """What can be checked without TensorRT, checked before it is needed, so every mistake of this kind is named
    at once rather than after "TensorRT is not installed": the model reads as ONNX (its external data complete),
    its head fits ``add_nms``, the profiles fit its inputs, INT8 has calibration data or a cache (or a Q/DQ model),
    a calibration folder holds files it can use, and the INT8 mode has the algorithm asked for. Returns the loaded
    model.

    Raises:
        ModelError, ProfileError, CalibrationError, UnsupportedError, UsageError: what is wrong, named.
    """
    from calibrators.session import check_settings
    from trtkit.builder.precision import check_int8_mode, has_qdq
    from trtkit.builder.profiles import may_have_shape_inputs, resolve_profiles
    from trtkit.errors import CalibrationError
    from trtkit.model import load_model, model_inputs

    loaded = load_model(model, check=False, external_data=False)  # the graph is enough; weights stay on disk
    if config.add_nms is not None:
        from trtkit.detection.nms_plugin import head_layout

        head_layout(loaded.proto, unknown_ok=True)  # dims that only folding fixes are checked once folded
    if config.input_uint8_nhwc:
        _check_uint8_profiles(loaded.proto, config.profiles)
    elif not may_have_shape_inputs(loaded.proto):
        # a shape-tensor input's entry holds values, known as such only once TensorRT has parsed the model
        resolve_profiles(model_inputs(loaded.proto), config.profiles)
    calibration = config.calibration
    if calibration is not None and isinstance(calibration.source, (str, Path)):
        if not Path(calibration.source).is_dir():
            raise CalibrationError(
                f"calibration.source '{calibration.source}' is not a folder; give a folder of "
                "images or .npy/.npz files",
                field="calibration.source",
            )
    compat.check_plugin_files(config.plugins)
    if calibration is not None and calibration.cache_path and Path(calibration.cache_path).is_dir():
        raise UsageError(
            f"calibration.cache_path '{calibration.cache_path}' is a folder; give a file path",
            field="calibration.cache_path",
        )
    if config.precision == "int8" and not has_qdq(loaded.proto):
        check_int8_mode(config.int8_mode, calibration.algorithm if calibration else None)
        check_settings(calibration, loaded)
    return loaded


def output_files(config: BuildConfig, output=None) -> dict:
    """``{field: path or paths}`` of every file a build with ``config`` writes (``None`` where it writes none)."""
    calibration = config.calibration
    return {
        "output": output,
        "manifest": manifest_path(output) if output not in (None, "") else None,
        "timing_cache": config.timing_cache,
        "save_qdq_onnx": config.save_qdq_onnx,
        "save_prepared": saved_files(config.save_prepared) if config.save_prepared else None,
        "calibration.cache_path": calibration.cache_path if calibration else None,
    }


def input_files(model, config: BuildConfig) -> dict:
    """``{field: path or paths}`` of the files a build reads: the model and its external data files
    (:func:`trtkit.model.model_files`), the calibration data."""
    calibration = config.calibration
    return {
        **model_files(model),
        "calibration.source": calibration.source if calibration else None,
        **{f"plugins[{i}]": p for i, p in enumerate(config.plugins)},
    }


_RANK = {"VERBOSE": 0, "INFO": 1, "WARNING": 2, "ERROR": 3, "INTERNAL_ERROR": 4}


def _with_progress(on_progress, on_log, on_phase, log_severity: str):
    """Callbacks that feed a :class:`~trtkit.builder.progress.BuildProgress` and pass the rest on as asked."""
    tracker = BuildProgress(on_progress)
    threshold = _RANK.get(log_severity, 1)

    def log(severity, message):
        tracker.log(severity, message)
        if on_log is not None and _RANK.get(severity, 1) >= threshold:
            on_log(severity, message)

    def phase(name):
        tracker.phase(name)
        if on_phase is not None:
            on_phase(name)

    return log, phase, "VERBOSE"


def save(result: BuildResult, output) -> Path:
    """Write the engine and its manifest: both or neither, each atomically (the build itself has merged its timings
    into the timing cache file, :mod:`trtkit.builder.timing_cache`)."""
    output = Path(output)
    manifest = replace(result.manifest, engine_file=output.name)
    files = {
        output: result.engine,
        manifest_path(output): (json.dumps(manifest.to_json(), indent=2, sort_keys=True) + "\n").encode(),
    }
    write_files_atomic(files)
    return output


def build_isolated(
    model,
    config=None,
    *,
    on_log: Callable[[str, str], None] | None = None,
    on_phase: Callable[[str], None] | None = None,
    log_severity: str = "INFO",
    timeout: float | None = None,
    trt_factory: Callable[[], object] | None = None,
    progress_lines: bool = False,
    marks: dict | None = None,
):
    """:func:`~trtkit.builder.builder.build_serialized` in a child process; same arguments, same result.

    The child is this process's warm build worker (:mod:`trtkit.builder.worker`), replaced when it crashed, timed out
    or was interrupted. It listens to TensorRT at VERBOSE, so a crash names the ONNX node being imported; ``on_log``
    still receives only lines at ``log_severity`` and above.

    Args:
        model: ONNX path, bytes or ``onnx.ModelProto`` (sent to the child; a path is cheapest).
        config: a :class:`~trtkit.builder.config.BuildConfig`.
        on_log: called here with ``(severity, message)`` as TensorRT logs in the child.
        on_phase: called here with each phase name as the child starts it.
        log_severity: lowest severity passed to ``on_log``.
        timeout: seconds before the build is stopped (``None``: no limit).
        trt_factory: picklable callable returning the ``tensorrt`` module to use in the child (tests: a fake).
        progress_lines: also send the VERBOSE lines below ``log_severity`` that build progress counts
            (:func:`trtkit.builder.progress.counted`), for an ``on_log`` that feeds a progress tracker.
        marks: a dict that gets this process's :mod:`~trtkit.builder.timeline` marks of the call (the child's are in
            the result's ``marks``).

    Returns:
        The :class:`~trtkit.builder.builder.BuildResult`.

    Raises:
        IsolationError: the child crashed (signal named, with the ONNX node being parsed), ran out of memory or
            timed out.
        TrtkitError: whatever the build raised in the child (same class and message).
    """

    def on_event(event: dict) -> None:
        kind = event.get("kind")
        if kind == "output":  # what TensorRT or Python printed in the child: kept for debugging, not shown
            logger.debug("[build worker] %s", event.get("line", ""))
        elif kind == "log" and on_log is not None:
            on_log(event["severity"], event["message"])
        elif kind == "phase" and on_phase is not None:
            on_phase(*event.get("args", [event.get("name")]))

    factory = trt_factory or isolate.DEFAULT_TRT_FACTORY  # read at call time (CPU tests set it)
    return worker.run(
        _build_in_child,
        model,
        config,
        factory,
        log_severity,
        progress_lines,
        warmup=_warmup(factory),
        on_event=on_event,
        timeout=timeout,
        crash_context=lambda: model_crash_context(model, "the build"),
        marks=marks,
    )


def _warmup(trt_factory=None) -> tuple:
    """The warm-up call of a new build worker (``trt_factory`` default: :data:`isolate.DEFAULT_TRT_FACTORY`)."""
    return (_warm_up_in_child, (trt_factory or isolate.DEFAULT_TRT_FACTORY,))


def _warm_up_in_child(trt_factory) -> None:
    """What every build needs first, done before the first build arrives: the build's modules (onnx, numpy, the
    folding's graph editor and shape inference), tensorrt, a builder (CUDA's context) and the GPU's description. A
    failure here is dropped: the build itself meets it again and reports it."""
    import importlib

    from trtkit._device import device_info
    from trtkit._lazy import tensorrt
    from trtkit.builder import warm
    from trtkit.builder.builder import _create_builder
    from trtkit.log import make_trt_logger

    for name in ("onnx_graphsurgeon", "onnx.shape_inference"):
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    warm.mark("build_modules_imported")
    trt = trt_factory() if trt_factory is not None else tensorrt()
    warm.mark("tensorrt_imported")
    logger = make_trt_logger(trt, min_severity="ERROR")
    warm.keep(trt, logger, _create_builder(trt, logger))  # the builds of this worker use it (trtkit.builder.warm)
    warm.mark("builder_created")
    device_info()  # the manifest's GPU fields: cuda-python imported, the driver asked once
    warm.mark("worker_ready")


def _build_in_child(model, config, trt_factory, log_severity, progress_lines=False):
    from trtkit.builder import warm
    from trtkit.builder.builder import build_serialized

    received = timeline.now()
    trt = trt_factory() if trt_factory is not None else None
    result = build_serialized(
        model,
        config,
        trt=trt,
        on_log=isolate.ChildLog(log_severity, progress=progress_lines),
        on_phase=isolate.phase_sink,
        log_severity="VERBOSE",
    )
    started = warm.take_marks() or {"worker_reused": received}  # the worker's start-up, told by its first build
    result.marks = {**started, "call_received": received, **result.marks}
    return result
