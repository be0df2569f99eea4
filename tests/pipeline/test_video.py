"""Videos made by the tests with PyAV: decode, encode, corrupt frames, files that are not videos, decoder choice,
and the output written atomically."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from tests.pipeline.media import FakeNvc, corrupt_packet, decode_all, frame_picture, make_audio_only, make_video
from trtkit.errors import DependencyError, InputError, TrtkitError
from trtkit.pipeline import VideoSink, VideoSource, run_engine
from trtkit.pipeline.sources import open_video
from trtkit.pipeline.video import DECODE_THREADS, PyAVReader, VideoWriter

av = pytest.importorskip("av")


def test_every_frame_goes_through_and_the_output_video_plays(engine_file, backends, tmp_path):
    source = VideoSource(make_video(tmp_path / "in.mp4", frames=30), decoder="pyav")
    out = tmp_path / "out.mp4"
    report = run_engine(engine_file, source, sinks=[VideoSink(out, fps=source.fps)], **backends)
    assert report.frames_in == report.frames_out == 30 and not report.skipped
    frames = decode_all(out)
    assert len(frames) == 30 and frames[0].shape == (48, 64, 3)
    # the bar of frame i is 2*i pixels wide: order survives decode -> pipeline -> encode -> decode
    widths = [int((f[:, :, 0].mean(axis=0) > 230).sum()) for f in frames]
    assert widths == sorted(widths) and abs(widths[20] - 40) <= 2
    assert report.source["decoder"] == "pyav" and report.source["frames"] == 30
    assert list(tmp_path.glob(".*partial*")) == []


def test_a_corrupt_frame_mid_file_is_skipped_counted_and_named(engine_file, backends, tmp_path):
    path = make_video(tmp_path / "in.avi", frames=20, codec="mjpeg")
    corrupt_packet(path, 10)
    source = VideoSource(path, decoder="pyav")
    out = tmp_path / "out.mp4"
    report = run_engine(engine_file, source, sinks=[VideoSink(out, fps=source.fps)], **backends)
    assert len(report.skipped) == 1 and report.skipped[0].position.startswith("frame 10 ")
    assert "Invalid data" in report.skipped[0].reason
    assert report.frames_in == report.frames_out == 19 == len(decode_all(out))
    assert report.to_json()["skipped"][0]["position"].startswith("frame 10")


def test_pyav_decodes_the_same_frames_with_the_decoder_threads_asked_for(tmp_path):
    path = make_video(tmp_path / "in.mp4", frames=24)
    auto = PyAVReader(path, threads=0)  # FFmpeg's choice
    two = VideoSource(path, decoder="pyav", decode_threads=2).reader
    default = VideoSource(path, decoder="pyav").reader
    assert two._stream.codec_context.thread_count == 2 and two.info()["decoder_threads"] == 2
    assert auto.info()["decoder_threads"] == "auto" and default.info()["decoder_threads"] == DECODE_THREADS == 4
    first, second, third = list(auto), list(two), list(default)
    auto.close(), two.close(), default.close()
    assert len(first) == len(second) == len(third) == 24
    assert all(np.array_equal(a, b) and np.array_equal(a, c) for a, b, c in zip(first, second, third))
    for bad in (-1, True, 1.5):
        with pytest.raises(InputError, match=r"decoder threads=.*: give a thread count of 0 or more"):
            PyAVReader(path, threads=bad)


def test_a_file_that_is_not_a_video_is_one_clear_error(tmp_path):
    text = tmp_path / "notes.mp4"
    text.write_text("this is not a video")
    with pytest.raises(InputError, match=r"Cannot open video '.*notes.mp4'"):
        VideoSource(text)
    with pytest.raises(InputError, match=r"Video '.*missing.mp4' does not exist"):
        VideoSource(tmp_path / "missing.mp4")


def test_a_file_without_a_video_stream_says_so(tmp_path):
    path = make_audio_only(tmp_path / "sound.wav")
    with pytest.raises(InputError, match=r"has no video stream \(its streams: audio\)"):
        PyAVReader(path)


def test_nvdec_asked_for_where_it_does_not_load_is_an_error_and_auto_falls_back(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", None)  # import fails as if not installed
    path = make_video(tmp_path / "in.mp4", frames=3)
    with pytest.raises(DependencyError, match="PyNvVideoCodec is not installed"):
        open_video(path, "nvdec")
    reader, choice = open_video(path, "auto")
    assert choice.name == "pyav" and choice.reason.startswith("NVDEC not used: PyNvVideoCodec is not installed")
    assert len(list(reader)) == 3
    reader.close()
    with pytest.raises(InputError, match="Decoder 'gpu' is not known; use one of: auto, pyav, nvdec"):
        open_video(path, "gpu")


def test_nvdec_frames_come_in_order_as_host_arrays(tmp_path, monkeypatch, fake_gpu):
    # decoded into device memory and copied down by trtkit (PyNvVideoCodec's own host frames were not reliable)
    frames = [frame_picture(i) for i in range(20)]
    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", FakeNvc(frames, cuda=fake_gpu[1]))
    reader, choice = open_video(make_video(tmp_path / "in.mp4", frames=3), "auto")
    assert choice.name == "nvdec" and reader.fps == 25
    got = list(reader)
    assert len(got) == 20 and all(np.array_equal(a, b) for a, b in zip(got, frames))


def test_nvdec_that_cannot_open_the_file_falls_back_with_the_reason(tmp_path, monkeypatch, fake_gpu):
    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", FakeNvc([], fail="cuvidCreateDecoder failed", cuda=fake_gpu[1]))
    reader, choice = open_video(make_video(tmp_path / "in.mp4", frames=2), "auto")
    assert choice.name == "pyav" and "cuvidCreateDecoder failed" in choice.reason
    reader.close()


def test_nvdec_without_a_usable_cuda_falls_back_naming_the_driver(tmp_path, monkeypatch):
    # PyNvVideoCodec imports, but this machine has no GPU driver: the CUDA runtime's error is the reason
    from tests.fakes.fake_cuda import FakeCudart
    from trtkit.runtime import cuda as runtime_cuda

    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", FakeNvc([frame_picture(0)]))
    monkeypatch.setattr(runtime_cuda, "cudart", lambda: FakeCudart(no_device=True))
    reader, choice = open_video(make_video(tmp_path / "in.mp4", frames=2), "auto")
    assert choice.name == "pyav" and "cudaErrorInsufficientDriver" in choice.reason, choice.reason
    assert len(list(reader)) == 2
    reader.close()


def test_the_output_appears_only_when_closed_and_discard_leaves_nothing(tmp_path):
    out = tmp_path / "out.mp4"
    writer = VideoWriter(out, fps=25)
    for i in range(5):
        writer.write(frame_picture(i))
    assert not out.exists() and len(list(tmp_path.glob(".out.partial-*.mp4"))) == 1
    writer.close()
    assert len(decode_all(out)) == 5 and list(tmp_path.iterdir()) == [out]
    other = VideoWriter(tmp_path / "other.mp4")
    other.write(frame_picture(0))
    other.discard()
    assert list(tmp_path.iterdir()) == [out]


def test_odd_sizes_are_padded_and_a_size_change_is_refused(tmp_path):
    writer = VideoWriter(tmp_path / "odd.mp4")
    writer.write(np.zeros((31, 45, 3), np.uint8))
    with pytest.raises(InputError, match=r"Frame 1 is 64x48; the video .* is 46x32"):
        writer.write(frame_picture(1))
    writer.close()
    assert decode_all(tmp_path / "odd.mp4")[0].shape == (32, 46, 3)


def test_an_output_that_cannot_be_written_is_refused_before_any_frame(tmp_path):
    with pytest.raises(TrtkitError, match=r"folder '.*no_such_dir' does not exist"):
        VideoSink(tmp_path / "no_such_dir" / "out.mp4")
    with pytest.raises(TrtkitError, match="it is a folder"):
        VideoSink(tmp_path)


def test_an_encoder_that_ffmpeg_does_not_have_is_refused_before_any_frame(tmp_path):
    with pytest.raises(InputError, match="This FFmpeg has no encoder 'nope264'"):
        VideoWriter(tmp_path / "out.mp4", codec="nope264")
    assert list(tmp_path.iterdir()) == []
    writer = VideoWriter(tmp_path / "out.mkv", codec="mpeg4")
    writer.write(frame_picture(0))
    writer.close()
    with av.open(str(tmp_path / "out.mkv")) as container:
        assert container.streams.video[0].codec_context.name == "mpeg4"


# one encoder thread, and libx264 at a constant quantizer: no rate control whose decisions could move with the
# encoder's timing (two loaded full runs gave different bits for the same pictures, one of them with a single thread
# in both encoders)
SAME_BITS = {"libx264": {"qp": "0", "threads": "1"}, "mpeg4": {"threads": "1"}}


def _from_ndarray_video(path, pictures, codec):
    """The same pictures encoded the way VideoWriter did before it wrapped arrays (``VideoFrame.from_ndarray``)."""
    from fractions import Fraction

    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=Fraction(25))
        stream.height, stream.width = pictures[0].shape[:2]
        stream.pix_fmt = "yuv420p"
        stream.thread_count = 1  # one thread in both: the same bits every time (a full run once differed with several)
        stream.options = dict(SAME_BITS[codec])
        for picture in pictures:
            for packet in stream.encode(av.VideoFrame.from_ndarray(picture, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)


@pytest.mark.parametrize("codec", ["mpeg4", "libx264"])
def test_frames_wrapped_without_a_copy_encode_to_the_same_video_as_copied_frames(tmp_path, codec):
    try:
        av.codec.Codec(codec, "w")
    except Exception:  # noqa: BLE001 - an FFmpeg build without it
        pytest.skip(f"this FFmpeg has no {codec}")
    rng = np.random.default_rng(3)
    pictures = [rng.integers(0, 256, (48, 64, 3), dtype=np.uint8) for _ in range(6)]
    writer = VideoWriter(tmp_path / "wrapped.mp4", fps=25, codec=codec, options=SAME_BITS[codec])
    for picture in pictures:
        writer.write(picture)
    writer.close()
    _from_ndarray_video(tmp_path / "copied.mp4", pictures, codec)
    wrapped, copied = decode_all(tmp_path / "wrapped.mp4"), decode_all(tmp_path / "copied.mp4")
    assert len(wrapped) == len(copied) == 6
    for a, b in zip(wrapped, copied):
        np.testing.assert_array_equal(a, b)


def test_a_picture_array_reused_after_write_does_not_change_the_frame_written(tmp_path):
    buffer = np.empty((48, 64, 3), np.uint8)
    writer = VideoWriter(tmp_path / "reuse.mp4", fps=25, codec="mpeg4")
    for level in (0, 250, 0, 250):  # one array, overwritten after every write (a drawing stage that reuses it)
        buffer[...] = level
        writer.write(buffer)
    buffer[...] = 128
    writer.close()
    means = [float(frame.mean()) for frame in decode_all(tmp_path / "reuse.mp4")]
    assert len(means) == 4
    assert means[0] < 10 and means[1] > 240 and means[2] < 10 and means[3] > 240


def test_pyav_without_from_numpy_buffer_gets_a_copied_frame():
    from types import SimpleNamespace

    from trtkit.pipeline.video import rgb_frame

    calls = []
    old_av = SimpleNamespace(VideoFrame=SimpleNamespace(from_ndarray=lambda a, format: calls.append(format) or "f"))
    assert rgb_frame(old_av, np.zeros((2, 2, 3), np.uint8)) == "f" and calls == ["rgb24"]
    frame = rgb_frame(av, np.full((4, 6, 3), 7, np.uint8))
    assert (frame.width, frame.height, frame.format.name) == (6, 4, "rgb24")
    assert int(frame.to_ndarray().max()) == 7


def _x264_settings(path) -> str:
    """The settings line libx264 writes into its first SEI (``... sliced_threads=0 ...``)."""
    data = path.read_bytes()
    start = data.index(b"x264 - core")
    return data[start : data.index(b"\x00", start)].decode("ascii", "replace")


def test_libx264_encodes_with_frame_threads(tmp_path):
    try:
        av.codec.Codec("libx264", "w")
    except Exception:  # noqa: BLE001 - an FFmpeg build without it
        pytest.skip("this FFmpeg has no libx264")
    out = tmp_path / "out.mp4"
    writer = VideoWriter(out, fps=25, codec="libx264")
    for i in range(4):
        writer.write(frame_picture(i, 320, 240))  # x264 does not slice frames as small as 64x48
    writer.close()
    assert "sliced_threads=0" in _x264_settings(out) and len(decode_all(out)) == 4


def _keyframes(path) -> list:
    with av.open(str(path)) as container:
        return [bool(f.key_frame) for f in container.decode(video=0)]


def test_encoder_options_reach_the_encoder(tmp_path):
    out = tmp_path / "out.mp4"
    sink = VideoSink(out, fps=25, codec="libx264", options={"g": 1, "preset": "ultrafast"})
    for i in range(6):
        sink.write(type("F", (), {"image": frame_picture(i)})())
    sink.close()
    assert _keyframes(out) == [True] * 6  # g=1: a keyframe every frame (the default GOP has one in 6)


def test_an_unknown_x264_preset_is_refused_before_any_file_is_made(tmp_path):
    with pytest.raises(InputError, match="preset='fastest' is not one of libx264's: ultrafast, superfast, veryfast"):
        VideoWriter(tmp_path / "out.mp4", codec="libx264", options={"preset": "fastest"})
    with pytest.raises(InputError, match="Encoder options \\['g'\\]: give a dict of option names to values"):
        VideoWriter(tmp_path / "out.mp4", options=["g"])
    assert list(tmp_path.iterdir()) == []
