"""Where frames come from. A source is an iterable of ``(name, image)`` (image: HxWx3 uint8 RGB) with

- ``skipped``: a list of :class:`~trtkit.pipeline.stats.SkippedFrame` it could not decode,
- ``info()``: a dict describing it (shown in the report),
- ``close()``: release files and decoders.

:class:`ImageFolderSource` decodes with several threads, :class:`VideoSource` with PyAV or NVDEC
(:mod:`trtkit.pipeline.video`), :class:`ArraySource` takes any iterable of arrays.
"""

from __future__ import annotations

import logging
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from trtkit.errors import DependencyError, InputError
from trtkit.pipeline.stats import SkippedFrame

logger = logging.getLogger("trtkit")


class ArraySource:
    """Frames from any iterable of HxWx3 uint8 arrays (a list, a generator, frames decoded elsewhere)."""

    name = "read"

    def __init__(self, arrays):
        self._arrays = arrays
        self.skipped: list = []

    def info(self) -> dict:
        return {"kind": "arrays"}

    def __iter__(self):
        for i, array in enumerate(self._arrays):
            yield f"frame {i}", array

    def close(self) -> None:
        pass


def list_images(folder) -> list:
    """The image files under ``folder`` (recursively), sorted by path.

    Raises:
        InputError: the folder does not exist, or holds no image file (names what it holds).
    """
    from calibrators.sources import IMAGE_EXTENSIONS, list_files

    return list_files(Path(folder), IMAGE_EXTENSIONS, "image", error=InputError, missing="Image folder")


def read_image(path) -> np.ndarray:
    """One image file as HxWx3 uint8 RGB (pillow). Raises ``OSError``/``ValueError`` for files that do not decode."""
    from PIL import Image

    with Image.open(path) as img:
        return np.asarray(img.convert("RGB"))


class ImageFolderSource:
    """The images of a folder, decoded by ``workers`` threads (pillow releases the GIL while decoding) and
    delivered in sorted order; at most ``2 * workers`` are decoded ahead. Files that do not decode are skipped and
    listed in :attr:`skipped`.

    Raises (on creation):
        InputError: see :func:`list_images`.
    """

    name = "decode"

    def __init__(self, folder, workers: int = 4):
        self.folder = Path(folder)
        self.files = list_images(self.folder)
        self.workers = max(1, int(workers))
        self.skipped: list = []

    def info(self) -> dict:
        return {"kind": "images", "path": str(self.folder), "images": len(self.files), "workers": self.workers}

    def __iter__(self):
        with ThreadPoolExecutor(self.workers, thread_name_prefix="trtkit-decode") as pool:
            ahead: deque = deque()
            files = iter(self.files)
            for path in files:
                ahead.append((path, pool.submit(read_image, path)))
                if len(ahead) >= 2 * self.workers:
                    break
            while ahead:
                path, future = ahead.popleft()
                nxt = next(files, None)
                if nxt is not None:
                    ahead.append((nxt, pool.submit(read_image, nxt)))
                image = self._result(path, future)
                if image is not None:
                    yield str(path.relative_to(self.folder)), image

    def _result(self, path: Path, future):
        try:
            return future.result()
        except (OSError, ValueError) as exc:
            name = str(path.relative_to(self.folder))
            self.skipped.append(SkippedFrame(name, str(exc)))
            logger.warning("skipped image '%s' that does not decode: %s", path, exc)
            return None

    def close(self) -> None:
        pass


def open_video(
    path,
    decoder: str = "auto",
    device_memory: bool = False,
    cuda=None,
    nvdec_decoders: int = 1,
    decode_threads: int | None = None,
):
    """A reader of ``path`` with the asked decoder (``auto``: NVDEC where it loads, else PyAV).

    ``device_memory``: NVDEC frames stay on the GPU (``__cuda_array_interface__``, copies trtkit owns, through
    ``cuda``: a :class:`~trtkit.runtime.cuda.Cuda`, default the CUDA runtime's), for a preprocessing that runs there;
    with ``decoder="auto"`` a PyAV fallback gives host frames (the reader's ``device_memory`` says which).
    ``nvdec_decoders``: NVDEC decoders at once over chunks of the file
    (:class:`~trtkit.pipeline.nvdec_split.SplitNvdecReader`), frames still in order. ``decode_threads``: PyAV's
    FFmpeg threads where PyAV decodes (default: :data:`~trtkit.pipeline.video.DECODE_THREADS`; 0: FFmpeg chooses).

    Returns:
        ``(reader, DecoderChoice)``.

    Raises:
        InputError: the file is missing, cannot be opened as a video, or has no video stream; ``decoder`` unknown.
        DependencyError: the asked decoder's package or libraries do not load.
    """
    from trtkit.pipeline.video import DECODERS, DecoderChoice, NvdecReader, PyAVReader

    if decoder not in DECODERS:
        raise InputError(f"Decoder '{decoder}' is not known; use one of: {', '.join(DECODERS)}")
    path = Path(path)
    if not path.is_file():
        raise InputError(f"Video '{path}' does not exist or is not a file")
    if device_memory and decoder == "pyav":
        raise InputError("Frames in device memory need decoder='nvdec' (or 'auto'), not 'pyav'")
    if decoder == "pyav":
        return PyAVReader(path, decode_threads), DecoderChoice("pyav", "asked for (decoder='pyav')")
    try:
        if nvdec_decoders != 1:
            from trtkit.pipeline.nvdec_split import SplitNvdecReader

            reader: object = SplitNvdecReader(path, decoders=nvdec_decoders, device_memory=device_memory, cuda=cuda)
        else:
            reader = NvdecReader(path, device_memory=device_memory, cuda=cuda)
    except DependencyError as exc:
        if decoder == "nvdec":
            raise
        return PyAVReader(path, decode_threads), DecoderChoice("pyav", f"NVDEC not used: {exc}")
    return reader, DecoderChoice(
        "nvdec", "asked for (decoder='nvdec')" if decoder == "nvdec" else "PyNvVideoCodec loaded and opened the file"
    )


class VideoSource:
    """The frames of a video file (see :func:`open_video` for ``decoder``, ``device_memory``,
    ``nvdec_decoders`` and ``decode_threads``).

    Raises (on creation):
        InputError: the file is missing, not a video, or has no video stream.
        DependencyError: the asked decoder does not load.
    """

    name = "decode"

    def __init__(
        self,
        path,
        decoder: str = "auto",
        device_memory: bool = False,
        cuda=None,
        nvdec_decoders: int = 1,
        decode_threads: int | None = None,
    ):
        self.reader, self.decoder = open_video(path, decoder, device_memory, cuda, nvdec_decoders, decode_threads)

    @property
    def device_frames(self) -> bool:
        """Whether the frames are in device memory (NVDEC with ``device_memory``): the pipeline preprocesses them
        on the GPU where it can."""
        return bool(getattr(self.reader, "device_memory", False))

    @property
    def skipped(self) -> list:
        return self.reader.skipped

    @property
    def fps(self):
        return self.reader.fps

    def info(self) -> dict:
        return {"kind": "video", **self.reader.info(), "decoder_reason": self.decoder.reason}

    def __iter__(self):
        for i, image in enumerate(self.reader):
            yield f"frame {i}", image

    def close(self) -> None:
        self.reader.close()
