"""Block pipelines (batches of frames as one item): counts, order and outputs, sinks with and without
``write_block``, back-pressure in blocks, the max wait before collecting, errors naming the frame, draining, the
batch ring's per-block buffers, and run_engine on the fake TensorRT with the samples sent from the ring."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from tests.fakes.fake_cuda import FakeCudart
from tests.pipeline.media import frame_picture
from tests.pipeline.test_pipeline_core import DoublingEngine, RecordingSink
from trtkit.errors import PipelineError
from trtkit.pipeline import (
    ArraySource,
    BatchPlan,
    BatchRing,
    Block,
    BlockCallbackSink,
    BlockSource,
    CallbackSink,
    ImagePreprocess,
    InferStep,
    Pipeline,
    Processing,
    Stage,
    run_engine,
)
from trtkit.pipeline.preprocess import image_input
from trtkit.runtime import TrtRunner
from trtkit.runtime.cuda import Cuda


def numbered_batches(sizes):
    """Batches of frames whose single value is the frame's index, ``sizes`` frames each."""
    start, out = 0, []
    for n in sizes:
        out.append(np.arange(start, start + n, dtype=np.float32)[:, None] * np.ones((1, 2), np.float32))
        start += n
    return out


def to_samples(block):
    block.samples = np.asarray(block.images)


def test_every_frame_leaves_in_order_with_its_outputs_one_engine_call_per_block():
    engine, blocks = DoublingEngine(), []
    stages = [Stage("preprocess", to_samples, workers=3), InferStep(engine, BatchPlan("x", 8))]
    report = Pipeline(BlockSource(numbered_batches([8, 8, 5, 8, 3])), stages, [BlockCallbackSink(blocks.append)]).run()
    assert report.frames_in == report.frames_out == 32 and engine.batches == [8, 8, 5, 8, 3]
    assert [b.index for b in blocks] == [0, 8, 16, 21, 29] and [b.seq for b in blocks] == [0, 1, 2, 3, 4]
    outputs = np.concatenate([b.outputs["y"][:, 0] for b in blocks])
    np.testing.assert_array_equal(outputs, 2 * np.arange(32))
    assert report.stages["infer"].frames == report.stages["sink"].frames == 32


def test_a_sink_without_write_block_gets_the_frames_one_by_one():
    sink = RecordingSink()
    batches = [(["a", "b"], np.zeros((2, 2), np.float32)), np.ones((3, 2), np.float32)]
    report = Pipeline(BlockSource(batches), [Stage("preprocess", to_samples),
                                             InferStep(DoublingEngine(), BatchPlan("x", 4))], [sink]).run()
    assert [f.index for f in sink.frames] == [0, 1, 2, 3, 4] and report.frames_out == 5
    assert [f.name for f in sink.frames] == ["a", "b", "frame 2", "frame 3", "frame 4"]
    assert sink.frames[3].outputs["y"].tolist() == [2.0, 2.0] and sink.closed


def test_a_block_larger_than_the_engines_batch_is_refused_naming_its_frames():
    stages = [Stage("preprocess", to_samples), InferStep(DoublingEngine(), BatchPlan("x", 4))]
    with pytest.raises(PipelineError, match=r"block of 6 frames \(frames 4\.\.9\).*at most 4") as info:
        Pipeline(BlockSource(numbered_batches([4, 6])), stages).run()
    assert info.value.stage == "infer" and info.value.frame == 4


def test_a_short_block_is_padded_to_the_engines_fixed_batch_and_the_padding_dropped():
    engine, blocks = DoublingEngine(), []
    Pipeline(BlockSource(numbered_batches([4, 1])), [Stage("preprocess", to_samples),
                                                     InferStep(engine, BatchPlan("x", 4, min_batch=4))],
             [BlockCallbackSink(blocks.append)]).run()
    assert engine.batches == [4, 4] and blocks[1].outputs["y"].tolist() == [[8.0, 8.0]]


def test_a_failing_block_stage_names_its_first_frame_and_the_sinks_discard():
    sink = RecordingSink()

    def fails_on_the_third_block(block):
        if block.seq == 2:
            raise ValueError("bad block")
        to_samples(block)

    stages = [Stage("preprocess", fails_on_the_third_block), InferStep(DoublingEngine(), BatchPlan("x", 4))]
    with pytest.raises(PipelineError, match="'preprocess' failed on frame 8: ValueError: bad block") as info:
        Pipeline(BlockSource(numbered_batches([4] * 5)), stages, [sink]).run()
    assert info.value.frame == 8 and sink.discarded


def test_a_slow_block_sink_holds_back_the_source():
    made, consumed, ahead = [0], [0], [0]

    def endless():
        for _ in range(60):
            made[0] += 1
            ahead[0] = max(ahead[0], made[0] - consumed[0])
            yield np.zeros((4, 2), np.float32)

    def slow(block):
        time.sleep(0.002)
        consumed[0] += 1

    stages = [Stage("preprocess", to_samples), InferStep(DoublingEngine(), BatchPlan("x", 4, in_flight=2))]
    report = Pipeline(BlockSource(endless()), stages, [BlockCallbackSink(slow)], queue_size=2).run()
    assert report.frames_out == 240
    # blocks alive at once: 3 queues of 2, one in each stage thread, 2 in flight, the sink's, the source's
    assert ahead[0] <= 3 * 2 + 2 + 2 + 2
    assert all(q["max_depth"] <= q["capacity"] for q in report.queues.values())


def test_a_batch_in_flight_is_collected_when_no_block_comes_within_max_wait():
    resumed, arrived = threading.Event(), {}

    def pausing():
        yield np.zeros((2, 2), np.float32)
        resumed.wait(2.0)
        yield np.zeros((2, 2), np.float32)

    def seen(block):
        arrived[block.seq] = True
        if block.seq == 0:
            resumed.set()  # the first block came out while the source was still paused

    stages = [Stage("preprocess", to_samples), InferStep(DoublingEngine(), BatchPlan("x", 4, max_wait_s=0.01))]
    t0 = time.perf_counter()
    Pipeline(BlockSource(pausing()), stages, [BlockCallbackSink(seen)]).run()
    assert arrived == {0: True, 1: True} and time.perf_counter() - t0 < 1.5


def test_draining_stops_at_a_block_and_finishes_every_block_already_read():
    blocks, pipeline = [], None

    def endless():
        while True:
            yield np.zeros((4, 2), np.float32)

    def drain_after_three(block):
        if block.seq == 3:
            pipeline.drain.set()
        blocks.append(block)

    pipeline = Pipeline(BlockSource(endless()), [Stage("preprocess", to_samples),
                                                 InferStep(DoublingEngine(), BatchPlan("x", 4))],
                        [BlockCallbackSink(drain_after_three)])
    report = pipeline.run()
    assert 12 < report.frames_out == report.frames_in == 4 * len(blocks)
    assert [b.seq for b in blocks] == list(range(len(blocks)))


def test_ring_buffers_pass_to_the_next_block_only_once_released():
    ring = BatchRing(Cuda(FakeCudart()), 4, (2,), np.float32, 2)
    try:
        first, second = ring.acquire_slot(0), ring.acquire_slot(1)
        assert first.shape == (4, 2) and ring.holds(0, first[:3]) and not ring.holds(1, first)
        got = []
        waiter = threading.Thread(target=lambda: got.append(ring.acquire_slot(2)))
        waiter.start()
        time.sleep(0.1)
        assert not got  # block 2 needs block 0's buffer
        ring.release_slot(0)
        waiter.join(2.0)
        assert got and got[0].ctypes.data == first.ctypes.data and second.ctypes.data != first.ctypes.data
    finally:
        ring.close()


def test_run_engine_on_blocks_sends_the_ring_buffers_and_matches_the_frame_pipeline(engine_file, backends):
    pictures = [frame_picture(i, 40, 30) for i in range(11)]
    frames, blocks = [], []
    run_engine(engine_file, ArraySource(pictures), sinks=[CallbackSink(frames.append)], batch=4, **backends)
    batches = [np.stack(pictures[i : i + 4]) for i in range(0, 11, 4)]
    report = run_engine(engine_file, BlockSource(batches), sinks=[BlockCallbackSink(blocks.append)], batch=4,
                        **backends)
    assert report.frames_out == 11 and [b.count for b in blocks] == [4, 4, 3]
    got = np.concatenate([b.outputs["y"] for b in blocks])
    np.testing.assert_allclose(got, np.stack([f.outputs["y"] for f in frames]), rtol=1e-6)
    assert [m for b in blocks for m in b.meta] == [f.meta for f in frames]
    assert all(b.samples is None for b in blocks)  # sent from the ring, whose buffers were released


def marked(i: int) -> np.ndarray:
    picture = frame_picture(i, 40, 30).copy()
    picture[0, 0, 0] = i  # tells postprocessing which frame it has
    return picture


def test_block_postprocess_and_draw_run_frame_by_frame(engine_file, backends):
    blocks = []

    def draw(image, result):
        out = image.copy()
        out[0, 1] = result
        return out

    processing = Processing(post=lambda outputs, meta, image: int(image[0, 0, 0]) * 10, draw=draw)
    batches = [np.stack([marked(i) for i in range(j, j + 4)]) for j in (0, 4)]
    report = run_engine(engine_file, BlockSource(batches), sinks=[BlockCallbackSink(blocks.append)],
                        processing=processing, batch=4, **backends)
    assert list(report.stages) == ["read", "preprocess", "infer", "postprocess", "annotate", "sink"]
    assert [r for b in blocks for r in b.results] == [10 * i for i in range(8)]
    assert [int(image[0, 1, 0]) for b in blocks for image in b.images] == [10 * i for i in range(8)]


def test_a_failing_frame_inside_a_block_is_named(engine_file, backends):
    def post(outputs, meta, image):
        if int(image[0, 0, 0]) == 6:
            raise ValueError("cannot post-process this one")
        return None

    batches = [np.stack([marked(i) for i in range(j, j + 4)]) for j in (0, 4)]
    with pytest.raises(PipelineError, match="'postprocess' failed on frame 6") as info:
        run_engine(engine_file, BlockSource(batches), processing=Processing(post=post), batch=4, **backends)
    assert info.value.frame == 6


def test_a_pre_with_into_block_fills_the_ring_buffer_in_one_call(engine_file, backends):
    with TrtRunner(engine_file, **backends) as runner:
        target = image_input(runner.input_specs)
    calls = []

    class WholeBlock(ImagePreprocess):
        def into_block(self, images, out):
            calls.append(len(images))
            return [self.into(image, row) for image, row in zip(images, out)]

    batches = [np.stack([frame_picture(i, 40, 30) for i in range(4)])] * 3
    report = run_engine(engine_file, BlockSource(batches), processing=Processing(pre=WholeBlock(target)), batch=4,
                        **backends)
    assert calls == [4, 4, 4] and report.frames_out == 12


def test_a_block_made_of_a_frame_for_a_block_sink_in_a_frame_pipeline():
    blocks = []
    Pipeline(ArraySource([np.zeros((2, 2, 3), np.uint8)] * 3), [], [BlockCallbackSink(blocks.append)]).run()
    assert [(b.count, b.index) for b in blocks] == [(1, 0), (1, 1), (1, 2)]
    assert isinstance(blocks[0], Block) and blocks[0].images[0].shape == (2, 2, 3)


def test_a_device_resident_block_is_sent_as_it_is_and_a_short_one_refused(engine_file, backends):
    from trtkit.runtime.buffers import DeviceArray

    cuda, blocks, uploaded = backends["cuda"], [], []
    samples = np.random.default_rng(0).standard_normal((4, 3, 8, 8)).astype(np.float32)

    def upload(block):
        host = np.ascontiguousarray(block.images)
        ptr = cuda.malloc(host.nbytes)
        cuda.memcpy_htod_async(ptr, host.ctypes.data, host.nbytes, 0)
        uploaded.append(ptr)
        block.samples = DeviceArray(ptr, host.shape, host.dtype, cuda=cuda)

    with TrtRunner(engine_file, **backends) as runner:
        want = runner.infer({"x": samples})["y"]
        Pipeline(BlockSource([samples, samples[:2]]), [Stage("upload", upload), InferStep(runner, BatchPlan("x", 4))],
                 [BlockCallbackSink(blocks.append)]).run()
        np.testing.assert_allclose(blocks[0].outputs["y"], want, rtol=1e-6)
        np.testing.assert_allclose(blocks[1].outputs["y"], want[:2], rtol=1e-6)
        with pytest.raises(PipelineError, match=r"block of 1 device-resident frames \(frames 4\.\.4\).*at least 2"):
            Pipeline(BlockSource([samples, samples[:1]]),
                     [Stage("upload", upload), InferStep(runner, BatchPlan("x", 4, min_batch=2))]).run()
    for ptr in uploaded:
        cuda.free(ptr)
