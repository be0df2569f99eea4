"""The streaming pipeline on a real GPU: a generated video through a tiny conv engine on two runners with CUDA
graphs; every frame's outputs equal a plain runner's, frames in = frames out, the output video decodes, the GPU
timeline covers every batch, and device memory is back where it was after a warm-up run. No timing assertions.

Run on the GPU host: ``bash .gpu/bin/gpu-run pytest -m gpu -q tests/gpu/test_pipeline_gpu.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.gpu.test_runtime_gpu import engine_bytes  # noqa: F401 - the session's tiny conv engine (a fixture)

pytestmark = pytest.mark.gpu
av = pytest.importorskip("av")


@pytest.fixture(scope="module")
def engine_path(engine_bytes, tmp_path_factory):  # noqa: F811
    path = tmp_path_factory.mktemp("pipeline") / "tiny.engine"
    path.write_bytes(engine_bytes)
    return path


def test_video_through_the_gpu_pipeline_matches_a_plain_runner(engine_path, tmp_path):
    from tests.pipeline.media import write_pattern_video
    from trtkit.pipeline import CallbackSink, VideoSink, VideoSource, run_engine
    from trtkit.pipeline.preprocess import ImagePreprocess, image_input
    from trtkit.runtime import TrtRunner
    from trtkit.runtime.cuda import default_cuda

    video = write_pattern_video(tmp_path / "in.mp4", frames=61, size=(96, 64))
    seen = []
    run_engine(engine_path, VideoSource(video, decoder="pyav"), cuda_graph=True)  # TensorRT's first-load memory
    free_before = default_cuda().mem_get_info()[0]
    source = VideoSource(video, decoder="pyav")
    report = run_engine(engine_path, source, sinks=[CallbackSink(seen.append), VideoSink(tmp_path / "out.mp4")],
                        cuda_graph=True, runners=2)
    free_after = default_cuda().mem_get_info()[0]
    assert report.frames_in == report.frames_out == len(seen) == 61
    assert [f.index for f in seen] == list(range(61))
    with TrtRunner(engine_path) as runner:
        # the GPU letterbox (the default where its kernels load) is Pillow's exact filter; the CPU's may box-reduce
        exact = report.source["preprocess"]["on"] == "gpu"
        pre = ImagePreprocess(image_input(runner.input_specs), **({"reducing_gap": None} if exact else {}))
        for frame in seen[::7]:
            want = runner.infer({"x": pre(frame.image)[0][None]})["y"][0]
            np.testing.assert_allclose(frame.outputs["y"], want, rtol=1e-4, atol=1e-5)
    with av.open(str(tmp_path / "out.mp4")) as container:
        assert sum(1 for _ in container.decode(video=0)) == 61
    assert report.gpu["batches"] >= 61 // 4 and 0 < report.gpu["busy_pct"] <= 100
    assert free_after >= free_before


def test_nvdec_frames_on_the_gpu_give_the_host_paths_outputs_and_pictures(engine_path, tmp_path):
    from tests.pipeline.media import write_pattern_video
    from trtkit.pipeline import CallbackSink, ImagePreprocess, Processing, VideoSource, run_engine

    pytest.importorskip("PyNvVideoCodec", reason="PyNvVideoCodec is not installed on this host")
    video = write_pattern_video(tmp_path / "in.mp4", frames=45, size=(96, 64), codec="libx264")
    try:
        source = VideoSource(video, decoder="nvdec", device_memory=True)
    except Exception as exc:  # noqa: BLE001 - no NVDEC on this GPU or driver
        pytest.skip(f"NVDEC does not open the file here: {exc}")
    on_gpu, on_host, at_sink = [], [], []

    def keep(frame):  # the picture as the sink sees it, copied then (the frames' own arrays are checked after)
        on_gpu.append(frame)
        at_sink.append(np.array(frame.image, copy=True))

    report = run_engine(engine_path, source, sinks=[CallbackSink(keep)], cuda_graph=True, runners=2)
    source.close()
    assert report.source["preprocess"]["on"] == "gpu", report.source
    exact = Processing(pre_for=lambda target: ImagePreprocess(target, reducing_gap=None))
    host = VideoSource(video, decoder="nvdec")  # the same decoder into host memory
    run_engine(engine_path, host, sinks=[CallbackSink(on_host.append)], processing=exact, cuda_graph=True)
    host.close()
    assert len(on_gpu) == len(on_host) == 45 and [f.index for f in on_gpu] == list(range(45))
    # the pattern's white bar, 2 x index pixels wide, read back from row 0 of each picture (H.264 keeps its edge)
    assert [bar_width(p) for p in at_sink] == [2 * i for i in range(45)], "the pictures are not the video's frames"
    seen = [bool(np.array_equal(a, w.image)) for a, w in zip(at_sink, on_host)]
    kept = [bool(np.array_equal(g.image, w.image)) for g, w in zip(on_gpu, on_host)]
    assert seen == kept == [True] * 45, f"pictures right at the sink: {seen}; still right after the run: {kept}"
    for got, want in zip(on_gpu, on_host):
        # the device copies kept every frame as decoded while it waited (the same pictures as host decoding)
        assert np.array_equal(got.image, want.image), got.index
        np.testing.assert_allclose(got.outputs["y"], want.outputs["y"], rtol=1e-4, atol=1e-5)
        assert got.meta == want.meta


def bar_width(picture) -> int:
    """The white bar of :func:`~tests.pipeline.media.frame_picture`, in pixels, on row 0 of ``picture``."""
    return int((np.asarray(picture)[0, :, 0] > 240).sum())


def test_each_step_of_the_nvdec_device_path_keeps_the_pixels(engine_path, tmp_path):
    # the sixth session found PyNvVideoCodec 2.2's host-memory frames holding other frames' pixels
    # (scripts/nvdec_probe.py) while its device frames were right; NvdecReader now always decodes into device
    # memory and copies down itself. This test says which step loses pixels (the owned copy, or the picture copied
    # back), each checked against the pattern itself
    from tests.pipeline.media import write_pattern_video
    from trtkit.pipeline.batching import BatchRing
    from trtkit.pipeline.device_frames import device_preprocess
    from trtkit.pipeline.preprocess import image_input
    from trtkit.pipeline.video import NvdecReader
    from trtkit.runtime import TrtRunner

    pytest.importorskip("PyNvVideoCodec", reason="PyNvVideoCodec is not installed on this host")
    video = write_pattern_video(tmp_path / "in.mp4", frames=8, size=(96, 64), codec="libx264")
    try:
        host_frames = list(NvdecReader(video))
        reader = NvdecReader(video, device_memory=True)
    except Exception as exc:  # noqa: BLE001 - no NVDEC on this GPU or driver
        pytest.skip(f"NVDEC does not open the file here: {exc}")
    owned = list(reader)
    assert len(owned) == len(host_frames) == 8
    assert [bar_width(f) for f in host_frames] == [2 * i for i in range(8)], "host frames are not the video's"
    copies = [frame.to_host() for frame in owned]
    assert [bar_width(c) for c in copies] == [2 * i for i in range(8)], "the device copies are not the video's frames"
    same = [bool(np.array_equal(a, b)) for a, b in zip(copies, host_frames)]
    with TrtRunner(engine_path) as runner:
        target = image_input(runner.input_specs)
        pre, reason = device_preprocess(runner, target)
        assert pre is not None, reason
        ring = BatchRing(runner.cuda, 4, pre.shape, target.dtype, 2, device=True)
        pictures = []
        for i, frame in enumerate(owned[:4]):
            _, picture = pre.letterbox_into(frame, ring.acquire(i))
            pictures.append(picture)
        back = [bool(np.array_equal(p, h)) for p, h in zip(pictures, host_frames)]
        ring.close()
        pre.close()
    reader.close()
    assert same == [True] * 8, f"owned device copies equal to host decoding: {same} (ready by {reader.frames_ready_by})"
    assert back == [True] * 4, f"pictures copied back equal to host decoding: {back}"


def test_a_video_split_over_three_nvdec_decoders_keeps_every_frame_in_order(tmp_path):
    from tests.pipeline.media import write_pattern_video
    from trtkit.pipeline.nvdec_split import SplitNvdecReader

    pytest.importorskip("PyNvVideoCodec", reason="PyNvVideoCodec is not installed on this host")
    video = write_pattern_video(tmp_path / "in.mp4", frames=150, size=(96, 64), codec="libx264", gop=30)
    try:
        reader = SplitNvdecReader(video, decoders=3, chunk_frames=30)
    except Exception as exc:  # noqa: BLE001 - no NVDEC on this GPU or driver
        pytest.skip(f"NVDEC does not open the file here: {exc}")
    frames = list(reader)
    info = reader.info()
    reader.close()
    assert info["decoders"] == 3 and info["chunks"] == 5, info
    assert [bar_width(f) for f in frames] == [(2 * i) % 96 for i in range(150)]
