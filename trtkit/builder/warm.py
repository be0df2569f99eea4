"""What a build worker process keeps from build to build: one TensorRT logger and the builder made with it, and the
marks of its own start (:mod:`trtkit.builder.timeline`).

A fresh builder per build costs a TensorRT builder creation each time (the warm-up's would be thrown away), and
TensorRT keeps the first logger it was given as its global one, warning when a later builder brings another. The
worker's warm-up creates the pair once (:func:`keep`); each build borrows it (:func:`borrow`), its logger pointed at
that build's threshold and sink, and gives it back. A build started while the pair is borrowed (calibration's FP32
statistics engine, built inside the INT8 build) makes its own, as any build outside a worker does.
"""

from __future__ import annotations

import contextlib

from trtkit.builder import timeline

_kept: dict = {}  # id(tensorrt module) -> [module, logger, builder, borrowed]
_marks: dict = {}  # this worker's start-up marks, not yet reported by a build


def mark(name: str, at: float | None = None) -> None:
    """Record a start-up mark of this worker, now or ``at`` (reported with its first build)."""
    _marks[name] = timeline.now() if at is None else at


def take_marks() -> dict:
    """The start-up marks not yet reported (``{}`` once a build has taken them: the worker was reused)."""
    marks = dict(_marks)
    _marks.clear()
    return marks


def keep(trt, logger, builder) -> None:
    """Keep ``builder`` (made with ``logger``, a :func:`trtkit.log.make_trt_logger`) for this process's builds."""
    _kept[id(trt)] = [trt, logger, builder, False]


@contextlib.contextmanager
def borrow(trt, min_severity: str, sink):
    """``(logger, builder)`` kept for ``trt``, the logger retargeted to ``min_severity``/``sink`` until the block
    ends; ``(None, None)`` when none is kept or it is already borrowed."""
    entry = _kept.get(id(trt))
    if entry is None or entry[0] is not trt or entry[3]:
        yield None, None
        return
    _, logger, builder, _ = entry
    entry[3] = True
    logger.retarget(min_severity, sink)
    try:
        yield logger, builder
    finally:
        logger.retarget("ERROR", None)
        entry[3] = False


def forget() -> None:
    """Drop what is kept (tests)."""
    _kept.clear()
    _marks.clear()
