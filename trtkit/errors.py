"""Errors raised by trtkit.

Every error meant for the user derives from :class:`TrtkitError`; the CLI prints its message on one line and exits 1.
Bugs in trtkit itself raise :class:`TrtkitInternalError` so they are never mistaken for bad input::

    TrtkitError
    ├── DependencyError        a required package or library (tensorrt, cuda-python, driver) is missing or unusable
    ├── ModelError             the ONNX model cannot be read, parsed or built as asked
    │   └── ParseError         TensorRT's ONNX parser refused the model (every parser error listed)
    ├── ProfileError           optimization profile or --shapes is malformed or inconsistent with the model
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
    """Base class of every error trtkit raises for bad input or an unusable environment."""


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

    def __init__(self, message: str, errors: list | None = None):
        super().__init__(message)
        self.errors = list(errors or [])


class ProfileError(TrtkitError):
    """An optimization profile or shape specification is malformed or does not fit the model."""


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


class TrtkitInternalError(Exception):
    """A bug in trtkit itself, not a problem with the user's input."""


class ServeError(TrtkitError):
    """A server cannot start or serve as asked: a port in use, no model that could load, Triton not ready."""
