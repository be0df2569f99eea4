"""The pinned batch ring: preprocessing writes each sample into its row, the inference stage sends the rows as they
are (no host copy), and a buffer is refilled only after every batch reading it was collected."""

from __future__ import annotations

import random
import threading
import time

import numpy as np
import pytest

from tests.fakes.fake_cuda import FakeCudart
from tests.pipeline.media import frame_picture
from trtkit.errors import InputError, PipelineError
from trtkit.pipeline import ArraySource, BatchPlan, CallbackSink, InferStep, Pipeline, Stage, run_engine
from trtkit.pipeline.batching import BatchRing
from trtkit.runtime.cuda import Cuda


class LateEngine:
    """``infer_async`` that reads its input only when the call is collected, after a pause (as a GPU copy reads
    pinned memory later): a row refilled before its batch was collected gives that frame a wrong output."""

    def __init__(self, ring: BatchRing, pause_s: float = 0.002):
        self.ring, self.pause_s, self.feeds = ring, pause_s, []
        self.lock = threading.Lock()

    def infer_async(self, feed):
        (x,) = feed.values()
        with self.lock:
            self.feeds.append(x)
        return _Late(x, self.pause_s)


class _Late:
    def __init__(self, x, pause_s):
        self.x, self.pause_s = x, pause_s

    def wait(self):
        time.sleep(self.pause_s)
        return {"y": self.x * 2}


def ring_stages(ring, engine, plan, jitter_s: float = 0.0):
    def preprocess(frame):
        row = ring.acquire(frame.index)
        if jitter_s:
            time.sleep(random.uniform(0, jitter_s))
        row[...] = frame.index
        frame.sample = row

    return [Stage("preprocess", preprocess, workers=3), InferStep(engine, plan, ring)]


def make_ring(batch=4, count=2, shape=(2,)):
    return BatchRing(Cuda(FakeCudart()), batch, shape, np.float32, count)


def in_ring(ring, array) -> bool:
    return any(np.shares_memory(array, buffer) for buffer in ring._arrays)


def test_rows_are_sent_in_place_and_refilled_only_after_their_batch_was_collected():
    ring = make_ring(batch=4, count=2)
    engine, seen = LateEngine(ring), []
    plan = BatchPlan("x", 4, in_flight=2, max_wait_s=0.5)
    report = Pipeline(ArraySource(frame_picture(i) for i in range(203)), ring_stages(ring, engine, plan, 0.001),
                      [CallbackSink(seen.append)]).run()
    assert report.frames_out == 203 and [f.index for f in seen] == list(range(203))
    for frame in seen:  # each output computed when its call was collected, from that frame's own row
        assert np.array_equal(frame.outputs["y"], np.full(2, 2.0 * frame.index, np.float32)), frame.index
        assert frame.sample is None  # the row went back to the ring
    assert len(engine.feeds) == 51 and all(in_ring(ring, x) for x in engine.feeds)
    ring.close()


def test_short_batches_end_where_a_block_ends_and_still_go_in_place():
    ring = make_ring(batch=4, count=3)
    engine, seen = LateEngine(ring, pause_s=0.0), []

    def slow():
        for i in range(10):
            time.sleep(0.004 if i % 3 == 0 else 0)
            yield frame_picture(i)

    plan = BatchPlan("x", 4, in_flight=2, max_wait_s=0.001)
    Pipeline(ArraySource(slow()), ring_stages(ring, engine, plan), [CallbackSink(seen.append)]).run()
    assert [float(f.outputs["y"][0]) for f in seen] == [2.0 * i for i in range(10)]
    assert all(in_ring(ring, x) for x in engine.feeds) and sum(len(x) for x in engine.feeds) == 10
    # no batch crosses a block boundary (frames 0-3, 4-7, 8-9)
    assert all(int(x[0][0]) // 4 == int(x[-1][0]) // 4 for x in engine.feeds)
    ring.close()


def test_a_failing_call_stops_preprocess_workers_waiting_for_a_buffer():
    ring = make_ring(batch=2, count=2)

    class Failing(LateEngine):
        def infer_async(self, feed):
            if len(self.feeds) == 1:
                raise RuntimeError("the engine refused this batch")
            return super().infer_async(feed)

    plan = BatchPlan("x", 2, in_flight=2, max_wait_s=0.5)
    t0 = time.perf_counter()
    with pytest.raises(PipelineError, match="infer"):
        Pipeline(ArraySource(frame_picture(i) for i in range(100)), ring_stages(ring, Failing(ring), plan)).run()
    assert time.perf_counter() - t0 < 10
    ring.close()


def test_a_ring_needs_two_buffers():
    with pytest.raises(InputError, match="2 or more buffers"):
        make_ring(count=1)


def test_run_engine_preprocesses_into_the_ring_and_sends_its_rows(engine_file, backends, monkeypatch):
    from trtkit.runtime.runner import TrtRunner

    sent, rings = [], []
    original_async = TrtRunner.infer_async
    original_init = BatchRing.__init__

    def recording_async(self, feed, **kwargs):
        sent.append((len(feed["x"]), in_ring(rings[0], feed["x"])))
        return original_async(self, feed, **kwargs)

    def recording_init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        rings.append(self)

    monkeypatch.setattr(TrtRunner, "infer_async", recording_async)
    monkeypatch.setattr(BatchRing, "__init__", recording_init)
    frames, seen = [frame_picture(i, 40, 30) for i in range(11)], []
    run_engine(engine_file, ArraySource(frames), sinks=[CallbackSink(seen.append)], batch=4, runners=2,
               preprocess="cpu", **backends)  # the host ring (auto letterboxes on the GPU where it can)
    (ring,) = rings
    assert (ring.batch, ring.count, ring.sample_shape) == (4, 3, (3, 8, 8))
    assert sent == [(4, True), (4, True), (3, True)] and [f.index for f in seen] == list(range(11))
    assert ring._buffers == []  # freed after the run
    with TrtRunner(engine_file, **backends) as runner:
        from trtkit.pipeline import ImagePreprocess
        from trtkit.pipeline.preprocess import image_input

        pre = ImagePreprocess(image_input(runner.input_specs))
        for frame in seen:
            np.testing.assert_allclose(frame.outputs["y"], runner.infer({"x": pre(frame.image)[0][None]})["y"][0],
                                       rtol=1e-6)
