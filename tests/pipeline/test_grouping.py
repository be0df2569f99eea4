"""Frames handed between the pipeline's threads in groups: the channel's group operations (order, capacity in
frames, a key that ends a group, END after the last frame), stage workers running a group (order, the failing
frame named inside a group), the inference stage gathering groups across ring blocks, and the max wait still
honoured when the source pauses with frames read."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from tests.fakes.fake_cuda import FakeCudart
from tests.pipeline.test_pipeline_core import DoublingEngine, RecordingSink, pictures, to_sample
from trtkit.errors import PipelineError
from trtkit.pipeline import ArraySource, BatchPlan, BatchRing, InferStep, Pipeline, Stage
from trtkit.pipeline.batching import InferStage
from trtkit.pipeline.stages import END, Aborted, Channel, Frame, StageRunner
from trtkit.runtime.cuda import Cuda


def frames(indices) -> list:
    return [Frame(i, None) for i in indices]


def test_a_channel_hands_on_every_waiting_frame_at_once_in_order_then_end():
    channel = Channel("a -> b", 8, threading.Event())
    channel.put_many(frames(range(3)))
    channel.put(Frame(3, None))
    channel.put_many(frames(range(4, 6)))
    channel.put(END)
    assert [f.index for f in channel.get_many(4)] == [0, 1, 2, 3]
    assert [f.index for f in channel.get_many(10)] == [4, 5]
    assert channel.get_many(10) is END and channel.get(0) is END  # stays closed for every later reader


def test_a_group_larger_than_the_room_left_goes_in_part_by_part_never_over_capacity():
    abort = threading.Event()
    channel, taken = Channel("a -> b", 3, abort), []

    def consume():
        while (got := channel.get_many(100)) is not END:
            assert len(got) <= 3
            taken.extend(f.index for f in got)
            time.sleep(0.002)

    reader = threading.Thread(target=consume)
    reader.start()
    channel.put_many(frames(range(20)))
    channel.put(END)
    reader.join(5)
    assert taken == list(range(20))
    assert channel.gauge.to_json()["max_depth"] <= 3


def test_a_key_ends_a_group_and_a_timeout_gives_none():
    channel = Channel("a -> b", 16, threading.Event())
    channel.put_many(frames(range(2, 10)))
    by_block = lambda frame: frame.index // 4  # noqa: E731
    assert [[f.index for f in channel.get_many(16, key=by_block)] for _ in range(3)] == [[2, 3], [4, 5, 6, 7], [8, 9]]
    assert channel.get_many(16, timeout=0.01) is None


def test_a_blocked_group_put_gives_up_when_the_pipeline_aborts():
    abort = threading.Event()
    channel, raised = Channel("a -> b", 2, abort), []

    def put():
        try:
            channel.put_many(frames(range(5)))
        except Aborted:
            raised.append(True)

    writer = threading.Thread(target=put)
    writer.start()
    time.sleep(0.05)
    abort.set()
    writer.join(2)
    assert raised == [True] and channel.depth() == 2


def test_a_stage_worker_runs_a_whole_group_and_hands_it_on_in_one_put():
    abort = threading.Event()
    inp, out = Channel("in", 16, abort), Channel("out", 16, abort)
    puts = []
    put_many = out.put_many
    out.put_many = lambda group: (puts.append([f.index for f in group]), put_many(group))  # type: ignore[method-assign]
    inp.put_many(frames(range(10)))
    inp.put(END)
    runner = StageRunner(Stage("double", lambda frame: setattr(frame, "result", 2 * frame.index)), inp, out,
                         lambda *a: pytest.fail(f"failed: {a}"), group=6)
    for thread in runner.threads():
        thread.start()
        thread.join(5)
    assert puts == [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9]]
    assert [f.result for f in out.get_many(16)] == [2 * i for i in range(10)] and out.get(0) is END
    stats = runner.timer.snapshot(1.0)
    assert stats.frames == 10 and stats.min_ms <= stats.avg_ms <= stats.max_ms  # per frame, shared within a group


def test_a_failing_frame_inside_a_group_is_named_by_its_index():
    abort, failures = threading.Event(), []
    inp, out = Channel("in", 16, abort), Channel("out", 16, abort)
    inp.put_many(frames(range(8)))

    def fn(frame):
        if frame.index == 5:
            raise ValueError("bad frame")

    runner = StageRunner(Stage("post", fn), inp, out, lambda *a: failures.append(a[:2]), group=8)
    for thread in runner.threads():
        thread.start()
        thread.join(5)
    assert failures == [("post", 5)] and out.depth() == 0  # the group did not go on


def test_a_failing_frame_in_the_middle_of_a_batch_is_named_through_the_pipeline():
    def post(frame):
        if frame.index == 13:
            raise ValueError("no result for this one")

    stages = [Stage("preprocess", to_sample), InferStep(DoublingEngine(), BatchPlan("x", 4, max_wait_s=0.5)),
              Stage("postprocess", post, workers=2)]
    with pytest.raises(PipelineError, match="'postprocess' failed on frame 13: ValueError") as caught:
        Pipeline(ArraySource(pictures(40)), stages, [RecordingSink()]).run()
    assert caught.value.frame == 13


def test_the_inference_stage_gathers_groups_and_keeps_frames_past_a_ring_block_for_the_next_batch():
    ring = BatchRing(Cuda(FakeCudart()), 4, (2,), np.float32, 2)
    abort = threading.Event()
    inp, out = Channel("in", 16, abort), Channel("out", 16, abort)
    inp.put_many(frames(range(2, 10)))
    inp.put(END)
    stage = InferStage(DoublingEngine(), BatchPlan("x", 4, max_wait_s=0.5), inp, out, lambda *a: None, ring)
    gathered = [stage._gather() for _ in range(4)]
    assert [([f.index for f in group], ended) for group, ended in gathered] == [
        ([2, 3], False), ([4, 5, 6, 7], False), ([8, 9], True), ([], True)]
    ring.close()


def test_frames_read_before_the_source_pauses_reach_the_engine_within_the_max_wait():
    resumed, called = threading.Event(), []

    def pausing():
        yield from pictures(3)
        time.sleep(0.4)  # the source is stuck on its fourth frame
        resumed.set()
        yield from pictures(3)

    class Engine(DoublingEngine):
        def infer_async(self, feed):
            called.append(resumed.is_set())
            return super().infer_async(feed)

    engine, sink = Engine(), RecordingSink()
    stages = [Stage("preprocess", to_sample), InferStep(engine, BatchPlan("x", 8, max_wait_s=0.02))]
    Pipeline(ArraySource(pausing()), stages, [sink]).run()
    assert called[0] is False and engine.batches[0] == 3  # sent while the source was still stuck
    assert [f.index for f in sink.frames] == list(range(6)) and sum(engine.batches) == 6


def test_frame_order_and_counts_hold_with_groups_of_every_size():
    rng = np.random.default_rng(1)
    delays = rng.uniform(0, 0.0004, 600)

    def jittery(frame):
        time.sleep(delays[frame.index])
        to_sample(frame)

    engine, sink = DoublingEngine(), RecordingSink()
    stages = [Stage("preprocess", jittery, workers=3), InferStep(engine, BatchPlan("x", 8, max_wait_s=0.002)),
              Stage("postprocess", lambda frame: None, workers=2)]
    report = Pipeline(ArraySource(pictures(600)), stages, [sink], queue_size=16).run()
    assert report.frames_in == report.frames_out == 600 and sum(engine.batches) == 600
    assert [f.index for f in sink.frames] == list(range(600))
    assert all(np.array_equal(f.outputs["y"], 2 * np.full(2, f.index % 256, np.float32)) for f in sink.frames)
    assert all(q["max_depth"] <= q["capacity"] for q in report.queues.values())


def test_the_cpu_hand_off_benchmark_counts_every_frame_through():
    from benchmarks.pipeline_handoff_cpu import instant

    assert instant(500, 8) > 0  # it checks frames out == frames in itself
