"""Stages and the bounded queues between them.

A :class:`Frame` travels ``source → stage → ... → sink``; each stage is a plain callable run by its own thread(s),
each pair of neighbours joined by a :class:`Channel` of fixed capacity, so a slow stage makes the ones before it
wait (back-pressure) instead of letting frames pile up in memory. A stage with several workers still hands frames on
in their order: a worker waits its turn (:class:`_Turnstile`) before putting its frame in the next queue.

Two events steer every thread: ``drain`` (stop reading the source; frames already read go on to the sink, as on
Ctrl-C) and ``abort`` (a stage failed: every thread leaves at its next queue operation).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from trtkit.pipeline.stats import QueueGauge, StageTimer

END = object()  # put after the last frame: "no more frames"
_POLL_S = 0.05  # how often a blocked queue operation looks at the abort event
MAX_GROUP = 32  # most frames a stage worker, the source or the sink hands on at once


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
        pts: seconds from the source's start where it has timestamps (a live source), else None.
        arrived: when the frame arrived (``time.perf_counter()``), for its latency through the pipeline.
    """

    index: int
    image: Any
    name: str = ""
    sample: Any = None
    meta: Any = None
    outputs: dict = field(default_factory=dict)
    result: Any = None
    pts: float | None = None
    arrived: float = 0.0


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
    """A bounded queue of frames, handed on in groups, whose blocking operations give up when the pipeline aborts.

    ``put_many`` adds a group of frames and ``get_many`` takes every frame waiting (up to a limit) under one lock:
    a consumer that falls behind takes the backlog in one go, so the cost of a hand-off between threads is paid per
    group, not per frame. The capacity counts frames (a group larger than the room left goes in part by part), so
    memory stays bounded whatever the group sizes. ``END`` closes the channel: once the frames before it are taken,
    every ``get`` returns ``END``.
    """

    def __init__(self, name: str, capacity: int, abort: threading.Event):
        self.name = name
        self.capacity = max(1, capacity)
        self._items: deque = deque()
        self._closed = False
        self._cond = threading.Condition(threading.Lock())
        self._abort = abort
        self.gauge = QueueGauge(name, self.capacity)

    def put(self, item) -> None:
        """Add one frame, or ``END`` (no more frames)."""
        if item is END:
            with self._cond:
                self._closed = True
                self._cond.notify_all()
            return
        self.put_many([item])

    def put_many(self, frames: list) -> None:
        """Add ``frames`` in order, waiting for room as needed (never more than the capacity held)."""
        done, n = 0, len(frames)
        with self._cond:
            while done < n:
                room = self.capacity - len(self._items)
                if self._abort.is_set():
                    raise Aborted
                if room <= 0:
                    self._cond.wait(_POLL_S)
                    continue
                take = min(room, n - done)
                self._items.extend(frames[done : done + take])
                done += take
                self.gauge.sample(len(self._items))
                self._cond.notify_all()

    def get(self, timeout: float | None = None):
        """The next frame; ``END`` after the last; ``None`` if ``timeout`` seconds pass first (``timeout=None``
        waits as long as it takes)."""
        got = self.get_many(1, timeout)
        return got if got is None or got is END else got[0]

    def get_many(self, limit: int, timeout: float | None = None, key: Callable | None = None):
        """Up to ``limit`` frames, as many as are waiting (at least one; waits for the first); ``END`` once the
        channel is closed and empty; ``None`` if ``timeout`` seconds pass with no frame (``timeout=None`` waits as
        long as it takes; a frame already there is taken even with no time left). With ``key``, only frames whose
        ``key(frame)`` equals the first one's (the group stops at the first that differs)."""
        deadline = None if timeout is None else time.perf_counter() + timeout
        with self._cond:
            while True:
                if self._abort.is_set():
                    raise Aborted
                if self._items:
                    n = min(max(1, limit), len(self._items))
                    items = self._items
                    if key is None:
                        got = [items.popleft() for _ in range(n)]
                    else:
                        got = [items.popleft()]
                        first = key(got[0])
                        while len(got) < n and key(items[0]) == first:
                            got.append(items.popleft())
                    self._cond.notify_all()
                    return got
                if self._closed:
                    return END
                wait = _POLL_S if deadline is None else min(_POLL_S, deadline - time.perf_counter())
                if wait <= 0:
                    return None
                self._cond.wait(wait)

    def depth(self) -> int:
        return len(self._items)


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
    """The threads of one :class:`Stage` between its input and output channels.

    A worker takes a group of frames at a time: its share of those waiting (all of them over the workers, at least
    one, at most ``group``; with ``key``, frames of one key), runs ``fn`` on each in order and hands the group on in
    one go. The timer records the
    group's time divided among its frames (so avg/min/max/p99 stay per frame, each the mean of its group).
    """

    def __init__(
        self,
        stage: Stage,
        inp: Channel,
        out: Channel,
        fail: Callable,
        group: int = MAX_GROUP,
        key: Callable | None = None,
    ):
        self.stage = stage
        self.inp, self.out = inp, out
        self.timer = StageTimer(stage.name, max(1, stage.workers))
        self._fail = fail
        self._take = threading.Lock()
        self._seq = 0
        self._turn = _Turnstile(inp._abort)
        self._group = max(1, int(group))
        self._workers = max(1, stage.workers)
        self._key = key

    def threads(self) -> list:
        return [
            threading.Thread(target=self._work, name=f"trtkit-{self.stage.name}-{i}", daemon=True)
            for i in range(max(1, self.stage.workers))
        ]

    def _work(self) -> None:
        frame = None
        fn = self.stage.fn
        try:
            while True:
                with self._take:
                    share = -(-self.inp.depth() // self._workers)
                    item = self.inp.get_many(min(self._group, max(1, share)), key=self._key)
                    seq, self._seq = self._seq, self._seq + 1
                    if item is END:
                        self.inp.put(END)  # for the other workers of this stage
                if item is END:
                    self._turn.end(seq, self.out)
                    return
                t0 = time.perf_counter()
                for i, frame in enumerate(item):
                    result = fn(frame)
                    if result is not None:
                        item[i] = result
                self.timer.add(time.perf_counter() - t0, len(item))
                frame = None
                self._turn.wait_turn(seq)
                self.out.put_many(item)
                self._turn.advance(self.out)
        except Aborted:
            return
        except BaseException as exc:  # noqa: BLE001 - reported by the pipeline, naming the stage and frame
            self._fail(self.stage.name, getattr(frame, "index", None), exc)
