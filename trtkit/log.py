"""trtkit's logger and the adapter that routes TensorRT's log into it.

Library code logs through ``logging.getLogger("trtkit")``; it never prints. The CLI decides what reaches the terminal.
"""

from __future__ import annotations

import logging
from typing import Callable

from trtkit._version_compat import enum_name

logger = logging.getLogger("trtkit")

# TensorRT severities by name, mapped to logging levels (names are stable across 8.6 / 10 / 11; values are not).
_SEVERITY_LEVELS = {
    "INTERNAL_ERROR": logging.CRITICAL,
    "ERROR": logging.ERROR,
    "WARNING": logging.WARNING,
    "INFO": logging.INFO,
    "VERBOSE": logging.DEBUG,
}
SEVERITIES = tuple(_SEVERITY_LEVELS)


def make_trt_logger(trt, *, min_severity: str = "WARNING", sink: Callable[[str, str], None] | None = None):
    """Create a ``trt.ILogger`` that forwards TensorRT's messages to trtkit's logger.

    Args:
        trt: the ``tensorrt`` module.
        min_severity: lowest severity name to forward (``"VERBOSE"`` for everything).
        sink: optional extra callable receiving ``(severity_name, message)`` for every forwarded message (the build
            log kept in the manifest, the isolation child's stream to its parent).

    Returns:
        An ``ILogger`` instance. Its ``log`` never raises: an exception inside a logging callback would unwind
        through TensorRT's C++ code. ``retarget(min_severity, sink)`` points it at another threshold and sink (a
        build worker keeps one logger, and the builder made with it, from build to build).
    """

    class _TrtkitLogger(trt.ILogger):
        def __init__(self):
            trt.ILogger.__init__(self)
            self.messages: list[tuple[str, str]] = []
            self.retarget(min_severity, sink)

        def retarget(self, min_severity: str, sink: Callable[[str, str], None] | None = None) -> None:
            """Forward from ``min_severity`` up, to ``sink`` too; the messages kept so far are dropped."""
            self.threshold, self.sink, self.messages = _SEVERITY_LEVELS[min_severity], sink, []

        def log(self, severity, msg):  # noqa: D401 - TensorRT callback
            try:
                name = enum_name(severity)
                level = _SEVERITY_LEVELS.get(name, logging.INFO)
                if level < self.threshold:
                    return
                self.messages.append((name, msg))
                logger.log(level, "[TRT] %s", msg)
                if self.sink is not None:
                    self.sink(name, msg)
            except Exception:  # never let an exception cross into TensorRT
                pass

    return _TrtkitLogger()
