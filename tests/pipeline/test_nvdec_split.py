"""One video over several NVDEC decoders (faked): chunks of whole GOPs from the file's keyframes, the frames in
order whichever decoder decoded them, bounded read-ahead, a decoder's failure named with its frames, and an early
stop that leaves no thread or device memory behind."""

from __future__ import annotations

import gc
import sys
import threading

import numpy as np
import pytest

from tests.fakes.fake_cuda import FakeCudart
from tests.pipeline.media import FakeNvc, frame_picture, write_pattern_video
from trtkit.errors import InputError, PipelineError
from trtkit.pipeline.nvdec_split import SplitNvdecReader, gop_chunks, keyframe_indices
from trtkit.runtime.cuda import Cuda

av = pytest.importorskip("av")

FRAMES = 35


def gop_video(path, frames: int = FRAMES, gop: int = 10):
    """An MPEG-4 video with a keyframe every ``gop`` frames (no B-frames: decode order is display order)."""
    return write_pattern_video(path, frames=frames, gop=gop)


@pytest.fixture
def fake(monkeypatch):
    rt = FakeCudart()
    pictures = [frame_picture(i) for i in range(FRAMES)]
    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", FakeNvc(pictures, cuda=rt))
    return rt, Cuda(rt), pictures


def test_chunks_are_whole_gops_of_at_least_the_asked_length():
    assert gop_chunks([0, 50, 100, 130, 250], 300, min_frames=60) == [(0, 100), (100, 250), (250, 300)]
    assert gop_chunks([0], 90, min_frames=10) == [(0, 90)]  # one GOP: one chunk (one decoder)
    assert gop_chunks([0, 10, 20], 25, min_frames=10) == [(0, 10), (10, 20), (20, 25)]


def test_keyframes_come_from_the_packets(tmp_path):
    keys, total = keyframe_indices(gop_video(tmp_path / "in.mp4"))
    assert total == FRAMES and keys[:4] == [0, 10, 20, 30]


@pytest.mark.parametrize("device_memory", [True, False])
def test_frames_come_in_order_from_three_decoders(fake, tmp_path, device_memory):
    rt, cuda, pictures = fake
    reader = SplitNvdecReader(gop_video(tmp_path / "in.mp4"), decoders=3, device_memory=device_memory, cuda=cuda,
                              ahead=4, chunk_frames=10)
    assert reader.chunks == [(0, 10), (10, 20), (20, 30), (30, 35)] and reader.info()["decoders"] == 3
    got = [np.asarray(f.to_host()) if device_memory else f for f in reader]
    reader.close()
    assert len(got) == FRAMES and all(np.array_equal(a, b) for a, b in zip(got, pictures))
    decoders = sys.modules["PyNvVideoCodec"].decoders
    assert len(decoders) == 3 and all(d.kwargs["use_device_memory"] for d in decoders)


def test_a_decoder_that_fails_is_named_with_its_frames(fake, tmp_path):
    _, cuda, _ = fake
    reader = SplitNvdecReader(gop_video(tmp_path / "in.mp4"), decoders=2, cuda=cuda, chunk_frames=10)

    def broken(start, count):
        yield from ()
        raise RuntimeError("cuvidDecodePicture failed")

    reader._readers[1].read = broken  # the second decoder: chunks 1 and 3
    with pytest.raises(PipelineError, match=r"NVDEC decoder 1 failed in frames 10-19 of .*cuvidDecodePicture"):
        list(reader)
    reader.close()


def test_stopping_early_stops_the_decoders_and_frees_their_memory(fake, tmp_path):
    rt, cuda, _ = fake
    before = rt.live_allocations()["device"]
    threads = threading.active_count()
    reader = SplitNvdecReader(gop_video(tmp_path / "in.mp4"), decoders=2, device_memory=True, cuda=cuda, ahead=2,
                              chunk_frames=10)
    frames = iter(reader)
    first = [next(frames) for _ in range(3)]
    frames.close()  # the consumer stops: the decoders, blocked on full queues, stop too
    reader.close()
    assert threading.active_count() == threads
    del first, frames
    gc.collect()
    surfaces = sum(len(d.surfaces) for d in sys.modules["PyNvVideoCodec"].decoders)  # the fake library's own
    assert rt.live_allocations()["device"] - surfaces == before


@pytest.mark.parametrize("bad", [{"decoders": 0}, {"ahead": 0}, {"decoders": True}])
def test_bad_counts_are_refused(fake, tmp_path, bad):
    with pytest.raises(InputError, match="give 1 or more"):
        SplitNvdecReader(gop_video(tmp_path / "in.mp4"), cuda=fake[1], **bad)
