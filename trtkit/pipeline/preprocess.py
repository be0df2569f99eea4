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


@dataclass(frozen=True)
class ImageInput:
    """An engine input that takes images: ``(N, C, H, W)`` with C of 1 or 3, a float dtype, N from the profile.

    Attributes:
        name: the input's name.
        channels, height, width: its picture size.
        dtype: numpy dtype name.
        min_batch, max_batch: the batch sizes the profile accepts.
    """

    name: str
    channels: int
    height: int
    width: int
    dtype: str
    min_batch: int
    max_batch: int


def image_input(specs, profile: int = 0) -> ImageInput:
    """The image input of an engine with one input of layout NCHW and a float type.

    Args:
        specs: the engine's input :class:`~trtkit.runtime.engine.TensorSpec` s (``runner.input_specs``).
        profile: the optimization profile in use (batch range; H and W where they are dynamic: its opt shape).

    Raises:
        InputError: not exactly one input, or one that is not an NCHW float image tensor (names the layout expected).
    """
    specs = list(specs)
    expected = "one input of layout NCHW (batch, 3 or 1 channels, height, width), float32 or float16"
    if len(specs) != 1:
        names = ", ".join(f"'{s.name}' {tuple(s.shape)}" for s in specs)
        raise InputError(
            f"The image pipeline needs an engine with {expected}; this engine has {len(specs)} inputs: {names}"
        )
    spec = specs[0]
    lo, opt, hi = (tuple(int(d) for d in dims) for dims in spec.profile_range(profile))
    dtype = np.dtype(spec.dtype).name
    channels = opt[1] if len(opt) == 4 else None
    if len(opt) != 4 or channels not in (1, 3) or dtype not in FLOAT_DTYPES:
        raise InputError(
            f"Engine input '{spec.name}' has shape {tuple(spec.shape)} and dtype {dtype}; the image "
            f"pipeline expects {expected}, e.g. (-1, 3, 224, 224) float32"
        )
    height = spec.shape[2] if spec.shape[2] > 0 else opt[2]
    width = spec.shape[3] if spec.shape[3] > 0 else opt[3]
    return ImageInput(spec.name, channels, height, width, dtype, max(1, lo[0]), max(1, hi[0]))


class ImagePreprocess:
    """``pre`` for an :class:`ImageInput`: resize (``stretch``) or letterbox to its size, RGB (or gray), scaled by
    ``scale`` (default 1/255), CHW, of the input's dtype. ``meta`` is the letterbox geometry
    ``{"scale", "pad": (left, top), "source_size": (width, height)}`` that maps model coordinates back.

    Args:
        target: the engine's image input.
        resize: ``"letterbox"`` (keep the aspect ratio, pad with gray 114) or ``"stretch"``.
        scale: multiplier of the 0..255 pixel values.
        mean, std: per channel, after ``scale``.
    """

    def __init__(
        self,
        target: ImageInput,
        *,
        resize: str = "letterbox",
        scale: float = 1.0 / 255.0,
        mean=(0.0, 0.0, 0.0),
        std=(1.0, 1.0, 1.0),
    ):
        from calibrators.preprocess import Preprocess

        self.target = target
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

    def __call__(self, image) -> tuple:
        from PIL import Image

        from calibrators.preprocess import letterbox_geometry, preprocess_image

        array = np.asarray(image)
        if array.ndim != 3 or array.shape[2] != 3 or array.dtype != np.uint8:
            raise InputError(
                f"Preprocessing expects an HxWx3 uint8 RGB picture, got shape {array.shape} dtype {array.dtype}"
            )
        height, width = array.shape[:2]
        sample = preprocess_image(Image.fromarray(array), self.settings)
        if self.settings.resize == "letterbox":
            scale, _, _, left, top = letterbox_geometry(width, height, self.target.width, self.target.height)
            meta = {"scale": scale, "pad": (left, top), "source_size": (width, height)}
        else:
            meta = {
                "scale": (self.target.width / width, self.target.height / height),
                "pad": (0, 0),
                "source_size": (width, height),
            }
        return sample, meta


def raw_outputs(outputs: dict, meta, image) -> dict:
    """``post`` that keeps the engine's outputs as they are (what the JSON lines sink saves without ``--post``)."""
    return outputs
