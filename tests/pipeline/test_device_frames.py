"""Video frames in device memory (NVDEC, faked): the GPU letterbox writes each sample into a device ring the runners
bind in place, the frames' pictures come to the host for the sinks, and every byte of device and pinned memory is
given back; where the GPU cannot preprocess, the frames are copied to the host and the report says why."""

from __future__ import annotations

import gc
import sys

import numpy as np
import pytest

from tests.fakes.fake_cuda import FakeCudart
from tests.fakes.fake_trt import make_fake_trt
from tests.pipeline.media import FakeNvc, frame_picture, make_video
from trtkit.errors import InputError, PipelineError
from trtkit.pipeline import CallbackSink, ImagePreprocess, Processing, VideoSource, run_engine
from trtkit.pipeline.batching import BatchRing
from trtkit.pipeline.device_frames import DeviceFrames, SlotPool
from trtkit.runtime.buffers import DeviceBuffer
from trtkit.runtime.cuda import Cuda

pytest.importorskip("av")  # the fake NVDEC opens a real (tiny) video file's path

FRAMES = 11  # not a multiple of the batch: the last batch is short


@pytest.fixture
def gpu():
    fake = FakeCudart()
    return fake, {"trt": make_fake_trt("8.6.0"), "cuda": Cuda(fake)}


def _video_source(tmp_path, monkeypatch, fake, cuda, pictures):
    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", FakeNvc(pictures, cuda=fake))
    return VideoSource(make_video(tmp_path / "in.mp4", frames=2), decoder="nvdec", device_memory=True, cuda=cuda)


def _run(engine_file, source, backends, processing=None, **kwargs):
    seen: list = []
    report = run_engine(
        engine_file, source, sinks=[CallbackSink(seen.append)], processing=processing, batch=4, **backends, **kwargs
    )
    return report, seen


def _host_reference(engine_file, pictures, backends):
    """The same frames from host memory through the exact-filter CPU letterbox."""
    from trtkit.pipeline import ArraySource

    exact = Processing(pre_for=lambda target: ImagePreprocess(target, reducing_gap=None))
    return _run(engine_file, ArraySource(pictures), backends, exact)[1]


def test_device_frames_are_letterboxed_on_the_gpu_with_the_cpu_letterboxs_outputs(
    engine_file, gpu, tmp_path, monkeypatch
):
    fake, backends = gpu
    pictures = [frame_picture(i) for i in range(FRAMES)]
    before = fake.live_allocations()
    source = _video_source(tmp_path, monkeypatch, fake, backends["cuda"], pictures)
    report, seen = _run(engine_file, source, backends)
    source.close()
    assert report.frames_in == report.frames_out == FRAMES and [f.index for f in seen] == list(range(FRAMES))
    assert report.source["preprocess"]["on"] == "gpu" and report.source["decoder"] == "nvdec"
    # the fake decoder writes its frames asynchronously on the stream it is given: the copies follow them there
    assert report.source["frames_ready_by"] == "stream"
    reference = _host_reference(engine_file, pictures, backends)
    for got, want, picture in zip(seen, reference, pictures):
        np.testing.assert_array_equal(got.outputs["y"], want.outputs["y"])
        assert got.meta == want.meta
        # the sinks get the frame's own picture, in host memory (the decoder's surfaces were reused meanwhile)
        assert isinstance(got.image, np.ndarray) and np.array_equal(got.image, picture)
    del seen, got, want, picture
    gc.collect()
    after = fake.live_allocations()
    # the decoder's own surfaces (the fake library's, freed by it) are all that stays
    surfaces = len(_decoder_surfaces())
    assert after["device"] - surfaces == before["device"] and after["host"] == before["host"]
    assert after["streams"] == before["streams"] and after["events"] == before["events"]


def test_frames_of_a_decoder_that_refuses_trtkits_stream_are_whole_after_a_wait_for_the_gpu(
    engine_file, gpu, tmp_path, monkeypatch
):
    # such a decoder writes its frames on a stream of its own, which no copy can be ordered after
    fake, backends = gpu
    pictures = [frame_picture(i) for i in range(FRAMES)]
    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", FakeNvc(pictures, cuda=fake, refuse_stream=True))
    source = VideoSource(
        make_video(tmp_path / "in.mp4", frames=2), decoder="nvdec", device_memory=True, cuda=backends["cuda"]
    )
    report, seen = _run(engine_file, source, backends)
    source.close()
    assert report.source["frames_ready_by"] == "device"
    assert [bool(np.array_equal(f.image, p)) for f, p in zip(seen, pictures)] == [True] * FRAMES
    reference = _host_reference(engine_file, pictures, backends)
    for got, want in zip(seen, reference):
        np.testing.assert_array_equal(got.outputs["y"], want.outputs["y"])


def _decoder_surfaces():
    return [s for d in sys.modules["PyNvVideoCodec"].decoders for s in d.surfaces]


def test_the_runner_gets_the_rows_the_gpu_wrote_and_no_sample_crosses_to_the_device(
    engine_file, gpu, tmp_path, monkeypatch
):
    fake, backends = gpu
    pictures = [frame_picture(i) for i in range(8)]
    source = _video_source(tmp_path, monkeypatch, fake, backends["cuda"], pictures)
    copies = []
    real_memcpy = fake.cudaMemcpyAsync

    def memcpy(dst, src, count, kind, stream):
        copies.append((kind, int(count)))
        return real_memcpy(dst, src, count, kind, stream)

    monkeypatch.setattr(fake, "cudaMemcpyAsync", memcpy)
    report, _ = _run(engine_file, source, backends, cuda_graph=False)
    source.close()
    sample_bytes = 3 * 8 * 8 * 4
    h2d = [n for kind, n in copies if kind == fake.cudaMemcpyKind.cudaMemcpyHostToDevice]
    # the letterbox's tap tables go up once per frame size; no sample or batch of samples does
    assert h2d and all(n % sample_bytes for n in h2d), h2d
    # and the batches are the ring's rows, bound where they are (not copied row by row into a runner's buffer)
    d2d = [n for kind, n in copies if kind == fake.cudaMemcpyKind.cudaMemcpyDeviceToDevice]
    assert sample_bytes not in d2d and len(d2d) == 8  # one copy per decoded frame, out of the decoder's surface
    assert report.frames_out == 8


def test_a_custom_pre_gets_host_copies_of_the_frames_and_the_report_says_why(engine_file, gpu, tmp_path, monkeypatch):
    fake, backends = gpu
    pictures = [frame_picture(i) for i in range(6)]
    source = _video_source(tmp_path, monkeypatch, fake, backends["cuda"], pictures)
    got_types = []

    def pre_for(target):
        exact = ImagePreprocess(target, reducing_gap=None)

        def pre(image):
            got_types.append(type(image))
            return exact(image)

        return pre

    report, seen = _run(engine_file, source, backends, Processing(pre_for=pre_for))
    source.close()
    assert report.source["preprocess"] == {
        "on": "cpu",
        "reason": "frames copied to the host: the processing's own pre runs on the CPU (it gives no device_meta)",
    }
    assert set(got_types) == {np.ndarray} and [np.array_equal(f.image, p) for f, p in zip(seen, pictures)] == [True] * 6
    reference = _host_reference(engine_file, pictures, backends)
    for got, want in zip(seen, reference):
        np.testing.assert_array_equal(got.outputs["y"], want.outputs["y"])


def test_stretch_resize_runs_on_the_cpu_and_says_so(engine_file, gpu, tmp_path, monkeypatch):
    fake, backends = gpu
    source = _video_source(tmp_path, monkeypatch, fake, backends["cuda"], [frame_picture(i) for i in range(3)])
    report, seen = _run(engine_file, source, backends, resize="stretch")
    source.close()
    assert report.source["preprocess"]["on"] == "cpu" and "resize='stretch' runs on the CPU" in (
        report.source["preprocess"]["reason"]
    )
    assert len(seen) == 3


def test_without_gpu_kernels_the_frames_are_preprocessed_on_the_host_naming_the_reason(
    engine_file, tmp_path, monkeypatch
):
    fake = FakeCudart(kernels=False)  # no fake kernels: the real PTX is tried, and cannot load on the fake
    backends = {"trt": make_fake_trt("8.6.0"), "cuda": Cuda(fake)}
    source = _video_source(tmp_path, monkeypatch, fake, backends["cuda"], [frame_picture(i) for i in range(3)])
    report, seen = _run(engine_file, source, backends)
    source.close()
    where = report.source["preprocess"]
    assert where["on"] == "cpu" and "the GPU kernels cannot load" in where["reason"] and len(seen) == 3


def test_a_device_frame_that_is_not_an_rgb_picture_stops_the_pipeline_naming_it(
    engine_file, gpu, tmp_path, monkeypatch
):
    fake, backends = gpu
    gray = [np.zeros((48, 64, 1), np.uint8) for _ in range(3)]
    source = _video_source(tmp_path, monkeypatch, fake, backends["cuda"], gray)
    message = r"stage 'decode' failed on frame 0: A decoded frame is \(48, 64, 1\) uint8 on the device"
    with pytest.raises(PipelineError, match=message):
        _run(engine_file, source, backends)
    source.close()


def test_device_memory_with_the_cpu_decoder_is_refused(tmp_path):
    with pytest.raises(InputError, match="Frames in device memory need decoder='nvdec' \\(or 'auto'\\), not 'pyav'"):
        VideoSource(make_video(tmp_path / "in.mp4", frames=2), decoder="pyav", device_memory=True)


def test_each_decoded_frame_is_asked_for_its_planes_once(engine_file, gpu, tmp_path, monkeypatch):
    from tests.pipeline.media import DecodedFrame

    fake, backends = gpu
    source = _video_source(tmp_path, monkeypatch, fake, backends["cuda"], [frame_picture(i) for i in range(7)])
    before = DecodedFrame.planes_asked
    _run(engine_file, source, backends)
    source.close()
    assert DecodedFrame.planes_asked - before == 7


def test_owned_frames_keep_their_pixels_when_the_decoder_reuses_its_surface():
    fake = FakeCudart()
    cuda = Cuda(fake)
    surface = fake.device_array((4, 5, 3), np.uint8, fill=np.full((4, 5, 3), 7, np.uint8))
    frames = DeviceFrames(cuda)
    (owned,) = frames.own([surface])
    surface.host_view()[...] = 9  # the decoder writes its next frame into the same surface
    assert np.all(owned.to_host() == 7) and owned.shape == (4, 5, 3)
    del owned
    gc.collect()
    frames.close()
    surface.free()
    assert fake.live_allocations()["device"] == 0


def test_a_slot_is_lent_again_once_its_array_is_garbage_and_freed_after_close():
    fake = FakeCudart()
    cuda = Cuda(fake)
    pool = SlotPool(lambda n: DeviceBuffer(cuda, n), 64)
    first = pool.lend(_Lent)
    ptr = first.ptr
    del first
    second = pool.lend(_Lent)
    assert second.ptr == ptr and pool.made == 1  # the same slot, no new allocation
    third = pool.lend(_Lent)
    assert pool.made == 2 and third.ptr != ptr
    pool.close()
    assert fake.live_allocations()["device"] == 2  # both still lent
    del second, third
    gc.collect()
    assert fake.live_allocations()["device"] == 0
    with pytest.raises(InputError, match="This pool was closed"):
        pool.lend(_Lent)


class _Lent:
    def __init__(self, slot):
        self.ptr = slot.ptr


def test_a_device_ring_hands_out_rows_at_their_addresses_and_one_block_as_a_device_array():
    from trtkit.pipeline.stages import Frame

    fake = FakeCudart()
    ring = BatchRing(Cuda(fake), 4, (3, 2, 2), np.float32, 2, device=True)
    rows = [ring.acquire(i) for i in range(4)]
    assert all(hasattr(r, "__cuda_array_interface__") for r in rows)
    assert [r.ptr - rows[0].ptr for r in rows] == [0, 48, 96, 144] and rows[0].shape == (3, 2, 2)
    frames = [Frame(i, None, sample=rows[i]) for i in range(1, 3)]
    block = ring.rows(frames)
    assert block.ptr == rows[1].ptr and block.shape == (2, 3, 2, 2)
    frames[1].sample = fake.device_array((3, 2, 2), np.float32)  # not in its row any more: no view
    assert ring.rows(frames) is None
    ring.close()


def test_a_gray_input_is_preprocessed_on_the_cpu_naming_its_channels():
    from trtkit.pipeline.device_frames import DeviceFramePreprocess, device_preprocess
    from trtkit.pipeline.preprocess import ImageInput

    fake = FakeCudart()
    gray = ImageInput("x", 1, 8, 8, "float32", 1, 4)
    runner = type("Runner", (), {"cuda": Cuda(fake)})()
    pre, reason = device_preprocess(runner, gray)
    assert pre is None and reason == (
        "input 'x' has 1 channel(s) of float32; the GPU letterbox fills 3-channel float32/float16 (NCHW) and uint8 "
        "(NHWC) inputs"
    )
    with pytest.raises(InputError, match="The GPU preprocessing cannot fill this input: input 'x' has 1 channel"):
        DeviceFramePreprocess(Cuda(fake), gray, kernels=None)


def test_results_only_runs_leave_the_pictures_on_the_device(engine_file, gpu, tmp_path, monkeypatch):
    from trtkit.pipeline import JsonLinesSink

    class ResultsOnly(CallbackSink):
        needs_images = False  # as JsonLinesSink says

    fake, backends = gpu
    pictures = [frame_picture(i) for i in range(6)]
    results, kept = tmp_path / "r.jsonl", []
    source = _video_source(tmp_path, monkeypatch, fake, backends["cuda"], pictures)
    report = run_engine(engine_file, source, sinks=[JsonLinesSink(results), ResultsOnly(kept.append)], batch=4,
                        **backends)
    source.close()
    assert report.source["preprocess"]["on"] == "gpu" and len(results.read_text().splitlines()) == 6
    assert all(hasattr(f.image, "__cuda_array_interface__") for f in kept)  # never copied to the host
    assert [np.array_equal(f.image.to_host(), p) for f, p in zip(kept, pictures)] == [True] * 6
    kept.clear()
    source = _video_source(tmp_path, monkeypatch, fake, backends["cuda"], pictures)
    run_engine(engine_file, source, sinks=[JsonLinesSink(results), CallbackSink(kept.append)], batch=4, **backends)
    source.close()
    assert all(isinstance(f.image, np.ndarray) for f in kept)  # a sink that may want pictures gets them on the host


class _Pitched:
    """A decoder surface whose rows are padded to ``pitch`` bytes (strides ``(pitch, 3, 1)``)."""

    def __init__(self, fake, picture, pitch):
        height, width = picture.shape[:2]
        self.buffer = fake.device_array((height, pitch), np.uint8)
        self.buffer.host_view()[:, : width * 3] = picture.reshape(height, width * 3)
        self.buffer.host_view()[:, width * 3 :] = 255  # padding that must not reach the copy
        self.__cuda_array_interface__ = {"shape": picture.shape, "typestr": "|u1", "data": (self.buffer.ptr, False),
                                         "version": 3, "strides": (pitch, 3, 1), "stream": None}


def test_frames_with_padded_rows_are_packed_in_their_copies():
    fake = FakeCudart()
    picture = frame_picture(3, 10, 6)
    frames = DeviceFrames(Cuda(fake))
    (owned,) = frames.own([_Pitched(fake, picture, pitch=64)])
    assert owned.shape == (6, 10, 3) and np.array_equal(owned.to_host(), picture)
    with pytest.raises(InputError, match=r"has strides \(30, 1, 10\) for shape \(6, 10, 3\); the GPU path takes rows"):
        bad = _Pitched(fake, picture, pitch=64)
        bad.__cuda_array_interface__["strides"] = (30, 1, 10)
        frames.own([bad])
    frames.close()


def test_pictures_past_the_page_locked_limit_come_in_plain_memory_with_the_same_pixels():
    from trtkit.pipeline.device_frames import FrameDownload, PinnedPictures

    fake = FakeCudart()
    cuda = Cuda(fake)
    pictures = PinnedPictures(cuda, limit=2 * 6 * 10 * 3)  # two 6x10 pictures
    held = [pictures.take(6, 10) for _ in range(3)]
    assert [fake._pinned(a.ctypes.data, a.nbytes) for a in held] == [True, True, False]
    del held[0]
    gc.collect()
    assert fake._pinned(pictures.take(6, 10).ctypes.data, 180)  # a freed slot is lent again before plain memory
    download = FrameDownload(cuda, pinned_limit=0)  # every picture in plain memory
    frame = fake.device_array((6, 10, 3), np.uint8, fill=frame_picture(2, 10, 6))
    got = download(frame)
    assert not fake._pinned(got.ctypes.data, got.nbytes) and np.array_equal(got, frame_picture(2, 10, 6))
    download.close()
    pictures.close()


def test_host_pictures_letterboxed_on_the_gpu_give_the_cpu_letterboxs_outputs(engine_file, gpu):
    from trtkit.pipeline import ArraySource

    fake, backends = gpu
    pictures = [frame_picture(i, 40 + 8 * (i % 2), 30) for i in range(9)]  # two picture sizes
    reference = _host_reference(engine_file, pictures, backends)
    for preprocess in ("gpu", "auto"):  # auto: the GPU letterbox wherever it can fill the input, host frames too
        report, seen = _run(engine_file, ArraySource(pictures), backends, preprocess=preprocess)
        assert report.source["preprocess"] == {
            "on": "gpu",
            "reason": "host pictures uploaded once, letterboxed by the GPU kernels",
        }
        for got, want, picture in zip(seen, reference, pictures):
            np.testing.assert_array_equal(got.outputs["y"], want.outputs["y"])
            assert got.meta == want.meta and got.image is picture  # the sinks get the picture as it came


def test_an_unknown_or_impossible_preprocess_is_refused_naming_it(engine_file, gpu):
    from trtkit.pipeline import ArraySource

    _, backends = gpu
    with pytest.raises(InputError, match="preprocess='tpu' is not known; use one of: auto, gpu, cpu"):
        _run(engine_file, ArraySource([frame_picture(0)]), backends, preprocess="tpu")
    custom = Processing(pre_for=lambda target: ImagePreprocess(target))
    with pytest.raises(InputError, match="preprocess='gpu' cannot run here: the processing's own pre runs on the CPU"):
        _run(engine_file, ArraySource([frame_picture(0)]), backends, custom, preprocess="gpu")


def test_device_frames_asked_to_run_on_the_cpu_come_to_the_host(engine_file, gpu, tmp_path, monkeypatch):
    fake, backends = gpu
    pictures = [frame_picture(i) for i in range(5)]
    source = _video_source(tmp_path, monkeypatch, fake, backends["cuda"], pictures)
    report, seen = _run(engine_file, source, backends, preprocess="cpu")
    source.close()
    reason = "frames copied to the host: asked for (preprocess='cpu')"
    assert report.source["preprocess"] == {"on": "cpu", "reason": reason}
    assert [np.array_equal(f.image, p) for f, p in zip(seen, pictures)] == [True] * 5


def test_decoded_frames_whose_plane_is_rows_of_bytes_are_read_as_pixels(engine_file, gpu, tmp_path, monkeypatch):
    fake, backends = gpu
    pictures = [frame_picture(i) for i in range(5)]
    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", FakeNvc(pictures, cuda=fake, flat_planes=True))
    source = VideoSource(make_video(tmp_path / "in.mp4", frames=2), decoder="nvdec", device_memory=True,
                         cuda=backends["cuda"])
    report, seen = _run(engine_file, source, backends)
    source.close()
    assert report.source["preprocess"]["on"] == "gpu"
    assert [np.array_equal(f.image, p) for f, p in zip(seen, pictures)] == [True] * 5


def test_a_decoded_frame_of_several_planes_is_refused_naming_the_colour_type():
    from trtkit.pipeline.device_frames import DeviceFrames

    fake = FakeCudart()

    class TwoPlanes:  # NV12 as PyNvVideoCodec's NATIVE output gives it: luma and chroma planes
        shape = [6, 4]

        def cuda(self):
            return [fake.device_array((4, 4), np.uint8), fake.device_array((2, 4), np.uint8)]

    frames = DeviceFrames(Cuda(fake))
    with pytest.raises(InputError, match=r"A decoded frame \(TwoPlanes\) has 2 planes; .*OutputColorType.RGB"):
        frames.own([TwoPlanes()])
    frames.close()


def test_several_lanes_letterbox_at_once_with_one_lanes_results():
    from concurrent.futures import ThreadPoolExecutor

    from tests.fakes.fake_cuda import FakeLetterboxKernels
    from trtkit.pipeline.device_frames import DeviceFramePreprocess
    from trtkit.pipeline.preprocess import ImageInput
    from trtkit.runtime.buffers import DeviceBuffer

    fake = FakeCudart()
    cuda = Cuda(fake)
    target = ImageInput("x", 3, 8, 8, "float32", 1, 4)
    frames = [fake.device_array((30, 40 + 8 * (i % 3), 3), np.uint8, fill=frame_picture(i, 40 + 8 * (i % 3), 30))
              for i in range(12)]
    row = 3 * 8 * 8 * 4

    def run(pre, buffer):
        from trtkit.runtime.buffers import DeviceArray

        def one(i):
            out = DeviceArray(buffer.ptr + i * row, (3, 8, 8), np.float32, cuda=cuda)
            meta, picture = pre.letterbox_into(frames[i], out)
            return meta, picture, out.to_host()

        with ThreadPoolExecutor(4) as pool:
            return list(pool.map(one, range(12)))

    single = DeviceFramePreprocess(cuda, target, FakeLetterboxKernels(fake), lanes=1)
    many = DeviceFramePreprocess(cuda, target, lambda: FakeLetterboxKernels(fake), lanes=3)
    a, b = DeviceBuffer(cuda, 12 * row), DeviceBuffer(cuda, 12 * row)
    want, got = run(single, a), run(many, b)
    for (m1, p1, s1), (m2, p2, s2), frame in zip(want, got, frames):
        assert m1 == m2 and np.array_equal(s1, s2)
        assert np.array_equal(p1, frame.host_view()) and np.array_equal(p2, frame.host_view())
    for done in (single.close, many.close, a.free, b.free):
        done()
    with pytest.raises(InputError, match="lanes=0: give 1 or more"):
        DeviceFramePreprocess(cuda, target, FakeLetterboxKernels(fake), lanes=0)
