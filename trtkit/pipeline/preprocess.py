"""Pre- and post-processing: the small protocol the pipeline is written against, and the image preprocessing it
derives from an engine's input.

    pre(image) -> (sample, meta)          # HxWx3 uint8 RGB → one model input (no batch axis), and what post needs
    post(outputs, meta, image) -> result  # outputs: name → array of this frame (no batch axis)
    draw(image, result) -> image          # optional: the picture a video or image sink writes

Any callables with these signatures work (``trtkit.detection`` provides the detector's).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from trtkit.errors import InputError

FLOAT_DTYPES = ("float32", "float16")


def rgb_picture(image) -> np.ndarray:
    """``image`` as an array; :class:`~trtkit.errors.InputError` unless it is an HxWx3 uint8 RGB picture."""
    array = np.asarray(image)
    if array.ndim != 3 or array.shape[2] != 3 or array.dtype != np.uint8:
        raise InputError(
            f"Preprocessing expects an HxWx3 uint8 RGB picture, got shape {array.shape} dtype {array.dtype}"
        )
    return array


@dataclass(frozen=True)
class ImageInput:
    """An engine input that takes images: ``(N, C, H, W)`` with C of 1 or 3 and a float dtype, or ``(N, H, W, 3)``
    uint8 (an engine built with ``input_uint8_nhwc``: the pixels as they are); N from the profile.

    Attributes:
        name: the input's name.
        channels, height, width: its picture size.
        dtype: numpy dtype name.
        min_batch, max_batch: the batch sizes the profile accepts.
        layout: ``"NCHW"`` or ``"NHWC"``.
    """

    name: str
    channels: int
    height: int
    width: int
    dtype: str
    min_batch: int
    max_batch: int
    layout: str = "NCHW"

    @property
    def sample_shape(self) -> tuple:
        """One image's shape: ``(C, H, W)``, or ``(H, W, C)`` for NHWC."""
        chw = (self.channels, self.height, self.width)
        return chw if self.layout == "NCHW" else (self.height, self.width, self.channels)


def image_input(specs, profile: int = 0) -> ImageInput:
    """The image input of an engine with one input of layout NCHW and a float type, or NHWC uint8.

    Args:
        specs: the engine's input :class:`~trtkit.runtime.engine.TensorSpec` s (``runner.input_specs``).
        profile: the optimization profile in use (batch range; H and W where they are dynamic: its opt shape).

    Raises:
        InputError: not exactly one input, or one that is not an image tensor (names the layouts expected).
    """
    specs = list(specs)
    expected = (
        "one input of layout NCHW (batch, 3 or 1 channels, height, width), float32 or float16, or NHWC (batch, "
        "height, width, 3) uint8"
    )
    if len(specs) != 1:
        names = ", ".join(f"'{s.name}' {tuple(s.shape)}" for s in specs)
        raise InputError(
            f"The image pipeline needs an engine with {expected}; this engine has {len(specs)} inputs: {names} "
            "(a multi-view model takes a source per input)"
        )
    spec = specs[0]
    lo, opt, hi = (tuple(int(d) for d in dims) for dims in spec.profile_range(profile))
    dtype = np.dtype(spec.dtype).name
    layout, axes = ("NHWC", (3, 1, 2)) if dtype == "uint8" else ("NCHW", (1, 2, 3))
    channels = opt[axes[0]] if len(opt) == 4 else 0
    if channels not in ((3,) if layout == "NHWC" else (1, 3)) or dtype not in (*FLOAT_DTYPES, "uint8"):
        raise InputError(
            f"Engine input '{spec.name}' has shape {tuple(spec.shape)} and dtype {dtype}; the image "
            f"pipeline expects {expected}, e.g. (-1, 3, 224, 224) float32"
            + (" (a multi-view input (N, V, C, H, W) takes a source per view)" if len(opt) == 5 else "")
        )
    height, width = (spec.shape[a] if spec.shape[a] > 0 else opt[a] for a in axes[1:])
    return ImageInput(spec.name, channels, height, width, dtype, max(1, lo[0]), max(1, hi[0]), layout)


REDUCING_GAP = 3.0  # PIL's resize first box-reduces by int(ratio / 3) (1080p to 224: by 2, then the filter)


class ImagePreprocess:
    """``pre`` for an :class:`ImageInput`: resize (``stretch``) or letterbox to its size, RGB (or gray), scaled by
    ``scale`` (default 1/255), CHW, of the input's dtype (a uint8 NHWC input takes the pixels as they are, unscaled:
    the engine scales them). ``meta`` is the letterbox geometry
    ``{"scale", "pad": (left, top), "source_size": (width, height)}`` that maps model coordinates back.

    The picture is resized as uint8 (PIL's C resize, box-reducing first where it shrinks at least
    ``2 * reducing_gap`` times) and scaled straight into the sample, the padding filled apart: the same values as
    :func:`calibrators.preprocess.preprocess_image` where no box reduction happens (``reducing_gap=None``: never);
    with it, a 1080p frame costs about a third of the exact filter and its values differ by at most one uint8 level
    for nearly all pixels (two at some sharp edges). :meth:`into` writes the sample into a given array (a row of a
    batch buffer).

    Args:
        target: the engine's image input.
        resize: ``"letterbox"`` (keep the aspect ratio, pad with gray 114) or ``"stretch"``.
        scale: multiplier of the 0..255 pixel values.
        mean, std: per channel, after ``scale`` (a uint8 input refuses any but 0 and 1).
        reducing_gap: PIL's ``reducing_gap`` (``None``: the exact filter, slower on large frames).
    """

    def __init__(
        self,
        target: ImageInput,
        *,
        resize: str = "letterbox",
        scale: float = 1.0 / 255.0,
        mean=(0.0, 0.0, 0.0),
        std=(1.0, 1.0, 1.0),
        reducing_gap: float | None = REDUCING_GAP,
    ):
        from calibrators.preprocess import Preprocess
        from trtkit.detection.letterbox import channel_norm

        channel_norm(target.dtype, mean, std)
        self.target = target
        self.reducing_gap = reducing_gap
        settings = Preprocess(
            size=(target.height, target.width),
            resize=resize,
            scale=scale,
            mean=tuple(mean),
            std=tuple(std),
            layout="NCHW",
            dtype=target.dtype,
        )
        if target.channels == 1:
            settings = replace(settings, color="GRAY", mean=settings.mean[:1], std=settings.std[:1])
        self.settings = settings
        channels = target.channels
        self._scale = np.float32(settings.scale)
        self._mean = np.asarray(settings.mean, dtype=np.float32)[:channels].reshape(channels, 1, 1)
        self._std = np.asarray(settings.std, dtype=np.float32)[:channels].reshape(channels, 1, 1)
        self.shape = target.sample_shape
        pad = np.full((channels, 1, 1), round(settings.pad_value), dtype=np.uint8)
        self._pad = pad if target.dtype == "uint8" else self._scaled(pad).astype(target.dtype)

    def __call__(self, image) -> tuple:
        sample = np.empty(self.shape, dtype=self.target.dtype)
        return sample, self.into(image, sample)

    def into(self, image, out: np.ndarray):
        """Write the sample of ``image`` into ``out`` (of :attr:`shape` and the input's dtype); returns ``meta``.

        Raises:
            InputError: ``image`` is not an HxWx3 uint8 picture, or ``out`` has the wrong shape or dtype.
        """
        from PIL import Image

        from calibrators.preprocess import letterbox_geometry

        array = rgb_picture(image)
        if out.shape != self.shape or out.dtype != np.dtype(self.target.dtype):
            raise InputError(
                f"The sample buffer is {out.shape} {out.dtype}; input '{self.target.name}' takes "
                f"{self.shape} {self.target.dtype}"
            )
        height, width = array.shape[:2]
        # frombuffer with the raw decoder: the same picture as Image.fromarray, in a fraction of its time
        picture = Image.frombuffer("RGB", (width, height), np.ascontiguousarray(array), "raw", "RGB", 0, 1)
        if self.target.channels == 1:
            picture = picture.convert("L")
        if self.settings.resize == "letterbox":
            scale, new_w, new_h, left, top = letterbox_geometry(width, height, self.target.width, self.target.height)
            meta = {"scale": scale, "pad": (left, top), "source_size": (width, height)}
        else:
            new_w, new_h, left, top = self.target.width, self.target.height, 0, 0
            meta = {
                "scale": (self.target.width / width, self.target.height / height),
                "pad": (0, 0),
                "source_size": (width, height),
            }
        pixels = np.asarray(picture.resize((new_w, new_h), Image.Resampling.BILINEAR, reducing_gap=self.reducing_gap))
        pixels = pixels.reshape(new_h, new_w, -1).transpose(2, 0, 1)
        out = out.transpose(2, 0, 1) if self.target.layout == "NHWC" else out  # written as CHW either way
        bottom, right = top + new_h, left + new_w
        out[:, :top], out[:, bottom:] = self._pad, self._pad
        out[:, top:bottom, :left], out[:, top:bottom, right:] = self._pad, self._pad
        region = out[:, top:bottom, left:right]
        if out.dtype == np.uint8:
            region[...] = pixels
        elif out.dtype == np.float32:
            self._scaled(pixels, region)
        else:
            region[...] = self._scaled(pixels)
        return meta

    def _scaled(self, pixels: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """``(pixels * scale - mean) / std`` in float32, the operations of
        :func:`calibrators.preprocess.normalize` in its order (so the same values), into ``out`` if given."""
        out = np.multiply(pixels, self._scale, out=out, dtype=np.float32)
        if np.any(self._mean):
            np.subtract(out, self._mean, out=out)
        if np.any(self._std != 1):
            np.divide(out, self._std, out=out)
        return out
