"""The pipeline: a source thread, the stages' threads and a sink thread, joined by bounded queues.

    report = Pipeline(source, [Stage("preprocess", pre, workers=2), InferStep(pool, plan),
                               Stage("postprocess", post)], sinks=[VideoSink("out.mp4")]).run()

``run`` blocks until the last frame has reached the sinks. Ctrl-C (``KeyboardInterrupt`` in the thread that called
``run``) stops reading the source; the frames already read still go through every stage and the sinks close their
files properly (a second Ctrl-C aborts). A stage that raises stops every thread, the sinks discard their partial
output, and ``run`` raises :class:`~trtkit.errors.PipelineError` naming the stage and the frame.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trtkit.errors import PipelineError, TrtkitError
from trtkit.pipeline.batching import BatchPlan, BatchRing, InferStage
from trtkit.pipeline.stages import END, MAX_GROUP, Aborted, Channel, Frame, StageRunner
from trtkit.pipeline.stats import Clock, PipelineReport, StageTimer
from trtkit.pipeline.threads import CpuMeter, native_name, os_thread

MONITOR_INTERVAL_S = 0.25
logger = logging.getLogger("trtkit")


@dataclass
class InferStep:
    """The batched inference stage in a pipeline's list of stages.

    Args:
        infer: anything with ``infer_async(feed)`` returning a handle with ``wait()`` (a runner or a pool).
        plan: how frames are batched (:class:`~trtkit.pipeline.batching.BatchPlan`).
        ring: the pinned batch buffers an earlier stage writes the samples into
            (:class:`~trtkit.pipeline.batching.BatchRing`; None: samples are copied into each batch).
    """

    infer: object
    plan: BatchPlan
    ring: BatchRing | None = None


class Pipeline:
    """``source → stages → sinks`` on threads joined by bounded queues.

    Args:
        source: an iterable of ``(name, image)`` (see :mod:`trtkit.pipeline.sources`).
        stages: :class:`Stage` s and at most one :class:`InferStep`, in order.
        sinks: where frames go, in order (see :mod:`trtkit.pipeline.sinks`).
        queue_size: capacity of each queue between two stages, in frames.
        monitor: called with a :class:`PipelineReport` snapshot about every 0.25 s while running (a live view).

    Every thread is named for the operating system after its stage (``tk<i>-<stage>``, in ``top -H``), and so
    are the threads its libraries start; the report's ``cpu`` adds up the CPU time of each stage's threads.
    """

    def __init__(
        self,
        source,
        stages: Sequence,
        sinks: Sequence = (),
        *,
        queue_size: int = 8,
        monitor=None,
        drain: threading.Event | None = None,
    ):
        self.source = source
        self.stages = list(stages)
        self.sinks = list(sinks)
        self.queue_size = max(1, int(queue_size))
        self.monitor = monitor
        self.drain = drain or threading.Event()
        self.abort = threading.Event()
        self._error: tuple | None = None
        self._error_lock = threading.Lock()
        self._clock = Clock()
        self.frames_in = self.frames_out = 0
        self._first_out: tuple | None = None  # (seconds from the start, frames) once the first group is written
        self._cpu: CpuMeter | None = None  # made with the threads, when the run starts
        self._build()

    def _build(self) -> None:
        self.source_timer = getattr(self.source, "timer", None) or StageTimer(getattr(self.source, "name", "read"))
        self.latency = StageTimer("latency")  # from a frame's arrival to the sinks
        sink_name = self.sinks[0].name if self.sinks else "sink"
        self.sink_timer = StageTimer(sink_name)
        names = [self.source_timer.name] + [_name_of(s) for s in self.stages] + [sink_name]
        self.channels = [Channel(f"{a} -> {b}", self.queue_size, self.abort) for a, b in zip(names, names[1:])]
        self.runners: list = []
        rings = [s.ring for s in self.stages if isinstance(s, InferStep) and s.ring is not None]
        # a stage writing into a batch ring waits for a block's buffer until earlier blocks were collected: its
        # groups hold frames of one block only (a frame it held back could be one that collection waits for)
        self._group = min([MAX_GROUP] + [ring.batch for ring in rings])
        key = (lambda frame, batch=rings[0].batch: frame.index // batch) if rings else None
        for i, stage in enumerate(self.stages):
            inp, out = self.channels[i], self.channels[i + 1]
            if isinstance(stage, InferStep):
                self.runners.append(InferStage(stage.infer, stage.plan, inp, out, self._fail, stage.ring))
            else:
                self.runners.append(StageRunner(stage, inp, out, self._fail, self._group, key))

    # --- running ---------------------------------------------------------------------------------------------------

    def run(self) -> PipelineReport:
        """Run to the end of the source (or a drain); return the report.

        Raises:
            PipelineError: a stage failed (names it and the frame index; sinks discarded their output).
        """
        threads = self._threads()
        interrupted = False
        self._clock.start()
        try:
            for thread in threads:
                thread.start()
            interrupted = self._wait(threads)
        finally:
            self._clock.stop()
            if self._cpu is not None:
                self._cpu.sample()
            self._finish()
        report = self.report()
        report.interrupted = interrupted or self.drain.is_set()
        if self._error is not None:
            stage, index, exc = self._error
            raise PipelineError(_error_message(stage, index, exc), stage=stage, frame=index) from exc
        return report

    def _threads(self) -> list:
        """The source's, the stages' and the sinks' threads, each named for the OS after its stage (see
        :mod:`trtkit.pipeline.threads`); the CPU meter knows them."""
        parts = [(self._read, "trtkit-source", self.source_timer.name)]
        for runner in self.runners:
            parts += [(t.run, t.name, runner.timer.name) for t in runner.threads()]
        os_names: dict = {}  # stage -> the name its threads carry for the OS
        for _, _, stage in parts + [(None, None, self.sink_timer.name)]:
            os_names.setdefault(stage, native_name(len(os_names), stage))
        by_name = {os_name: stage for stage, os_name in os_names.items()}
        self._cpu = meter = CpuMeter(by_name, decoder_stage=self.source_timer.name)
        threads = [
            threading.Thread(target=os_thread(work, os_names[stage], meter), name=name, daemon=True)
            for work, name, stage in parts
        ]
        sink = os_thread(self._write, os_names[self.sink_timer.name], meter=meter)
        threads.append(threading.Thread(target=sink, name="trtkit-sink", daemon=True))
        return threads

    def _wait(self, threads: list) -> bool:
        interrupted = False
        next_report = time.perf_counter() + MONITOR_INTERVAL_S
        for thread in threads:
            while thread.is_alive():
                try:
                    thread.join(0.05)
                    if time.perf_counter() >= next_report:
                        if self._cpu is not None:
                            self._cpu.sample()
                        if self.monitor is not None:
                            self._call_monitor()
                        next_report = time.perf_counter() + MONITOR_INTERVAL_S
                except KeyboardInterrupt:
                    if interrupted:  # a second Ctrl-C: stop at once
                        self.abort.set()
                        self._fail("pipeline", None, KeyboardInterrupt("interrupted twice"))
                    interrupted = True
                    self.drain.set()
        return interrupted

    def _call_monitor(self) -> None:
        try:
            self.monitor(self.report())
        except Exception as exc:  # noqa: BLE001 - a failing live view stops the run like a failing stage
            self._fail("monitor", None, exc)

    def _finish(self) -> None:
        try:
            self.source.close()
        except Exception:  # noqa: BLE001 - the run's own outcome is what to report
            logger.debug("closing the source failed", exc_info=True)
        if self._error is not None:
            for sink in self.sinks:
                sink.discard()

    def _fail(self, stage: str, index, exc: BaseException) -> None:
        with self._error_lock:
            if self._error is None:
                self._error = (stage, index, exc)
        self.abort.set()

    def _read(self) -> None:
        """Read frames, each put in the first queue as soon as it is read (a frame held back to make a group would
        wait for the source's next one, however long that takes); the next stage takes them in groups."""
        out, index = self.channels[0], 0
        frames = iter(self.source)
        try:
            while not self.drain.is_set():
                t0 = time.perf_counter()
                item: Any = next(frames, END)
                if item is END:
                    break
                if item is None:  # a live source with no frame yet
                    continue
                name, image, *stamp = item  # a live source adds (pts, arrival)
                t1 = time.perf_counter()
                if not stamp:
                    self.source_timer.add(t1 - t0)
                pts, arrived = stamp or (None, t1)
                out.put(Frame(index, image, name, pts=pts, arrived=arrived))
                index += 1
                self.frames_in = index
            out.put(END)
        except Aborted:
            return
        except BaseException as exc:  # noqa: BLE001 - reported naming the stage and frame
            self._fail(self.source_timer.name, index, exc)

    def _write(self) -> None:
        """Write frames as they come, the frames waiting taken together (the sink's timer shares a group's time
        among its frames)."""
        inp, frame = self.channels[-1], None
        try:
            while True:
                item = inp.get_many(MAX_GROUP)
                if item is END:
                    break
                t0 = time.perf_counter()
                for frame in item:
                    for sink in self.sinks:
                        sink.write(frame)
                count, t1 = len(item), time.perf_counter()
                self.sink_timer.add(t1 - t0, count)
                for frame in item:
                    self.latency.add(t1 - frame.arrived)
                self.frames_out += count
                if self._first_out is None:
                    self._first_out = (self._clock.elapsed, count)
            frame = None
            if self._cpu is not None:  # an encoder's threads end as it closes: their CPU time is read before
                self._cpu.sample()
            for sink in self.sinks:
                sink.close()
        except Aborted:
            return
        except BaseException as exc:  # noqa: BLE001 - reported naming the stage and frame
            self._fail(self.sink_timer.name, getattr(frame, "index", None), exc)

    # --- figures ---------------------------------------------------------------------------------------------------

    def report(self) -> PipelineReport:
        """The figures so far (callable while running)."""
        elapsed = self._clock.elapsed
        running = self._clock.t1 is None  # the current depths only mean something while frames flow
        timers = [self.source_timer] + [r.timer for r in self.runners] + [self.sink_timer]
        infer = next((r for r in self.runners if isinstance(r, InferStage)), None)
        info = self.source.info() if hasattr(self.source, "info") else {}
        return PipelineReport(
            frames_in=self.frames_in,
            frames_out=self.frames_out,
            elapsed_s=elapsed,
            stages={t.name: t.snapshot(elapsed) for t in timers},
            queues={c.name: {**c.gauge.to_json(), **({"depth": c.depth()} if running else {})} for c in self.channels},
            skipped=list(getattr(self.source, "skipped", [])),
            error=_error_message(*self._error) if self._error else None,
            source=info,
            batch=infer.plan.max_batch if infer else None,
            gpu=infer.gpu.to_json(elapsed) if infer and infer.gpu else None,
            first_out_s=self._first_out[0] if self._first_out else None,
            first_out_frames=self._first_out[1] if self._first_out else 0,
            cpu=self._cpu.by_stage(elapsed) if self._cpu is not None else None,
            latency=self.latency.percentiles_ms(),
            dropped=getattr(self.source, "dropped", 0),
            reconnects=getattr(self.source, "reconnects", 0),
        )


def _name_of(stage) -> str:
    return InferStage.name if isinstance(stage, InferStep) else stage.name


def _error_message(stage: str, index, exc: BaseException) -> str:
    where = f"frame {index}" if index is not None else "no frame"
    what = str(exc) if isinstance(exc, TrtkitError) else f"{type(exc).__name__}: {exc}"
    return f"Pipeline stage '{stage}' failed on {where}: {what}"
