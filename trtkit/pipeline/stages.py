"""Stages and the bounded queues between them.

A :class:`Frame` travels ``source → stage → ... → sink``; each stage is a plain callable run by its own thread(s),
each pair of neighbours joined by a :class:`Channel` of fixed capacity, so a slow stage makes the ones before it
wait (back-pressure) instead of letting frames pile up in memory. A stage with several workers still hands frames on
in their order: a worker waits its turn (:class:`_Turnstile`) before putting its frame in the next queue.

Two events steer every thread: ``drain`` (stop reading the source; frames already read go on to the sink, as on
Ctrl-C) and ``abort`` (a stage failed: every thread leaves at its next queue operation).
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from trtkit.pipeline.stats import QueueGauge, StageTimer

END = object()  # put after the last frame: "no more frames"
_POLL_S = 0.05  # how often a blocked queue operation looks at the abort event


class Aborted(Exception):
    """Raised inside a pipeline thread when another thread failed: leave now."""


@dataclass
class Frame:
    """One frame (or image) and what the stages made of it.

    Attributes:
        index: position among the frames the source delivered, from 0 (frames it could not decode are not
            counted here; the source lists them in its ``skipped``).
        image: the decoded picture, HxWx3 uint8 RGB (what sinks write and drawing draws on).
        name: where it came from (a file name for image folders, ``frame N`` for videos).
        sample: the preprocessed model input for this frame (no batch axis).
        meta: what preprocessing tells postprocessing (e.g. a letterbox's scale and padding).
        outputs: the engine's outputs for this frame (output name → array, no batch axis).
        result: what postprocessing made of the outputs (e.g. detections).
    """

    index: int
    image: Any
    name: str = ""
    sample: Any = None
    meta: Any = None
    outputs: dict = field(default_factory=dict)
    result: Any = None


@dataclass
class Stage:
    """A step of the pipeline: ``fn(frame)`` returns the frame (or None, having changed it in place).

    Args:
        name: shown in the statistics and in errors.
        fn: the callable.
        workers: threads running ``fn`` side by side (frames still leave in order).
    """

    name: str
    fn: Callable
    workers: int = 1


class Channel:
    """A bounded queue whose blocking operations give up when the pipeline aborts."""

    def __init__(self, name: str, capacity: int, abort: threading.Event):
        self.name = name
        self._q: queue.Queue = queue.Queue(maxsize=max(1, capacity))
        self._abort = abort
        self.gauge = QueueGauge(name, max(1, capacity))

    def put(self, item) -> None:
        while True:
            if self._abort.is_set():
                raise Aborted
            try:
                self._q.put(item, timeout=_POLL_S)
            except queue.Full:
                continue
            self.gauge.sample(self._q.qsize())
            return

    def get(self, timeout: float | None = None):
        """The next item; ``None`` if ``timeout`` seconds pass first (``timeout=None`` waits as long as it takes)."""
        deadline = None if timeout is None else time.perf_counter() + timeout
        while True:
            if self._abort.is_set():
                raise Aborted
            wait = _POLL_S if deadline is None else min(_POLL_S, deadline - time.perf_counter())
            try:
                return self._q.get(timeout=wait) if wait > 0 else self._q.get_nowait()
            except queue.Empty:
                if deadline is not None and time.perf_counter() >= deadline:
                    return None

    def depth(self) -> int:
        return self._q.qsize()


class _Turnstile:
    """Lets the workers of one stage hand on frames in the order they took them, and forwards END last."""

    def __init__(self, abort: threading.Event):
        self._cond = threading.Condition()
        self._next = 0
        self._end_at: int | None = None
        self._abort = abort

    def wait_turn(self, seq: int) -> None:
        with self._cond:
            while self._next != seq:
                if self._abort.is_set():
                    raise Aborted
                self._cond.wait(_POLL_S)

    def advance(self, out: Channel) -> None:
        with self._cond:
            self._next += 1
            if self._end_at == self._next:
                out.put(END)
            self._cond.notify_all()

    def end(self, seq: int, out: Channel) -> None:
        with self._cond:
            if self._end_at is not None:
                return
            self._end_at = seq
            if self._next == seq:
                out.put(END)


class StageRunner:
    """The threads of one :class:`Stage` between its input and output channels."""

    def __init__(self, stage: Stage, inp: Channel, out: Channel, fail: Callable):
        self.stage = stage
        self.inp, self.out = inp, out
        self.timer = StageTimer(stage.name, max(1, stage.workers))
        self._fail = fail
        self._take = threading.Lock()
        self._seq = 0
        self._turn = _Turnstile(inp._abort)

    def threads(self) -> list:
        return [
            threading.Thread(target=self._work, name=f"trtkit-{self.stage.name}-{i}", daemon=True)
            for i in range(max(1, self.stage.workers))
        ]

    def _work(self) -> None:
        frame = None
        try:
            while True:
                with self._take:
                    item = self.inp.get()
                    seq, self._seq = self._seq, self._seq + 1
                    if item is END:
                        self.inp.put(END)  # for the other workers of this stage
                if item is END:
                    self._turn.end(seq, self.out)
                    return
                frame = item
                t0 = time.perf_counter()
                result = self.stage.fn(frame)
                self.timer.add(time.perf_counter() - t0)
                self._turn.wait_turn(seq)
                self.out.put(frame if result is None else result)
                self._turn.advance(self.out)
        except Aborted:
            return
        except BaseException as exc:  # noqa: BLE001 - reported by the pipeline, naming the stage and frame
            self._fail(self.stage.name, getattr(frame, "index", None), exc)
