"""Errors raised by trtkit.

Every error meant for the user derives from :class:`TrtkitError`; the CLI prints its message on one line and exits 2
for a :class:`UsageError` (the arguments are wrong), 1 for any other. Bugs in trtkit itself raise
:class:`TrtkitInternalError` so they are never mistaken for bad input.

An error about one argument carries ``field`` (its Python API name, e.g. ``calibration.batch_size``) and ``accepted``
(what it accepts, in words). Messages name arguments by their Python names, never by a command-line flag: the CLI
writes the name as its flag, or puts the flag first where the message does not name it::

    TrtkitError
    ├── UsageError             an argument has the wrong type or value, or two arguments conflict (CLI exit 2)
    ├── WriteError             an output file cannot be written (folder missing or read-only, disk full)
    ├── DependencyError        a required package or library (tensorrt, cuda-python, driver) is missing or unusable
    ├── ModelError             the ONNX model cannot be read, parsed or built as asked
    │   └── ParseError         TensorRT's ONNX parser refused the model (every parser error listed)
    ├── ProfileError           an optimization profile is malformed or inconsistent with the model
    │   └── ShapeSpecError     shape text (``images:1x3x8x8,...``) is malformed (also a UsageError)
    ├── BuildError             TensorRT failed to build a serialized engine
    ├── EngineError            an engine file cannot be loaded, or does not match this machine (manifest check)
    ├── InputError             inputs given to a runner are missing, misnamed, of the wrong dtype or shape
    ├── CudaError              a CUDA runtime call failed (names the call and the CUDA error)
    ├── CalibrationError       calibration data or cache is unusable
    ├── UnsupportedError       a feature is not available in the installed TensorRT version
    ├── IsolationError         a child process running a build died (signal, out of memory)
    ├── PipelineError          a stage of a streaming pipeline failed (names the stage and the frame index)
    └── ServeError             a server cannot start or serve as asked (a port in use, no model could load)
    TrtkitInternalError        a bug in trtkit: please report it
"""

from __future__ import annotations

from typing import Any


class TrtkitError(Exception):
    """Base class of every error trtkit raises for bad input or an unusable environment.

    Attributes:
        field: the argument the error is about (Python API name, dotted for nested settings), or ``None``.
        accepted: what that argument accepts, in words, or ``None``.
    """

    def __init__(self, message: str = "", *, field: str | None = None, accepted: str | None = None):
        super().__init__(message)
        self.field = field
        self.accepted = accepted


class UsageError(TrtkitError):
    """An argument has the wrong type or value, or arguments conflict; nothing was read or run yet."""


class WriteError(TrtkitError):
    """An output file cannot be written."""


class DependencyError(TrtkitError):
    """A required package or library is missing or unusable."""


class ModelError(TrtkitError):
    """The ONNX model cannot be read or used as asked.

    Attributes:
        report: the op check's report (``trtkit.builder.opcheck.CheckReport``) when that check refused the model.
    """

    report: Any = None


class ParseError(ModelError):
    """TensorRT's ONNX parser refused the model.

    Attributes:
        errors: the parser errors, each a :class:`trtkit._version_compat.ParserIssue`.
    """

    def __init__(self, message: str, errors: list | None = None, **hint):
        super().__init__(message, **hint)
        self.errors = list(errors or [])


class ProfileError(TrtkitError):
    """An optimization profile or shape specification is malformed or does not fit the model."""


class ShapeSpecError(ProfileError, UsageError):
    """Shape or profile text is malformed, or its min/opt/max do not hold together (``field`` is ``shapes``)."""

    def __init__(
        self,
        message: str = "",
        *,
        field: str | None = "shapes",
        accepted: str | None = "NAME:MIN,OPT,MAX per input, e.g. images:1x3x224x224,8x3x224x224,32x3x224x224",
    ):
        super().__init__(message, field=field, accepted=accepted)


class BuildError(TrtkitError):
    """TensorRT failed to build an engine."""


class EngineError(TrtkitError):
    """An engine cannot be loaded or does not match this machine."""


class InputError(TrtkitError):
    """Inputs given to a runner do not match the engine."""


class CudaError(TrtkitError):
    """A CUDA runtime call failed."""


class CalibrationError(TrtkitError):
    """Calibration data or a calibration cache is unusable."""


class UnsupportedError(TrtkitError):
    """A feature is not available in the installed TensorRT version."""


class IsolationError(TrtkitError):
    """A child process doing work for trtkit died.

    Attributes:
        crash: what the parent knows of the child's death (a ``trtkit.builder.crash_report.CrashInfo``), once known.
    """

    crash: Any = None


class PipelineError(TrtkitError):
    """A stage of a :mod:`trtkit.pipeline` failed.

    Attributes:
        stage: the name of the stage that failed.
        frame: the index of the frame it was working on (``None`` when it failed outside any frame).
    """

    def __init__(self, message: str, stage: str | None = None, frame: int | None = None):
        super().__init__(message)
        self.stage = stage
        self.frame = frame


def first_line(exc: BaseException) -> str:
    """The first non-empty line of ``exc``'s message, whole (a message is never cut mid-sentence), else the name of
    its class: how another library's multi-line error (onnx's checker, its converter) is quoted in one of ours."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


class TrtkitInternalError(Exception):
    """A bug in trtkit itself, not a problem with the user's input."""


class ServeError(TrtkitError):
    """A server cannot start or serve as asked: a port in use, no model that could load, Triton not ready."""
