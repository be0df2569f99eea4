"""``trtkit.builder``: build an engine from an ONNX model and write it, its manifest and timing cache atomically."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable

from trtkit._atomic import check_writable, write_bytes_atomic
from trtkit.builder import isolate
from trtkit.builder.builder import BuildResult, build_serialized
from trtkit.builder.config import BuildConfig
from trtkit.builder.crash_report import model_crash_context
from trtkit.builder.progress import BuildProgress
from trtkit.log import logger
from trtkit.manifest import write_manifest


def build(model, config: BuildConfig | None = None, *, output=None, isolate: bool = True, trt=None,
          on_log: Callable[[str, str], None] | None = None, on_phase: Callable[[str], None] | None = None,
          log_severity: str = "INFO", on_progress: Callable | None = None) -> BuildResult:
    """Build a TensorRT engine from an ONNX model.

    Args:
        model: ONNX path, bytes or ``onnx.ModelProto``.
        config: build settings; defaults to FP32 with TensorRT's defaults.
        output: where to write the engine (its manifest goes beside it as ``<output>.manifest.json``); nothing is
            written when ``None``. Files are written only after a successful build, atomically.
        isolate: parse and build in a child process, so a crash inside TensorRT raises an error here instead of
            killing this process.
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
        TrtkitError: see :func:`~trtkit.builder.builder.build_serialized`; also when ``output`` is not writable
            (checked before building).
    """
    config = config or BuildConfig()
    if output is not None:
        check_writable(output)
    if on_progress is not None:
        on_log, on_phase, log_severity = _with_progress(on_progress, on_log, on_phase, log_severity)
    if isolate and trt is None:
        # callbacks stay in this process; the child streams log lines and phases back to them
        result = build_isolated(model, config, on_log=on_log, on_phase=on_phase, log_severity=log_severity)
    else:
        result = build_serialized(model, config, trt=trt, on_log=on_log, on_phase=on_phase,
                                  log_severity=log_severity)
    if output is not None:
        save(result, output, config)
    return result


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


def save(result: BuildResult, output, config: BuildConfig) -> Path:
    """Write the engine, its manifest and the timing cache (when configured), each atomically."""
    output = Path(output)
    write_bytes_atomic(output, result.engine)
    write_manifest(output, replace(result.manifest, engine_file=output.name))
    if config.timing_cache and result.timing_cache:
        write_bytes_atomic(config.timing_cache, result.timing_cache)
    return output


def build_isolated(model, config=None, *, on_log: Callable[[str, str], None] | None = None,
                   on_phase: Callable[[str], None] | None = None, log_severity: str = "INFO",
                   timeout: float | None = None, trt_factory: Callable[[], object] | None = None):
    """:func:`~trtkit.builder.builder.build_serialized` in a child process; same arguments, same result.

    The child always listens to TensorRT at VERBOSE, so the parent knows which ONNX node the parser was importing
    if it crashes; ``on_log`` still receives only lines at ``log_severity`` and above.

    Args:
        model: ONNX path, bytes or ``onnx.ModelProto`` (sent to the child; a path is cheapest).
        config: a :class:`~trtkit.builder.config.BuildConfig`.
        on_log: called here with ``(severity, message)`` as TensorRT logs in the child.
        on_phase: called here with each phase name as the child starts it.
        log_severity: lowest severity passed to ``on_log``.
        timeout: seconds before the build is stopped (``None``: no limit).
        trt_factory: picklable callable returning the ``tensorrt`` module to use in the child (tests: a fake).

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
    return isolate.run_isolated(_build_in_child, model, config, factory, log_severity, on_event=on_event,
                                timeout=timeout, crash_context=lambda: model_crash_context(model, "the build"))


def _build_in_child(model, config, trt_factory, log_severity):
    trt = trt_factory() if trt_factory is not None else None
    return build_serialized(model, config, trt=trt, on_log=isolate._ChildLog(log_severity),
                            on_phase=isolate.phase_sink,
                            log_severity="VERBOSE")
