"""Video backends: PyAV (FFmpeg wheels, works everywhere) and PyNvVideoCodec (NVDEC), both imported on first use.

    reader, choice = open_video("in.mp4", decoder="auto")   # (trtkit.pipeline.sources) choice.reason: why that one
    for image in reader: ...                               # HxWx3 uint8 RGB; undecodable frames land in reader.skipped
    writer = VideoWriter("out.mp4", fps=reader.fps)        # checks the folder now; writes a hidden partial file
    writer.write(image); writer.close()                    # flushes the encoder, then renames: a playable file

``decoder="auto"`` takes NVDEC where PyNvVideoCodec imports and opens the file (its libraries and the driver's
``libnvcuvid`` load), else PyAV, and says why in ``choice.reason``.
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from trtkit._atomic import replace_files
from trtkit.errors import DependencyError, InputError, TrtkitError
from trtkit.pipeline.stats import SkippedFrame

logger = logging.getLogger("trtkit")

DECODERS = ("auto", "pyav", "nvdec")
_PYAV_HINT = "PyAV is not installed; run `pip install 'trtkit[video]'` (or `pip install av`)"
_NVDEC_HINT = "PyNvVideoCodec is not installed (`pip install PyNvVideoCodec`)"
NVDEC_BATCH = 16  # frames asked from the NVDEC decoder at a time


@dataclass(frozen=True)
class DecoderChoice:
    """Which decoder reads a video, and why that one."""

    name: str
    reason: str

    def to_json(self) -> dict:
        return {"name": self.name, "reason": self.reason}


def pyav():
    """The ``av`` module (PyAV).

    Raises:
        DependencyError: PyAV is not installed.
    """
    try:
        import av
    except ImportError as exc:
        raise DependencyError(f"{_PYAV_HINT} (import failed: {exc})") from exc
    return av


DECODE_THREADS = 4  # PyAV's decoder threads by default (FFmpeg's own choice is a thread per core and one more)


class PyAVReader:
    """Frames of a video file decoded by PyAV on the CPU (FFmpeg's own threads), as HxWx3 uint8 RGB arrays.

    A packet that does not decode is skipped and recorded in :attr:`skipped`; decoding goes on with the next one.
    ``threads``: FFmpeg's decoder threads (default :data:`DECODE_THREADS`; 0: FFmpeg chooses, a thread per core and
    one more).

    Raises:
        InputError: the file cannot be opened, has no video stream, or ``threads`` is not a count of 0 or more.
    """

    name = "pyav"

    def __init__(self, path, threads: int | None = None, format=None, options=None, timeout=None, what="video"):
        av = pyav()
        threads = DECODE_THREADS if threads is None else threads
        self.path = path if what != "video" else Path(path)  # a URL or camera keeps its text
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
            raise InputError(f"decoder threads={threads!r}: give a thread count of 0 or more (0: FFmpeg chooses)")
        self.threads = threads
        try:
            self._container = av.open(str(path), format=format, options=options, timeout=timeout)
        except (av.error.FFmpegError, OSError, ValueError) as exc:
            raise InputError(f"Cannot open {what} '{path}': {exc}") from exc
        streams = self._container.streams
        if not streams.video or streams.video[0].codec_context is None:
            kinds, video = sorted({s.type for s in streams}) or ["none"], bool(streams.video)
            self._container.close()
            if video:
                raise InputError(f"'{path}' has a video codec this FFmpeg cannot decode; give H.264, HEVC, VP9, AV1...")
            raise InputError(f"'{path}' has no video stream (its streams: {', '.join(kinds)}); give a video {what}")
        self._stream = streams.video[0]
        self._stream.thread_type = "AUTO" if what == "video" else "SLICE"  # frame threads hold frames back
        self._stream.thread_count = threads
        self.skipped: list = []
        self.fps = self._stream.average_rate or self._stream.guessed_rate or Fraction(30)
        self.width, self.height = self._stream.codec_context.width, self._stream.codec_context.height
        self.frames = int(self._stream.frames or 0)

    def info(self) -> dict:
        return {
            "path": str(self.path),
            "decoder": self.name,
            "codec": self._stream.codec_context.name,
            "width": self.width,
            "height": self.height,
            "fps": float(self.fps),
            "frames": self.frames,
            "decoder_threads": self.threads or "auto",
        }

    def __iter__(self):
        return (frame.to_ndarray(format="rgb24") for frame in self.decoded())

    def decoded(self):
        """PyAV's frames, packets that do not decode skipped (:attr:`skipped`)."""
        av = pyav()
        decoded = 0
        for packet in self._container.demux(self._stream):
            try:
                frames = packet.decode()
            except av.error.FFmpegError as exc:
                position = f"frame {decoded + len(self.skipped)} (pts {packet.pts})"
                self.skipped.append(SkippedFrame(position, str(exc)))
                logger.warning("%s: skipped undecodable %s: %s", self.path, position, exc)
                continue
            decoded += len(frames)
            yield from frames

    def close(self) -> None:
        self._container.close()


def nvdec_module():
    """PyNvVideoCodec, imported on first use.

    Raises:
        DependencyError: it is not installed or its libraries do not load.
    """
    try:
        import PyNvVideoCodec
    except Exception as exc:  # noqa: BLE001 - ImportError, or OSError from a library that does not load
        raise DependencyError(f"{_NVDEC_HINT}; import failed: {exc}") from exc
    return PyNvVideoCodec


class NvdecReader:
    """Frames decoded on the GPU by NVDEC (PyNvVideoCodec's ``SimpleDecoder``), converted to interleaved RGB.

    The decoder always decodes into device memory, on the stream of a
    :class:`~trtkit.pipeline.device_frames.DeviceFrames`, which copies every frame at once into memory trtkit owns
    (the decoder reuses its own surfaces, and PyNvVideoCodec's host-memory frames can hold other frames' pixels by
    the time they are read). Where a decoder does not take that stream, each batch's copies wait for the whole GPU
    (``info()["frames_ready_by"]`` says which).

    Args:
        path: the video file (a seekable container: MP4, MKV, AVI, MOV).
        device_memory: yield the device copies (``__cuda_array_interface__``) for a preprocessing on the GPU; else
            numpy arrays, copied down from them.
        gpu_id: the GPU that decodes.
        cuda: the :class:`~trtkit.runtime.cuda.Cuda` of those copies (default: the CUDA runtime's).
    """

    name = "nvdec"

    def __init__(self, path, *, device_memory: bool = False, gpu_id: int = 0, cuda=None):
        nvc = nvdec_module()
        self.path = Path(path)
        self.device_memory = device_memory
        self._owned: Any = None  # DeviceFrames: the device copies, and the stream the decoder works on
        self.frames_ready_by: str | None = None  # "stream" (the copies' own) or "device" (a wait for the whole GPU)
        options = dict(gpu_id=gpu_id, use_device_memory=True, output_color_type=nvc.OutputColorType.RGB)
        try:
            from trtkit.pipeline.device_frames import DeviceFrames
            from trtkit.runtime.cuda import Cuda

            self._owned = DeviceFrames(cuda if cuda is not None else Cuda())
            self._decoder = self._open(nvc, options)
            meta = self._decoder.get_stream_metadata()
        except Exception as exc:  # noqa: BLE001 - the library raises plain exceptions for every failure
            self.close()
            raise DependencyError(f"NVDEC could not open '{path}': {exc}") from exc
        self.skipped: list = []
        self.width, self.height = int(getattr(meta, "width", 0)), int(getattr(meta, "height", 0))
        self.fps = Fraction(float(getattr(meta, "average_fps", 0) or 30)).limit_denominator(1001)
        self.frames = int(getattr(meta, "num_frames", 0) or 0)

    def _open(self, nvc, options: dict):
        """The decoder, working on the copies' stream where it takes it: PyNvVideoCodec converts each frame to RGB
        in a kernel on the decoder's stream, and on that stream each copy follows its frame's kernel whatever the
        frame's ``__cuda_array_interface__`` says (PyNvVideoCodec 2.2's say stream 0)."""
        try:
            decoder = nvc.SimpleDecoder(str(self.path), cuda_stream=int(self._owned.stream), **options)
            self.frames_ready_by = "stream"
            return decoder
        except Exception:  # noqa: BLE001 - one that does not take this stream: each batch waits for the GPU instead
            logger.debug("NVDEC did not take trtkit's stream; each batch waits for the whole GPU", exc_info=True)
        decoder = nvc.SimpleDecoder(str(self.path), **options)
        self._owned.wait_for_device = True
        self.frames_ready_by = "device"
        return decoder

    def info(self) -> dict:
        return {
            "path": str(self.path),
            "decoder": self.name,
            "width": self.width,
            "height": self.height,
            "fps": float(self.fps),
            "frames": self.frames,
            "device_memory": self.device_memory,
            "frames_ready_by": self.frames_ready_by,
        }

    def __iter__(self):
        return self.read()

    def read(self, start: int = 0, count: int | None = None):
        """Frames ``start`` to ``start + count`` (to the end with ``count=None``), seeking first if ``start`` is not
        0 (the decoder decodes from the keyframe before it)."""
        if start:
            self._decoder.seek_to_index(int(start))
        left = count
        while left is None or left > 0:
            batch = self._decoder.get_batch_frames(NVDEC_BATCH if left is None else min(NVDEC_BATCH, left))
            if not batch:
                return
            owned = self._own(batch)
            yield from (owned if self.device_memory else self._owned.download(owned))
            if left is not None:
                left -= len(batch)

    def _own(self, batch: list) -> list:
        if self._owned is None:
            raise InputError(f"The NVDEC reader of '{self.path}' was closed")
        return self._owned.own(batch)

    def close(self) -> None:
        stop = getattr(getattr(self, "_decoder", None), "stop", None)
        if stop is not None:
            stop()
        if self._owned is not None:
            self._owned.close()
            self._owned = None


def even_frame(image: np.ndarray) -> np.ndarray:
    """Pad an odd height or width by repeating the last row/column (4:2:0 encoders need even sizes)."""
    pad_h, pad_w = image.shape[0] % 2, image.shape[1] % 2
    if not (pad_h or pad_w):
        return image
    return np.pad(image, ((0, pad_h), (0, pad_w), (0, 0)), mode="edge")


def default_codec(path) -> str:
    """H.264 (libx264) for MP4/MOV/MKV where FFmpeg has it, MPEG-4 part 2 otherwise."""
    av = pyav()
    if Path(path).suffix.lower() in (".mp4", ".mov", ".mkv", ".m4v"):
        try:
            av.codec.Codec("libx264", "w")
            return "libx264"
        except Exception:  # noqa: BLE001 - FFmpeg built without x264
            logger.debug("libx264 is not in this FFmpeg; encoding MPEG-4 part 2", exc_info=True)
    return "mpeg4"


X264_PRESETS = ("ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow")


def encoder_options(codec: str, options: dict | None) -> dict:
    """``options`` as FFmpeg takes them (text keys and values); libx264/libx265's ``preset`` checked by name (FFmpeg
    would only fail at the first frame).

    Raises:
        InputError: ``options`` is not a mapping of names to values, or a preset x264 does not have.
    """
    if options is None:
        return {}
    if not isinstance(options, dict) or not all(isinstance(k, str) and k for k in options):
        raise InputError(f"Encoder options {options!r}: give a dict of option names to values, e.g. {{'crf': '23'}}")
    text = {k: str(v) for k, v in options.items()}
    preset = text.get("preset")
    if codec in ("libx264", "libx265") and preset is not None and preset not in X264_PRESETS + ("placebo",):
        raise InputError(f"Encoder option preset='{preset}' is not one of {codec}'s: {', '.join(X264_PRESETS)}")
    return text


def check_encoder(codec: str) -> None:
    """Raises InputError if this FFmpeg has no encoder ``codec``."""
    av = pyav()
    try:
        av.codec.Codec(codec, "w")
    except Exception as exc:  # noqa: BLE001 - PyAV raises UnknownCodecError (a ValueError) or FFmpeg errors
        raise InputError(f"This FFmpeg has no encoder '{codec}' ({exc}); use e.g. libx264 or mpeg4") from exc


def rgb_frame(av, image: np.ndarray):
    """A PyAV ``rgb24`` frame over ``image`` (HxWx3 uint8, C-contiguous) without copying it (``from_numpy_buffer``):
    ``from_ndarray``, used where PyAV lacks it, copies the picture holding the GIL, which a pipeline's other threads
    then wait for."""
    wrap = getattr(av.VideoFrame, "from_numpy_buffer", None)
    if wrap is None:
        return av.VideoFrame.from_ndarray(image, format="rgb24")
    return wrap(image, format="rgb24")


OUTPUT_FORMATS = {"rtmp": "flv", "rtmps": "flv", "rtsp": "rtsp", "udp": "mpegts", "tcp": "mpegts", "srt": "mpegts"}


def stream_output(path) -> str | None:
    """The FFmpeg muxer of an output that is written as it goes: ``flv`` for RTMP, ``rtsp``, ``mpegts`` for UDP, TCP
    and SRT, ``hls`` for a ``.m3u8`` playlist (its segments beside it); None for a file."""
    text = str(path)
    return "hls" if text.lower().endswith(".m3u8") else OUTPUT_FORMATS.get(text.partition("://")[0].lower())


class VideoWriter:
    """A video file written frame by frame with PyAV, atomically: frames go to a hidden partial file in the target
    folder, which :meth:`close` flushes, finalizes and renames; :meth:`discard` removes it.

    Args:
        path, fps: the output file and its frame rate.
        codec: the FFmpeg encoder (None: :func:`default_codec`). It runs on frame threads where it has them, as
            the ``ffmpeg`` command does (libx264 then encodes several frames at once), as many as it chooses.
        options: the encoder's FFmpeg options, e.g. ``{"preset": "veryfast", "crf": "23"}`` (libx264's preset
            trades file size for encoding speed; ``medium`` is its default; see :func:`encoder_options`).

    Raises (on creation, before any frame):
        TrtkitError: the folder does not exist or is not writable, or the path is a folder.
        InputError: ``options`` are not encoder options (see :func:`encoder_options`).
    """

    def __init__(self, path, fps=30, codec: str | None = None, options: dict | None = None):
        from trtkit._atomic import check_writable

        av = pyav()
        self.stream_format = stream_output(path)  # a URL or HLS playlist: written as it goes, no partial file
        self.path = path if self.stream_format and "://" in str(path) else Path(path)
        self.codec = codec or ("libx264" if self.stream_format else default_codec(self.path))
        live = {"tune": "zerolatency", "preset": "veryfast", "g": str(2 * round(fps))} if self.stream_format else {}
        self.options = encoder_options(self.codec, {**live, **(options or {})} if live else options)
        self._tmp: Path | None = None
        self.fps = Fraction(fps).limit_denominator(1001) if not isinstance(fps, Fraction) else fps
        self._stream: Any = None  # added with the first frame, whose size it takes
        self.frames = self._pts = 0
        if self.stream_format:
            if "://" not in str(path):
                check_writable(self.path)
            check_encoder(self.codec)
            self._container = av.open(str(path), "w", format=self.stream_format)
            return
        check_writable(self.path)
        folder = self.path.parent if str(self.path.parent) else Path(".")
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.stem[:64]}.partial-", suffix=self.path.suffix, dir=folder)
        except OSError as exc:
            raise TrtkitError(f"Cannot write '{self.path}': {exc.strerror or exc}") from exc
        os.close(fd)
        self._tmp = Path(tmp)
        try:
            check_encoder(self.codec)
        except InputError:
            self._tmp.unlink(missing_ok=True)
            raise
        try:
            self._container = av.open(str(self._tmp), "w")
        except (av.error.FFmpegError, ValueError) as exc:
            self._tmp.unlink(missing_ok=True)
            raise TrtkitError(f"Cannot write video '{self.path}': {exc} (use .mp4, .mkv, .mov or .avi)") from exc

    def write(self, image: np.ndarray, pts: float | None = None) -> None:
        """Encode ``image``, shown ``pts`` seconds from the start (None: one frame after the last)."""
        av = pyav()
        image = even_frame(np.ascontiguousarray(image, dtype=np.uint8))
        if self._stream is None:
            self._stream = self._container.add_stream(self.codec, rate=self.fps)
            self._stream.height, self._stream.width = image.shape[:2]
            self._stream.pix_fmt = "yuv420p"
            self._stream.thread_type = "AUTO"  # frame threads where the encoder has them (PyAV's default: slices)
            self._stream.thread_count = 0  # the encoder chooses
            if self.options:
                self._stream.options = dict(self.options)
        elif (image.shape[0], image.shape[1]) != (self._stream.height, self._stream.width):
            raise InputError(
                f"Frame {self.frames} is {image.shape[1]}x{image.shape[0]}; the video '{self.path}' "
                f"is {self._stream.width}x{self._stream.height}: every frame must have the same size"
            )
        frame = rgb_frame(av, image)
        seq = self.frames if pts is None else round(pts * self.fps)  # in the stream's 1/fps time base
        frame.pts = self._pts = max(self._pts + 1, seq) if self.frames else seq
        for packet in self._stream.encode(frame):
            self._container.mux(packet)
        self.frames += 1

    def close(self) -> Path:
        """Flush the encoder, close the file and move it to its name (a file with no frame is not kept)."""
        if self._container is None:
            return self.path
        try:
            if self._stream is not None:
                for packet in self._stream.encode(None):
                    self._container.mux(packet)
            self._container.close()
        except BaseException:
            self.discard()
            raise
        self._container = None
        if self._tmp is None:
            return self.path
        if not self.frames:
            self._tmp.unlink(missing_ok=True)
            return self.path
        replace_files({self._tmp: self.path})  # with the mode open() would give it
        return self.path

    def discard(self) -> None:
        """Close without keeping anything (a stream or playlist is closed as it is: what was sent stays sent)."""
        if self._container is not None:
            try:
                self._container.close()
            except Exception:  # noqa: BLE001 - the file is removed anyway
                logger.debug("closing a discarded video failed", exc_info=True)
            self._container = None
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)
