"""One video over several NVDEC decoders at once, frames still in order.

One PyNvVideoCodec decoder keeps one of the GPU's NVDEC engines busy at a time, and a GPU has several.
:class:`SplitNvdecReader` cuts the file at keyframes into chunks of whole GOPs, gives the chunks to ``decoders``
:class:`~trtkit.pipeline.video.NvdecReader` s in turn, each on a thread of its own, and yields the frames in their
order:

    reader = SplitNvdecReader("in.mp4", decoders=2, device_memory=True)
    for frame in reader: ...          # frame 0, 1, 2, ... whichever decoder decoded it

Each decoder runs ahead of the reader by at most ``ahead`` frames (a bounded queue, ``ahead x width x height x 3``
bytes per decoder), and gains on the others only while its chunk fits there: ``ahead`` should be about a chunk.
Keyframes come from PyAV's demuxer (packets only, nothing decoded).
"""

from __future__ import annotations

import queue
import threading
from pathlib import Path

from trtkit.errors import InputError, PipelineError

CHUNK_FRAMES = 120  # chunks are whole GOPs of at least this many frames (the last one may be shorter)
AHEAD_FRAMES = 256  # frames each decoder may have decoded before the reader takes them
_END = object()


def keyframe_indices(path) -> tuple[list, int]:
    """``(presentation indices of the keyframes, frame count)`` of the first video stream, from its packets."""
    from trtkit.pipeline.video import pyav

    av = pyav()
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        stamps, keys = [], []
        for packet in container.demux(stream):
            if packet.pts is None:  # the demuxer's flush packet
                continue
            stamps.append(packet.pts)
            if packet.is_keyframe:
                keys.append(packet.pts)
    rank = {pts: i for i, pts in enumerate(sorted(stamps))}
    return sorted(rank[k] for k in keys), len(stamps)


def gop_chunks(keyframes: list, total: int, min_frames: int = CHUNK_FRAMES) -> list:
    """``[(start, end), ...]`` covering frames ``0 .. total``: each chunk starts at a keyframe (or frame 0) and
    spans whole GOPs, at least ``min_frames`` of them except the last."""
    chunks, start = [], 0
    for key in sorted(k for k in keyframes if 0 < k < total):
        if key - start >= min_frames:
            chunks.append((start, key))
            start = key
    if total > start:
        chunks.append((start, total))
    return chunks


class SplitNvdecReader:
    """The frames of ``path`` decoded by ``decoders`` NVDEC decoders at once, in order (see the module).

    Args:
        path: the video file.
        decoders: decoders at once (1 or more; one chunk, a file with a single GOP, uses one).
        device_memory, gpu_id, cuda: as :class:`~trtkit.pipeline.video.NvdecReader`.
        ahead: frames each decoder may decode before the reader takes them.
        chunk_frames: the shortest chunk (whole GOPs; default :data:`CHUNK_FRAMES`).

    Raises:
        InputError: ``decoders`` or ``ahead`` below 1.
        DependencyError: NVDEC does not open the file.
    """

    name = "nvdec"

    def __init__(
        self,
        path,
        *,
        decoders: int = 2,
        device_memory: bool = False,
        gpu_id: int = 0,
        cuda=None,
        ahead: int = AHEAD_FRAMES,
        chunk_frames: int | None = None,
    ):
        from trtkit.pipeline.video import NvdecReader

        chunk_frames = CHUNK_FRAMES if chunk_frames is None else chunk_frames
        for label, value in (("decoders", decoders), ("ahead", ahead), ("chunk_frames", chunk_frames)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"{label}={value!r}: give 1 or more")
        self.path = Path(path)
        keyframes, total = keyframe_indices(path)
        self.chunks = gop_chunks(keyframes, total, chunk_frames)
        self.device_memory, self.ahead = device_memory, ahead
        self._readers: list = []
        try:
            for _ in range(max(1, min(decoders, len(self.chunks)))):
                self._readers.append(NvdecReader(path, device_memory=device_memory, gpu_id=gpu_id, cuda=cuda))
        except BaseException:
            self.close()
            raise
        first = self._readers[0]
        self.width, self.height, self.fps = first.width, first.height, first.fps
        self.frames = total
        self.skipped: list = []
        self.frames_ready_by = first.frames_ready_by
        self._info = {**first.info(), "frames": total, "decoders": len(self._readers), "chunks": len(self.chunks)}
        self._stop = threading.Event()
        self._threads: list = []

    def info(self) -> dict:
        return dict(self._info)

    def __iter__(self):
        if self._threads:
            raise InputError(f"'{self.path}' is being read already; open another reader to read it again")
        count = len(self._readers)
        queues = [queue.Queue(maxsize=self.ahead) for _ in range(count)]
        self._threads = [
            threading.Thread(target=self._decode, args=(k, queues[k]), name=f"nvdec-{k}", daemon=True)
            for k in range(count)
        ]
        for thread in self._threads:
            thread.start()
        try:
            for index in range(len(self.chunks)):
                source = queues[index % count]
                while True:
                    item = source.get()
                    if item is _END:
                        break
                    if isinstance(item, BaseException):
                        start, end = self.chunks[index]
                        raise PipelineError(
                            f"NVDEC decoder {index % count} failed in frames {start}-{end - 1} of '{self.path}': {item}"
                        ) from item
                    yield item
        finally:
            self._halt()

    def _decode(self, k: int, out: queue.Queue) -> None:
        reader = self._readers[k]
        try:
            for start, end in self.chunks[k :: len(self._readers)]:
                for frame in reader.read(start, end - start):
                    if not self._put(out, frame):
                        return
                if not self._put(out, _END):
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the reader, which raises it naming the chunk
            self._put(out, exc)

    def _put(self, out: queue.Queue, item) -> bool:
        while not self._stop.is_set():
            try:
                out.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _halt(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def close(self) -> None:
        if getattr(self, "_stop", None) is not None:
            self._halt()
        for reader in self._readers:
            reader.close()
        self._readers = []
