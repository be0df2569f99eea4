"""``trtkit.builder``: build an engine from an ONNX model and write it, its manifest and timing cache atomically."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable

from trtkit._atomic import check_writable, write_bytes_atomic
from trtkit.builder.builder import BuildResult, build_serialized
from trtkit.builder.config import BuildConfig
from trtkit.builder.isolate import build_isolated
from trtkit.manifest import write_manifest


def build(model, config: BuildConfig | None = None, *, output=None, isolate: bool = True, trt=None,
          on_log: Callable[[str, str], None] | None = None, on_phase: Callable[[str], None] | None = None,
          log_severity: str = "INFO") -> BuildResult:
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

    Returns:
        A :class:`~trtkit.builder.builder.BuildResult`.

    Raises:
        TrtkitError: see :func:`~trtkit.builder.builder.build_serialized`; also when ``output`` is not writable
            (checked before building).
    """
    config = config or BuildConfig()
    if output is not None:
        check_writable(output)
    if isolate and trt is None:
        # callbacks stay in this process; the child streams log lines and phases back to them
        result = build_isolated(model, config, on_log=on_log, on_phase=on_phase, log_severity=log_severity)
    else:
        result = build_serialized(model, config, trt=trt, on_log=on_log, on_phase=on_phase,
                                  log_severity=log_severity)
    if output is not None:
        save(result, output, config)
    return result


def save(result: BuildResult, output, config: BuildConfig) -> Path:
    """Write the engine, its manifest and the timing cache (when configured), each atomically."""
    output = Path(output)
    write_bytes_atomic(output, result.engine)
    write_manifest(output, replace(result.manifest, engine_file=output.name))
    if config.timing_cache and result.timing_cache:
        write_bytes_atomic(config.timing_cache, result.timing_cache)
    return output
