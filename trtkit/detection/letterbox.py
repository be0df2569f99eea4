"""Letterbox pre-processing: keep the aspect ratio, pad to the model's input size, and map boxes back.

The geometry is the one trtkit's calibration pre-processing uses (``resize=letterbox``): scale by
``min(W / w, H / h)``, round the new size, centre with ``(W - new_w) // 2`` on the left and ``(H - new_h) // 2`` on
top, bilinear resampling, pad value 114. Calibrating and evaluating therefore see the same pixels.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trtkit.errors import InputError
from trtkit.images import IMAGE_EXTENSIONS


class ImageReadError(InputError):
    """An image file cannot be read by pillow (the message names the file and pillow's reason)."""


@dataclass(frozen=True)
class LetterboxMeta:
    """Where one original image sits inside the letterboxed input.

    Attributes:
        width, height: the original image's size.
        scale: original pixels → input pixels.
        pad_x, pad_y: the left and top padding, in input pixels.
    """

    width: int
    height: int
    scale: float
    pad_x: int
    pad_y: int

    def to_original(self, boxes: np.ndarray) -> np.ndarray:
        """Map ``(K, 4)`` x1, y1, x2, y2 boxes from input pixels to the original image, clipped to it."""
        boxes = np.asarray(boxes, np.float32).reshape(-1, 4)
        out = (boxes - np.array([self.pad_x, self.pad_y, self.pad_x, self.pad_y], np.float32)) / self.scale
        np.clip(out[:, 0::2], 0, self.width, out=out[:, 0::2])
        np.clip(out[:, 1::2], 0, self.height, out=out[:, 1::2])
        return out

    def to_input(self, boxes: np.ndarray) -> np.ndarray:
        """Map ``(K, 4)`` x1, y1, x2, y2 boxes from the original image to input pixels."""
        boxes = np.asarray(boxes, np.float32).reshape(-1, 4)
        return boxes * self.scale + np.array([self.pad_x, self.pad_y, self.pad_x, self.pad_y], np.float32)


def letterbox_meta(width: int, height: int, size: tuple[int, int]) -> LetterboxMeta:
    """The letterbox geometry of a ``width`` x ``height`` image in an input of ``size = (H, W)``."""
    return placement(width, height, size)[0]


def placement(width: int, height: int, size: tuple[int, int]) -> tuple[LetterboxMeta, tuple[int, int]]:
    """``(geometry, (new_w, new_h))``: where a ``width`` x ``height`` image goes in an input of ``size = (H, W)``
    and the size it is resized to."""
    in_h, in_w = size
    scale = min(in_w / width, in_h / height)
    new_w, new_h = max(1, round(width * scale)), max(1, round(height * scale))
    return LetterboxMeta(width, height, scale, (in_w - new_w) // 2, (in_h - new_h) // 2), (new_w, new_h)


LAYOUTS = ("NCHW", "NHWC")
IDENTITY = ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0))  # mean, std of plain 0..1 inputs (YOLO)


def channel_norm(dtype, mean, std) -> tuple:
    """``(mean, std)`` as tuples; :class:`InputError` for a uint8 input (its engine scales by 1/255 alone) and more."""
    norm = tuple(tuple(float(v) for v in values) for values in (mean, std))
    if np.dtype(dtype) == np.uint8 and norm != IDENTITY:
        raise InputError(
            f"A uint8 input takes the pixels as they are (its engine scales them by 1/255); it cannot be given "
            f"mean={norm[0]} std={norm[1]}: build the engine without input_uint8_nhwc to normalize them."
        )
    return norm


class Letterbox:
    """Turn images into one batch for a detector, remembering how to map boxes back.

    Args:
        size: the model input's ``(height, width)``.
        pad_value: padding, in 0..255 pixel units.
        scale: multiplier of the 0..255 values (``1/255`` gives 0..1, what YOLO-style models expect); a uint8
            batch holds the pixels themselves, unscaled.
        dtype: dtype of the batch. ``np.uint8`` with ``layout="NHWC"`` is the padded pixels as they are, with no
            float work on the CPU: the input of an engine built with ``input_uint8_nhwc``.
        layout: ``"NCHW"`` (``(N, 3, H, W)``) or ``"NHWC"`` (``(N, H, W, 3)``).
        mean, std: per channel (RGB), applied after ``scale``: ``(x * scale - mean) / std`` in float32, as
            :func:`calibrators.preprocess.normalize` does (ImageNet's for DETR-family models).
        reuse: fill the same batch array on every call of one batch size instead of a new one (the previous
            batch is overwritten). ``TrtRunner`` page-locks an input array it is given again and sends it from
            where it is, so a reused batch reaches the GPU with no extra host copy.

    ``letterbox(images)`` takes pillow images, HWC uint8 RGB arrays or image paths and returns
    ``(batch, metas)``: the batch and one :class:`LetterboxMeta` per image. :meth:`for_input` picks the settings
    from a model input's shape and dtype.
    """

    where = "cpu"  # where the work runs (trtkit.runtime.letterbox.DeviceLetterbox: "gpu")

    def __init__(
        self,
        size: tuple[int, int],
        pad_value: float = 114.0,
        scale: float = 1.0 / 255.0,
        dtype=np.float32,
        *,
        layout: str = "NCHW",
        reuse: bool = False,
        mean=IDENTITY[0],
        std=IDENTITY[1],
    ):
        self.size = (int(size[0]), int(size[1]))
        self.mean, self.std = channel_norm(dtype, mean, std)
        self.pad_value = pad_value
        self.scale = scale
        self.dtype = np.dtype(dtype)
        if layout not in LAYOUTS:
            raise InputError(f"Letterbox layout '{layout}' is not known; use one of: {', '.join(LAYOUTS)}.")
        self.layout = layout
        self.reuse = reuse
        self._buffers: dict[int, tuple[np.ndarray, np.ndarray | None]] = {}

    @classmethod
    def for_input(cls, shape, dtype=np.float32, *, reuse: bool = False, **norm) -> Letterbox:
        """The letterbox making batches of a model input of ``shape`` (``(N, 3, H, W)``, or ``(N, H, W, 3)`` when
        ``dtype`` is uint8: an engine built with ``input_uint8_nhwc``) and ``dtype``; ``norm``: ``mean``, ``std``.

        Raises:
            InputError: the shape is not 4-D with 3 channels where that layout has them, or its height and width are
                not fixed.
        """
        dtype = np.dtype(dtype)
        shape = tuple(shape)
        nhwc = dtype == np.uint8
        layout = "NHWC" if nhwc else "NCHW"
        hw = shape[1:3] if nhwc else shape[2:4]
        channels = shape[3] if nhwc and len(shape) == 4 else (shape[1] if len(shape) == 4 else None)
        if len(shape) != 4 or channels != 3 or not all(isinstance(d, int) and d > 0 for d in hw):
            raise InputError(
                f"A {dtype} image input of shape {shape} is not {'(N, H, W, 3)' if nhwc else '(N, 3, H, W)'} with a "
                "fixed height and width; the letterbox cannot fill it."
            )
        return cls((int(hw[0]), int(hw[1])), dtype=dtype, layout=layout, reuse=reuse, **norm)

    def close(self) -> None:
        """Nothing to free (the GPU letterbox's :meth:`close` frees its memory)."""

    @property
    def raw(self) -> bool:
        """Whether the batch is the uint8 NHWC canvas itself (no conversion at all)."""
        return self.dtype == np.uint8 and self.layout == "NHWC"

    def __call__(self, images) -> tuple[np.ndarray, list[LetterboxMeta]]:
        canvas, batch = self._arrays(len(images))
        canvas.fill(round(self.pad_value))
        metas = [self.paste(image, canvas[i]) for i, image in enumerate(images)]
        return (canvas if self.raw else self.to_batch(canvas, batch)), metas

    def _arrays(self, n: int) -> tuple[np.ndarray, np.ndarray | None]:
        if not self.reuse:
            return np.empty((n, self.size[0], self.size[1], 3), np.uint8), None
        if n not in self._buffers:
            canvas = np.empty((n, self.size[0], self.size[1], 3), np.uint8)
            self._buffers[n] = (canvas, None if self.raw else np.empty(self._batch_shape(n), self.dtype))
        return self._buffers[n]

    def _batch_shape(self, n: int) -> tuple:
        h, w = self.size
        return (n, 3, h, w) if self.layout == "NCHW" else (n, h, w, 3)

    def paste(self, image, out: np.ndarray) -> LetterboxMeta:
        """Resize one image into the ``(H, W, 3)`` uint8 canvas ``out`` (already padded); return its geometry."""
        from PIL import Image

        image = open_image(image) if isinstance(image, (str, Path)) else image
        if isinstance(image, np.ndarray):
            image = Image.fromarray(_as_rgb_array(image))
        elif image.mode != "RGB":
            image = image.convert("RGB")
        meta, (new_w, new_h) = placement(image.width, image.height, self.size)
        resized = image if (new_w, new_h) == image.size else image.resize((new_w, new_h), Image.Resampling.BILINEAR)
        out[meta.pad_y : meta.pad_y + new_h, meta.pad_x : meta.pad_x + new_w] = np.asarray(resized)
        return meta

    def to_batch(self, canvas: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """``(N, H, W, 3)`` uint8 → the batch (scaled, in the layout and dtype), in one vectorized pass (into ``out``
        when given); a uint8 NHWC batch is ``canvas`` itself."""
        if self.raw:
            return canvas
        if out is None:
            out = np.empty(self._batch_shape(canvas.shape[0]), self.dtype)
        source = canvas.transpose(0, 3, 1, 2) if self.layout == "NCHW" else canvas
        if self.dtype == np.uint8:
            np.copyto(out, source)
        elif (self.mean, self.std) == IDENTITY:
            np.multiply(source, self.dtype.type(self.scale), out=out, casting="unsafe")
        else:
            shape = (3, 1, 1) if self.layout == "NCHW" else (3,)
            mean, std = (np.asarray(v, np.float32).reshape(shape) for v in (self.mean, self.std))
            scaled = np.multiply(source, np.float32(self.scale), dtype=np.float32)
            np.divide(scaled - mean, std, out=out, casting="unsafe")
        return out


def rgb_array(image) -> np.ndarray:
    """An image (pillow image, HxW or HxWx3 uint8 array, or path) as an ``(H, W, 3)`` uint8 RGB array (arrays that
    already are one are returned as they are).

    Raises:
        ImageReadError: a path pillow cannot read.
        InputError: an array of another shape or dtype.
    """
    image = open_image(image) if isinstance(image, (str, Path)) else image
    if isinstance(image, np.ndarray):
        return _as_rgb_array(image)
    return np.asarray(image if image.mode == "RGB" else image.convert("RGB"))


def _as_rgb_array(array: np.ndarray) -> np.ndarray:
    if array.dtype != np.uint8 or array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[2] not in (1, 3)):
        raise InputError(f"An image array must be HxW or HxWx3 uint8 RGB; got shape {array.shape} of {array.dtype}.")
    return (
        np.repeat(array.reshape(array.shape[0], array.shape[1], 1), 3, axis=2)
        if array.ndim == 2 or array.shape[2] == 1
        else array
    )


def open_image(path):
    """Open an image file as an RGB pillow image.

    Raises:
        ImageReadError: pillow cannot read it (names the file and why).
    """
    from PIL import Image

    try:
        with Image.open(path) as img:
            return img.convert("RGB")
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        raise ImageReadError(f"Cannot read image '{path}': {exc}") from exc


def list_images(folder) -> list[Path]:
    """Image files directly in ``folder``, sorted by name.

    Raises:
        InputError: the folder does not exist or holds no image file.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"Image folder '{folder}' does not exist or is not a folder.")
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS and p.is_file())
    if not files:
        raise InputError(f"Image folder '{folder}' holds no image file ({', '.join(IMAGE_EXTENSIONS)}).")
    return files
