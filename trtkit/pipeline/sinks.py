"""Where frames go. A sink has ``name`` (its stage's name in the statistics), ``write(frame)``, ``close()`` (the
run ended or was drained: finish the output) and ``discard()`` (a stage failed: leave nothing half-written).

Every sink checks its output path when it is created, before the first frame is read. A sink with
``needs_images = False`` (:class:`JsonLinesSink`) does not read ``frame.image``: with frames in device memory and no
other sink or drawing that does, the pictures are never copied to the host.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from pathlib import Path

import numpy as np

from trtkit._atomic import replace_files
from trtkit.errors import InputError, TrtkitError


class CallbackSink:
    """Calls ``fn(frame)`` for every frame, in order."""

    name = "sink"

    def __init__(self, fn):
        self.fn = fn

    def write(self, frame) -> None:
        self.fn(frame)

    def close(self) -> None:
        pass

    def discard(self) -> None:
        pass


class VideoSink:
    """Frames (their ``image``, as drawn by an annotate stage if there is one) encoded into a video file with PyAV;
    the file appears under its name only once it is complete (see :class:`~trtkit.pipeline.video.VideoWriter`).

    Args:
        path, fps, codec: the output file, its frame rate and encoder (None: H.264 where FFmpeg has it).
        options: the encoder's FFmpeg options, e.g. ``{"preset": "veryfast"}`` (see
            :class:`~trtkit.pipeline.video.VideoWriter`).
    """

    name = "encode"

    def __init__(self, path, fps=30, codec: str | None = None, options: dict | None = None):
        from trtkit.pipeline.video import VideoWriter

        self.writer = VideoWriter(path, fps=fps, codec=codec, options=options)

    def write(self, frame) -> None:
        self.writer.write(frame.image, getattr(frame, "pts", None))

    def close(self) -> None:
        self.writer.close()

    def discard(self) -> None:
        self.writer.discard()


class ImageFolderSink:
    """Each frame's ``image`` saved as a PNG in ``folder`` (created if missing), named after the frame's source
    file (images; ``sub/a.jpg`` becomes ``sub_a.png``) or its index (videos: ``000042.png``), each written
    atomically."""

    name = "write"

    def __init__(self, folder):
        from trtkit._atomic import check_writable

        self.folder = Path(folder)
        if self.folder.exists() and not self.folder.is_dir():
            raise InputError(f"Output folder '{self.folder}' is a file; give a folder")
        if not self.folder.exists():
            check_writable(self.folder)  # its parent must exist and be writable
            self.folder.mkdir()
        elif not os.access(self.folder, os.W_OK):
            raise TrtkitError(f"Cannot write into '{self.folder}': the folder is not writable")

    def write(self, frame) -> None:
        from PIL import Image

        from trtkit._atomic import write_bytes_atomic

        name = Path(frame.name)
        stem = name.with_suffix("").as_posix().replace("/", "_") if name.suffix else f"{frame.index:06d}"
        buf = io.BytesIO()
        Image.fromarray(np.asarray(frame.image, dtype=np.uint8)).save(buf, format="PNG")
        write_bytes_atomic(self.folder / f"{stem}.png", buf.getvalue())

    def close(self) -> None:
        pass

    def discard(self) -> None:
        pass


def _plain(value):
    """numpy arrays and scalars, tuples, dataclasses and objects with ``to_json`` → JSON-ready values."""
    import dataclasses

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "to_json"):
        return _plain(value.to_json())
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


class JsonLinesSink:
    """One JSON line per frame: ``{"index", "name", "result"}``, ``result`` being the postprocessed result, or the
    raw outputs (name → nested lists) where there is no postprocessing. Written to a hidden partial file that
    :meth:`close` renames."""

    name = "write"
    needs_images = False  # it writes results: a GPU preprocessing need not bring pictures to the host for it

    def __init__(self, path):
        from trtkit._atomic import check_writable

        self.path = Path(path)
        check_writable(self.path)
        folder = self.path.parent if str(self.path.parent) else Path(".")
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name[:64]}.partial-", dir=folder)
        self._tmp = Path(tmp)
        self._file = os.fdopen(fd, "w", encoding="utf-8")

    def write(self, frame) -> None:
        result = frame.result if frame.result is not None else frame.outputs
        self._file.write(json.dumps({"index": frame.index, "name": frame.name, "result": _plain(result)}) + "\n")

    def close(self) -> None:
        if self._file is None:
            return
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        self._file = None
        replace_files({self._tmp: self.path})  # with the mode open() would give it

    def discard(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._tmp.unlink(missing_ok=True)
