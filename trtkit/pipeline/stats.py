"""Timing of a running pipeline: per-stage durations per frame, busy time, queue depths, and the final report.

Every figure is kept by the thread that produces it under one small lock, so a live view may read a snapshot at any
time (:meth:`StageTimer.snapshot`, :meth:`PipelineReport.to_json`).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

from trtkit.bench.stats import percentile

# Per-stage durations kept for the p99 (the oldest are dropped first): bounded memory on endless streams.
KEPT_TIMINGS = 100_000


@dataclass(frozen=True)
class StageStats:
    """One stage's figures: per-frame times in milliseconds, busy share of the run, frames handled."""

    name: str
    workers: int
    frames: int
    avg_ms: float | None
    min_ms: float | None
    max_ms: float | None
    p99_ms: float | None
    busy_pct: float
    fps_alone: float | None  # frames/s this stage would sustain with its workers busy all the time

    def to_json(self) -> dict:
        return {
            "workers": self.workers,
            "frames": self.frames,
            "avg_ms": _round(self.avg_ms),
            "min_ms": _round(self.min_ms),
            "max_ms": _round(self.max_ms),
            "p99_ms": _round(self.p99_ms),
            "busy_pct": round(self.busy_pct, 2),
            "fps_alone": _round(self.fps_alone),
        }


def _round(value, digits: int = 4):
    return None if value is None else round(value, digits)


class StageTimer:
    """Durations of one stage. ``add(seconds, frames)`` records one call that handled ``frames`` frames.

    A batched call of ``n`` frames counts as ``n`` frames of ``seconds / n`` each (per-frame figures stay comparable
    between batched and unbatched stages).
    """

    def __init__(self, name: str, workers: int = 1):
        self.name = name
        self.workers = workers
        self._lock = threading.Lock()
        self._per_frame: deque = deque(maxlen=KEPT_TIMINGS)
        self._frames = 0
        self._busy = 0.0
        self._min: float | None = None
        self._max: float | None = None

    def add(self, seconds: float, frames: int = 1) -> None:
        if frames <= 0:
            return
        each = seconds / frames
        with self._lock:
            self._per_frame.append(each)
            self._frames += frames
            self._busy += seconds
            self._min = each if self._min is None else min(self._min, each)
            self._max = each if self._max is None else max(self._max, each)

    @property
    def frames(self) -> int:
        return self._frames

    def percentiles_ms(self) -> dict | None:
        """``{"p50_ms", "p99_ms", "max_ms"}`` of the kept durations; None before the first."""
        with self._lock:
            kept = sorted(self._per_frame)
        return (
            {f"p{q}_ms": round(1e3 * percentile(kept, q), 3) for q in (50, 99)} | {"max_ms": round(1e3 * kept[-1], 3)}
            if kept
            else None
        )

    def snapshot(self, elapsed_s: float) -> StageStats:
        """The figures so far, ``elapsed_s`` being the run's wall time (for the busy share)."""
        with self._lock:
            kept = sorted(self._per_frame)
            frames, busy, lo, hi = self._frames, self._busy, self._min, self._max
        if not frames or lo is None or hi is None:
            return StageStats(self.name, self.workers, 0, None, None, None, None, 0.0, None)
        busy_pct = 100.0 * busy / (elapsed_s * self.workers) if elapsed_s > 0 else 0.0
        return StageStats(
            self.name,
            self.workers,
            frames,
            1e3 * busy / frames,
            1e3 * lo,
            1e3 * hi,
            1e3 * percentile(kept, 99),
            min(busy_pct, 100.0),
            frames * self.workers / busy if busy > 0 else None,
        )


class QueueGauge:
    """Depth of one bounded queue, sampled at every put."""

    def __init__(self, name: str, capacity: int):
        self.name = name
        self.capacity = capacity
        self._lock = threading.Lock()
        self._samples = 0
        self._sum = 0
        self.max_depth = 0

    def sample(self, depth: int) -> None:
        with self._lock:
            self._samples += 1
            self._sum += depth
            self.max_depth = max(self.max_depth, depth)

    def to_json(self) -> dict:
        with self._lock:
            mean = self._sum / self._samples if self._samples else 0.0
            return {"capacity": self.capacity, "max_depth": self.max_depth, "mean_depth": round(mean, 3)}


class GpuTimeline:
    """When the GPU worked on the inference stage's batches, from CUDA events recorded on each runner's stream just
    before a batch is started and just after (its copies and engine run in between).

    ``cuda`` is a :class:`~trtkit.runtime.cuda.Cuda`. Intervals are measured from the first batch's start event
    (events of different streams of one device share a clock); :meth:`to_json` merges overlapping intervals, so two
    runners busy at once count once.
    """

    def __init__(self, cuda):
        self.cuda = cuda
        self._origin = None
        self._free: list = []
        self._intervals: list = []

    def _event(self) -> int:
        return self._free.pop() if self._free else self.cuda.event_create()

    def begin(self, stream: int) -> int:
        event = self._event()
        self.cuda.event_record(event, stream)
        if self._origin is None:
            self._origin = self._event()
            self.cuda.event_record(self._origin, stream)
        return event

    def end(self, stream: int, start: int) -> tuple:
        event = self._event()
        self.cuda.event_record(event, stream)
        return start, event

    def collect(self, pair: tuple) -> None:
        """After the batch's outputs are in: its interval (the events have completed)."""
        start, end = pair
        self._intervals.append(
            (self.cuda.event_elapsed_ms(self._origin, start), self.cuda.event_elapsed_ms(self._origin, end))
        )
        self._free += [start, end]

    def close(self) -> None:
        for event in self._free + ([self._origin] if self._origin is not None else []):
            self.cuda.event_destroy(event)
        self._free, self._origin = [], None

    def to_json(self, elapsed_s: float) -> dict:
        """``busy_pct`` of the run's wall time, ``idle_between_batches_pct`` of the time from the first batch's start
        to the last one's end, and milliseconds of GPU time per batch."""
        merged: list = []
        for a, b in sorted(self._intervals):
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        busy = sum(b - a for a, b in merged)
        span = merged[-1][1] - merged[0][0] if merged else 0.0
        return {
            "batches": len(self._intervals),
            "busy_pct": round(100.0 * busy / (1e3 * elapsed_s), 2) if elapsed_s > 0 else None,
            "idle_between_batches_pct": round(100.0 * (span - busy) / span, 2) if span > 0 else None,
            "avg_ms_per_batch": round(sum(b - a for a, b in self._intervals) / len(self._intervals), 4)
            if self._intervals
            else None,
        }


@dataclass
class SkippedFrame:
    """A frame the source could not decode (skipped, counted, named in the summary)."""

    position: str  # e.g. "frame 15 (pts 7680)" or an image file name
    reason: str

    def to_json(self) -> dict:
        return {"position": self.position, "reason": self.reason}


@dataclass
class PipelineReport:
    """What a pipeline run did. ``to_json`` gives the same figures as the CLI's table."""

    frames_in: int = 0
    frames_out: int = 0
    elapsed_s: float = 0.0
    stages: dict = field(default_factory=dict)  # name -> StageStats
    queues: dict = field(default_factory=dict)  # name -> QueueGauge.to_json()
    skipped: list = field(default_factory=list)  # SkippedFrame
    interrupted: bool = False
    error: str | None = None
    source: dict = field(default_factory=dict)  # what the source says about itself (decoder, fps, size...)
    batch: int | None = None
    gpu: dict | None = None  # GpuTimeline.to_json() where the inference stage ran on runners
    first_out_s: float | None = None  # from the start to the first frames through the sinks (the pipeline's fill)
    first_out_frames: int = 0  # how many frames that first group held
    # CPU seconds and cores of each stage's threads, the threads its libraries started included
    # (trtkit.pipeline.threads.CpuMeter.by_stage); None where the OS has no per-thread counters
    cpu: dict | None = None
    latency: dict | None = None  # frame latency from arrival to the sinks: p50_ms, p99_ms, max_ms
    dropped: int = 0  # frames a live source dropped by its policy
    reconnects: int = 0  # times a live source opened its stream again

    @property
    def fps(self) -> float:
        return self.frames_out / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def steady_fps(self) -> float | None:
        """Frames/s after the first frames came out: :attr:`fps` less the pipeline's fill (the source opening, the
        first batch, the runners' first shapes); None before a second group is out."""
        if self.first_out_s is None or self.frames_out <= self.first_out_frames:
            return None
        seconds = self.elapsed_s - self.first_out_s
        return (self.frames_out - self.first_out_frames) / seconds if seconds > 0 else None

    def slowest_stage(self) -> StageStats | None:
        """The stage with the lowest throughput on its own (``fps_alone``), i.e. the one that sets the pace."""
        timed = [s for s in self.stages.values() if s.fps_alone]
        return min(timed, key=lambda s: s.fps_alone) if timed else None

    def to_json(self) -> dict:
        slowest = self.slowest_stage()
        return {
            "frames_in": self.frames_in,
            "frames_out": self.frames_out,
            "elapsed_s": round(self.elapsed_s, 4),
            "fps": round(self.fps, 3),
            "first_out_s": None if self.first_out_s is None else round(self.first_out_s, 4),
            "steady_fps": None if self.steady_fps is None else round(self.steady_fps, 3),
            "batch": self.batch,
            "stages": {n: s.to_json() for n, s in self.stages.items()},
            "queues": self.queues,
            "skipped": [s.to_json() for s in self.skipped],
            "interrupted": self.interrupted,
            "error": self.error,
            "source": self.source,
            "gpu": self.gpu,
            "cpu": self.cpu,
            "latency": self.latency,
            "dropped": self.dropped,
            "reconnects": self.reconnects,
            "slowest_stage": slowest.name if slowest else None,
        }


class Clock:
    """Wall time of a run, started by :meth:`start`."""

    def __init__(self):
        self.t0 = None
        self.t1 = None

    def start(self) -> None:
        self.t0 = time.perf_counter()

    def stop(self) -> None:
        self.t1 = time.perf_counter()

    @property
    def elapsed(self) -> float:
        if self.t0 is None:
            return 0.0
        return (self.t1 or time.perf_counter()) - self.t0
