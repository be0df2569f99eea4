"""Live sources: network streams and V4L2 cameras (and video files read at their frame rate), through PyAV (FFmpeg).

    source = LiveSource("rtsp://camera/stream", drop="oldest", reconnect=3)
    report = run_engine("model.engine", source, sinks=[VideoSink("rtmp://server/live/out", fps=source.fps)])
    source.dropped, source.reconnects, source.ended      # also in report.source

A thread reads the stream as it arrives, paced by its timestamps, into a buffer of ``buffer`` frames. When the
pipeline falls behind and the buffer is full, ``drop`` decides: ``oldest`` (the frame that waited longest goes),
``newest`` (the arriving frame goes) or ``none`` (reading waits: nothing is lost, latency grows). A stream that is
lost is opened again up to ``reconnect`` times in a row, waiting 0.5 s, 1 s, 2 s... in between; a stream that
cannot be had back ends the source, :attr:`LiveSource.ended` saying why. Every frame carries its time from the
stream's start (its timestamps; continued across reconnections) and the moment it arrived. With
``options={"listen": "1"}``, trtkit is the server an RTMP or TCP publisher (OBS, ``ffmpeg -f flv rtmp://...``) joins.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque

from trtkit.errors import InputError
from trtkit.pipeline.stats import StageTimer
from trtkit.pipeline.video import DecoderChoice, PyAVReader, pyav

SCHEMES = ("rtsp", "rtsps", "rtmp", "rtmps", "http", "https", "udp", "tcp", "srt", "rtp")
DROP = ("oldest", "newest", "none")
LISTEN = ("rtmp", "tcp")  # the schemes a source can listen on (FFmpeg's ``listen`` option)
BACKOFF_S, MAX_BACKOFF_S = 0.5, 8.0


def is_stream(path) -> bool:
    """Whether ``path`` is a network stream's URL or a V4L2 camera (``/dev/videoN``) rather than a file."""
    text = str(path)
    return text.partition("://")[0].lower() in SCHEMES and "://" in text or text.startswith("/dev/video")


def input_options(path) -> tuple:
    """``(format, options)`` FFmpeg opens ``path`` with: low delay, RTSP over TCP, V4L2 for cameras."""
    text = str(path)
    if text.startswith("/dev/video"):
        return "v4l2", {}
    options = {"flags": "low_delay"}
    if text.lower().startswith("rtsp"):
        options["rtsp_transport"] = "tcp"
    return None, options


class LiveSource:
    """The frames of a network stream, camera or (``realtime``) video file as they arrive (see the module).

    Args:
        path: a URL (``rtsp://``, ``rtmp://``, ``http(s)://`` incl. HLS, ``udp://``, ``tcp://``, ``srt://``), a
            camera (``/dev/video0``) or a video file (read at its frame rate: a stream's stand-in).
        drop: ``oldest``, ``newest`` or ``none`` (what a full buffer does).
        reconnect: how many times in a row a lost stream is opened again (files end at their end).
        buffer: frames held for the pipeline.
        options: FFmpeg options for opening, over :func:`input_options`'; ``{"listen": "1"}``: wait on an ``rtmp://``
            or ``tcp://`` URL's address for a publisher, and again after one leaves (``reconnect`` times).
        timeout_s: how long opening (listening: the wait for the publisher), and each read, may wait.
        threads: PyAV's decoder threads (see :class:`~trtkit.pipeline.video.PyAVReader`).

    Raises (on creation):
        InputError: the stream cannot be opened (unreachable, refused, no video, a codec FFmpeg cannot decode), the
            camera does not exist, no publisher connected in time, or ``drop``/``reconnect`` is not one trtkit knows.
    """

    name = "decode"

    def __init__(self, path, *, drop="oldest", reconnect=3, buffer=8, options=None, timeout_s=10.0, threads=None):
        self.listen = (options or {}).get("listen") in ("1", 1, True)
        if self.listen and str(path).partition("://")[0].lower() not in LISTEN:
            raise InputError(f"Cannot listen on '{path}': trtkit listens on rtmp:// and tcp:// URLs")
        if drop not in DROP:
            raise InputError(f"drop='{drop}' is not known; use one of: {', '.join(DROP)}")
        if isinstance(reconnect, bool) or not isinstance(reconnect, int) or reconnect < 0:
            raise InputError(f"reconnect={reconnect!r}: give how many times to open a lost stream again, 0 or more")
        self.path, self.drop, self.reconnect, self.buffer = str(path), drop, reconnect, max(1, int(buffer))
        self.live = is_stream(path)
        self.kind = "camera" if self.path.startswith("/dev/video") else "stream" if self.live else "video"
        self._args = (threads, *input_options(path), options, timeout_s)
        self.reader = self._open()
        self.fps, self.skipped = self.reader.fps, self.reader.skipped
        self.decoder = DecoderChoice("pyav", "live sources decode with PyAV")
        self.timer = StageTimer(self.name)  # decoding time only, not the wait for frames
        self.dropped = self.reconnects = 0
        self.ended: str | None = None  # why a stream stopped for good
        self._frames: deque = deque()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._done = False
        self._thread: threading.Thread | None = None

    def _open(self) -> PyAVReader:
        threads, fmt, options, extra, timeout = self._args
        if self.kind == "camera" and not os.path.exists(self.path):
            raise InputError(f"Camera '{self.path}' does not exist; give an existing /dev/videoN")
        options = {**options, **(extra or {})} if self.live else extra
        try:
            return PyAVReader(self.path, threads, fmt, options, timeout if self.live else None, self.kind)
        except InputError as exc:
            if self.listen and isinstance(exc.__cause__, pyav().error.ExitError):  # the wait ran out
                raise InputError(f"No publisher connected to '{self.path}' within {timeout:g} s") from exc
            raise

    def info(self) -> dict:
        return {
            "kind": self.kind,
            **self.reader.info(),
            "decoder_reason": self.decoder.reason,
            "drop": self.drop,
            "dropped": self.dropped,
            "reconnects": self.reconnects,
            "ended": self.ended,
        }

    def __iter__(self):
        """``(name, image, seconds from the start, arrival time)`` of each frame; None while none is waiting (a
        pipeline checks for a drain meanwhile)."""
        from trtkit.pipeline.threads import native_name, os_thread

        self._thread = threading.Thread(target=os_thread(self._read, native_name(0, self.name)), daemon=True)
        self._thread.start()
        while True:
            with self._cond:
                if not self._frames and not self._done:
                    self._cond.wait(0.1)
                if not self._frames and self._done:
                    return
                item = self._frames.popleft() if self._frames else None
                self._cond.notify_all()
            yield item

    def _read(self) -> None:
        """The reading thread: decode, pace, buffer; reconnect where the stream is lost."""
        av = pyav()
        offset, index, last, reader = 0.0, 0, None, self.reader
        try:
            while reader is not None and not self._stop.is_set():
                first = t0 = None  # this connection's first timestamp, and when it was due
                reason = "the stream ended"
                try:
                    for frame in reader.decoded():
                        t = time.perf_counter()
                        image = frame.to_ndarray(format="rgb24")
                        self.timer.add(time.perf_counter() - t)
                        seconds = float(frame.time) if frame.time is not None else index / float(self.fps)
                        first = seconds if first is None else first
                        last = offset + seconds - first
                        t0 = time.perf_counter() - (seconds - first) if t0 is None else t0
                        wait = t0 + seconds - first - time.perf_counter()  # paced; a late frame goes at once
                        if self._stop.wait(wait) if wait > 0 else self._stop.is_set():
                            return
                        self._put((f"frame {index}", image, last, time.perf_counter()))
                        index += 1
                except (av.error.FFmpegError, OSError, EOFError) as exc:  # a lost connection, a read timeout
                    reason = str(exc)
                offset = offset if last is None else last + 1.0 / float(self.fps)
                reader = self._reopen(reason) if self.live else None
        except Exception as exc:  # noqa: BLE001 - reported as the stream's end
            self.ended = f"Reading '{self.path}' failed: {type(exc).__name__}: {exc}"
        finally:
            with self._cond:
                self._done = True
                self._cond.notify_all()

    def _put(self, item) -> None:
        with self._cond:
            while self.drop == "none" and len(self._frames) >= self.buffer and not self._stop.is_set():
                self._cond.wait(0.1)
            if len(self._frames) >= self.buffer:
                self.dropped += 1
                if self.drop == "newest":
                    return
                self._frames.popleft()
            self._frames.append(item)
            self._cond.notify_all()

    def _reopen(self, reason: str):
        """The stream opened again, or None (:attr:`ended` says why) after ``reconnect`` tries."""
        self.reader.close()
        for attempt in range(self.reconnect):
            if self._stop.wait(min(BACKOFF_S * 2**attempt, MAX_BACKOFF_S)):
                return None
            try:
                self.reader = self._open()
            except InputError as exc:
                reason = str(exc)
                continue
            self.reconnects += 1
            self.reader.skipped = self.skipped
            return self.reader
        tried = f" (opened again {self.reconnect} time(s) in vain)" if self.reconnect else ""
        self.ended = f"Stream '{self.path}' ended: {reason}{tried}"
        return None

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(float(self._args[-1] or 10.0) + 1.0)
        if self._thread is None or not self._thread.is_alive():
            self.reader.close()
