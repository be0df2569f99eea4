"""The pipeline's threads, queues and batching without an engine: order, counts, back-pressure, batching up to the
batch with a max wait, errors naming the stage and frame, draining."""

from __future__ import annotations

import random
import threading
import time

import numpy as np
import pytest

from trtkit.errors import InputError, PipelineError
from trtkit.pipeline import ArraySource, BatchPlan, CallbackSink, InferStep, Pipeline, Stage


class DoublingEngine:
    """``infer_async`` of a fake engine whose output is twice its input; records the batch sizes it was given."""

    def __init__(self, fail_on_call: int | None = None):
        self.batches = []
        self.fail_on_call = fail_on_call

    def infer_async(self, feed):
        (x,) = feed.values()
        self.batches.append(len(x))
        if self.fail_on_call is not None and len(self.batches) == self.fail_on_call:
            raise RuntimeError("the engine refused this batch")
        return _Done({"y": x * 2})


class _Done:
    def __init__(self, outputs):
        self.outputs = outputs

    def wait(self):
        return self.outputs


class RecordingSink(CallbackSink):
    def __init__(self):
        self.frames = []
        self.closed = self.discarded = False
        super().__init__(self.frames.append)

    def close(self):
        self.closed = True

    def discard(self):
        self.discarded = True


def to_sample(frame):
    frame.sample = np.float32(frame.image.mean()) * np.ones(2, np.float32)


def endless_zeros():
    while True:
        yield np.zeros((2, 2, 3), np.uint8)


def pictures(n):
    return [np.full((4, 4, 3), i % 256, np.uint8) for i in range(n)]


def test_frames_leave_in_order_through_stages_with_several_workers():
    def jitter(frame):
        time.sleep(random.uniform(0, 0.002))
        frame.result = frame.index

    engine, sink = DoublingEngine(), RecordingSink()
    stages = [Stage("preprocess", to_sample, workers=3), InferStep(engine, BatchPlan("x", 4, max_wait_s=0.001)),
              Stage("postprocess", jitter, workers=4)]
    report = Pipeline(ArraySource(pictures(200)), stages, [sink], queue_size=3).run()
    assert [f.index for f in sink.frames] == list(range(200))
    assert report.frames_in == report.frames_out == 200 and sink.closed and not sink.discarded
    assert all(f.outputs["y"][0] == 2 * (f.index % 256) for f in sink.frames)
    assert sum(engine.batches) == 200 and max(engine.batches) <= 4
    assert set(report.stages) == {"read", "preprocess", "infer", "postprocess", "sink"}
    assert report.stages["postprocess"].workers == 4 and report.stages["infer"].frames == 200


def test_a_slow_sink_holds_back_the_source():
    made, alive_most = [0], [0]
    consumed = [0]

    def endless():
        for _ in range(300):
            made[0] += 1
            alive_most[0] = max(alive_most[0], made[0] - consumed[0])
            yield np.zeros((2, 2, 3), np.uint8)

    def slow(frame):
        time.sleep(0.001)
        consumed[0] += 1

    stages = [Stage("preprocess", to_sample), InferStep(DoublingEngine(), BatchPlan("x", 4, in_flight=2))]
    report = Pipeline(ArraySource(endless()), stages, [CallbackSink(slow)], queue_size=2).run()
    assert report.frames_out == 300
    # frames alive at once: 3 queues of 2, one in each of the 3 stage threads, 2 batches of 4 in flight, the
    # sink's, and one the source is making; nowhere near the 300 an unbounded queue would hold
    assert alive_most[0] <= 3 * 2 + 3 + 2 * 4 + 2
    assert all(q["max_depth"] <= q["capacity"] for q in report.queues.values())


def test_batches_fill_up_to_the_batch_when_frames_come_fast():
    engine = DoublingEngine()
    Pipeline(ArraySource(pictures(42)), [Stage("preprocess", to_sample),
                                         InferStep(engine, BatchPlan("x", 8, max_wait_s=0.5))]).run()
    assert engine.batches == [8, 8, 8, 8, 8, 2]


def test_a_batch_waits_at_most_max_wait_for_slow_frames():
    def slow_frames():
        for picture in pictures(5):
            time.sleep(0.03)
            yield picture

    engine = DoublingEngine()
    Pipeline(ArraySource(slow_frames()), [Stage("preprocess", to_sample),
                                          InferStep(engine, BatchPlan("x", 8, max_wait_s=0.001))]).run()
    assert engine.batches == [1, 1, 1, 1, 1]


def test_a_short_batch_is_padded_to_the_engines_fixed_batch_and_the_padding_dropped():
    engine, sink = DoublingEngine(), RecordingSink()
    Pipeline(ArraySource(pictures(6)), [Stage("preprocess", to_sample),
                                        InferStep(engine, BatchPlan("x", 4, min_batch=4, max_wait_s=0.5))],
             [sink]).run()
    assert engine.batches == [4, 4]
    assert [f.index for f in sink.frames] == list(range(6))


def test_a_failing_stage_is_named_with_its_frame_and_the_sinks_discard():
    def boom(frame):
        if frame.index == 7:
            raise ValueError("bad pixel")

    sink = RecordingSink()
    with pytest.raises(PipelineError, match=r"stage 'check' failed on frame 7: ValueError: bad pixel") as info:
        Pipeline(ArraySource(pictures(50)), [Stage("check", boom, workers=2)], [sink], queue_size=2).run()
    assert info.value.stage == "check" and info.value.frame == 7
    assert sink.discarded and not sink.closed


def test_an_engine_error_names_the_infer_stage_and_the_batchs_first_frame():
    stages = [Stage("preprocess", to_sample), InferStep(DoublingEngine(fail_on_call=2), BatchPlan("x", 4, 4, 0.5))]
    with pytest.raises(PipelineError, match=r"stage 'infer' failed on frame 4: RuntimeError: the engine refused"):
        Pipeline(ArraySource(pictures(20)), stages, [RecordingSink()]).run()


def test_a_failing_source_is_named_with_the_frame_it_was_reading():
    def broken():
        yield from pictures(3)
        raise OSError("disk gone")

    with pytest.raises(PipelineError, match=r"stage 'read' failed on frame 3: OSError: disk gone"):
        Pipeline(ArraySource(broken()), [Stage("preprocess", to_sample)], [RecordingSink()]).run()


def test_draining_stops_the_source_and_finishes_every_frame_already_read():
    sink = RecordingSink()
    pipeline = None

    def drain_after_ten(frame):
        if frame.index == 10:
            pipeline.drain.set()
        time.sleep(0.001)

    pipeline = Pipeline(ArraySource(endless_zeros()), [Stage("preprocess", to_sample),
                                                 InferStep(DoublingEngine(), BatchPlan("x", 4)),
                                                 Stage("slow", drain_after_ten)], [sink], queue_size=4)
    report = pipeline.run()
    assert 10 < report.frames_out == report.frames_in == len(sink.frames)
    assert sink.closed and not sink.discarded
    assert [f.index for f in sink.frames] == list(range(report.frames_out))


def test_ctrl_c_in_the_calling_thread_drains(monkeypatch):
    sink = RecordingSink()
    pipeline = Pipeline(ArraySource(endless_zeros()),
                        [Stage("preprocess", lambda f: time.sleep(0.0005))], [sink])
    real_join = threading.Thread.join
    calls = [0]

    def join_then_interrupt(self, timeout=None):
        calls[0] += 1
        if calls[0] == 5:
            raise KeyboardInterrupt
        return real_join(self, timeout)

    monkeypatch.setattr(threading.Thread, "join", join_then_interrupt)
    report = pipeline.run()
    assert report.interrupted and report.frames_out == report.frames_in > 0 and sink.closed


def test_the_monitor_sees_figures_while_running():
    seen = []

    def slow(frame):
        time.sleep(0.002)

    Pipeline(ArraySource(pictures(200)), [Stage("work", slow)], [CallbackSink(lambda f: None)],
             monitor=seen.append).run()
    assert seen and 0 < seen[-1].frames_out <= 200 and "work" in seen[-1].stages


def test_report_figures_are_per_frame_and_name_the_slowest_stage():
    def slow(frame):
        time.sleep(0.003)

    report = Pipeline(ArraySource(pictures(30)), [Stage("fast", lambda f: None), Stage("slow", slow)]).run()
    slow_stats = report.stages["slow"]
    assert slow_stats.frames == 30 and slow_stats.min_ms >= 3.0 and slow_stats.max_ms >= slow_stats.p99_ms
    assert slow_stats.min_ms <= slow_stats.avg_ms <= slow_stats.max_ms
    # busy % against the run's wall time, which on a loaded machine includes seconds of thread start-up: compared
    # with the idle stage's, not with a fixed share
    assert report.slowest_stage().name == "slow" and slow_stats.busy_pct > 10 * report.stages["fast"].busy_pct >= 0
    data = report.to_json()
    assert data["slowest_stage"] == "slow" and data["frames_in"] == data["frames_out"] == 30
    assert set(data["stages"]["slow"]) >= {"avg_ms", "min_ms", "max_ms", "p99_ms", "busy_pct"}


def test_the_fill_before_the_first_frame_out_is_told_apart_from_the_steady_rate():
    def late_start():  # a source that takes 0.3 s to open, then reads quickly
        time.sleep(0.3)
        yield from pictures(40)

    def paced(frame):
        time.sleep(0.002)

    report = Pipeline(ArraySource(late_start()), [Stage("paced", paced)]).run()
    assert report.first_out_s >= 0.3 and 1 <= report.first_out_frames < 40
    steady = (40 - report.first_out_frames) / (report.elapsed_s - report.first_out_s)
    assert report.steady_fps == pytest.approx(steady) and report.steady_fps > 1.5 * report.fps
    data = report.to_json()
    assert data["first_out_s"] >= 0.3 and data["steady_fps"] == round(report.steady_fps, 3)
    nothing = Pipeline(ArraySource([]), [Stage("paced", paced)]).run()
    assert nothing.first_out_s is None and nothing.steady_fps is None and nothing.to_json()["steady_fps"] is None


def test_batch_plan_refuses_impossible_sizes():
    with pytest.raises(InputError, match="min_batch <= max_batch"):
        BatchPlan("x", max_batch=2, min_batch=4)
    with pytest.raises(InputError, match="max_wait_s"):
        BatchPlan("x", max_batch=2, max_wait_s=-1)


class PinnedRunner:
    """A runner with ``host_inputs``: records whether each call was given its own buffer, and calls in flight."""

    def __init__(self, log):
        self.log, self.buffers, self.in_flight = log, {}, 0

    def host_inputs(self, shapes):
        ((name, shape),) = shapes.items()
        self.buffers.setdefault(shape, np.full(shape, -1, np.float32))
        assert self.in_flight == 0, "buffer handed out while its previous call is in flight"
        return {name: self.buffers[shape]}

    def infer_async(self, feed):
        (x,) = feed.values()
        self.log.append((self, any(x is b for b in self.buffers.values())))
        self.in_flight += 1
        runner, outputs = self, {"y": x * 2}

        class Handle:
            def wait(self):
                runner.in_flight -= 1
                return outputs

        return Handle()


def test_batches_are_assembled_in_the_pinned_buffers_of_runners_taking_turns():
    log = []
    pool = type("Pool", (), {})()
    pool.runners = [PinnedRunner(log), PinnedRunner(log)]
    sink = RecordingSink()
    Pipeline(ArraySource(pictures(40)), [Stage("preprocess", to_sample),
                                         InferStep(pool, BatchPlan("x", 4, max_wait_s=0.5, in_flight=3))],
             [sink]).run()
    assert all(own for _, own in log) and [r for r, _ in log[:4]] == pool.runners * 2
    assert [f.outputs["y"][0] for f in sink.frames] == [2 * (i % 256) for i in range(40)]


def test_a_batch_filled_by_several_threads_holds_every_sample_in_its_row():
    from concurrent.futures import ThreadPoolExecutor

    from trtkit.pipeline.batching import fill_batch
    from trtkit.pipeline.stages import Frame

    frames = [Frame(i, None, sample=np.full((3, 2), i, np.float32)) for i in range(11)]
    batch = np.full((13, 3, 2), -1, np.float32)
    with ThreadPoolExecutor(3) as pool:
        fill_batch(batch, frames, pool, threads=3)
    assert [int(row[0, 0]) for row in batch] == list(range(11)) + [0, 0]
    with pytest.raises(InputError, match="fill_threads must be at least 1"):
        BatchPlan("x", 4, fill_threads=0)


class ClockedCuda:
    """Events whose times (ms after the origin event) are given in advance, in recording order."""

    def __init__(self, times):
        self.times, self.recorded, self.created, self.destroyed = list(times), {}, 0, 0

    def event_create(self):
        self.created += 1
        return self.created

    def event_record(self, event, stream):
        self.recorded[event] = self.times.pop(0)

    def event_elapsed_ms(self, a, b):
        return self.recorded[b] - self.recorded[a]

    def event_destroy(self, event):
        self.destroyed += 1


def test_gpu_timeline_merges_overlapping_batches_and_finds_the_idle_time():
    from trtkit.pipeline.stats import GpuTimeline

    # batch 1 on stream 1: 0..4 ms; batch 2 on stream 2 overlaps it: 3..6; batch 3 after a 4 ms gap: 10..12
    cuda = ClockedCuda([0, 0, 4, 3, 6, 10, 12])
    timeline = GpuTimeline(cuda)
    pairs = [timeline.end(1, timeline.begin(1))]
    pairs.append(timeline.end(2, timeline.begin(2)))
    for pair in pairs:
        timeline.collect(pair)
    timeline.collect(timeline.end(1, timeline.begin(1)))
    data = timeline.to_json(elapsed_s=0.024)
    assert data == {"batches": 3, "busy_pct": 33.33, "idle_between_batches_pct": 33.33, "avg_ms_per_batch": 3.0}
    timeline.close()
    assert cuda.destroyed == cuda.created  # events are reused, then all destroyed


def test_a_failing_monitor_stops_the_run_like_a_stage():
    def broken_view(report):
        raise RuntimeError("terminal gone")

    def slow(frame):
        time.sleep(0.002)

    sink = RecordingSink()
    with pytest.raises(PipelineError, match=r"stage 'monitor' failed on no frame: RuntimeError: terminal gone"):
        Pipeline(ArraySource(pictures(500)), [Stage("work", slow)], [sink], monitor=broken_view).run()
    assert sink.discarded


class SlowFirstCall(DoublingEngine):
    def infer_async(self, feed):
        if not self.batches:
            time.sleep(0.2)  # the queue before the stage fills meanwhile
        return super().infer_async(feed)


def test_with_no_wait_a_batch_still_takes_the_frames_already_queued():
    engine = SlowFirstCall()
    Pipeline(ArraySource(pictures(13)), [Stage("preprocess", to_sample),
                                         InferStep(engine, BatchPlan("x", 4, max_wait_s=0.0, in_flight=1))],
             queue_size=8).run()
    assert engine.batches[1] == 4 and sum(engine.batches) == 13


def test_device_samples_need_runners_and_matching_shapes():
    class OnDevice:
        __cuda_array_interface__ = {"shape": (2,), "typestr": "<f4", "data": (0, False), "version": 3}

    def to_device(frame):
        frame.sample = OnDevice()

    with pytest.raises(PipelineError, match="Device-resident samples are batched on the GPU by runners"):
        Pipeline(ArraySource(pictures(3)), [Stage("pre", to_device), InferStep(DoublingEngine(), BatchPlan("x", 4))],
                 [RecordingSink()]).run()
