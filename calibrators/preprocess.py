"""Image preprocessing for calibration: resize or letterbox, channel order, scale, mean/std, layout.

Settings are a plain dataclass so they can be recorded in a calibration cache's provenance and compared later.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np

from trtkit.errors import CalibrationError, UsageError

RESIZE_MODES = ("stretch", "letterbox")
LAYOUTS = ("NCHW", "NHWC")
# named mean/std pairs (``normalize=NAME``): ImageNet's, as torchvision, DETR-family and Lightning Pose models use
NORMALIZE = {
    "none": {"mean": (0.0, 0.0, 0.0), "std": (1.0, 1.0, 1.0)},
    "imagenet": {"mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)},
}


@dataclass(frozen=True)
class Preprocess:
    """How an image file becomes one sample of a model input.

    Attributes:
        size: ``(height, width)``; ``None`` takes it from the model's input shape (see :func:`with_model_size`).
        resize: ``"stretch"`` (plain resize) or ``"letterbox"`` (keep the aspect ratio, pad with ``pad_value``).
        color: ``"RGB"`` or ``"BGR"`` channel order; ``"GRAY"`` for one channel.
        scale: multiplier applied to the 0..255 pixel values (``1/255`` gives 0..1).
        mean, std: per-channel, applied after ``scale``: ``(x * scale - mean) / std``.
        layout: ``"NCHW"`` or ``"NHWC"`` (of the batch; one sample is CHW or HWC).
        pad_value: letterbox padding, in 0..255 pixel units.
        dtype: numpy dtype name of the samples.
    """

    size: tuple[int, int] | None = None
    resize: str = "stretch"
    color: str = "RGB"
    scale: float = 1.0 / 255.0
    mean: tuple[float, ...] = (0.0, 0.0, 0.0)
    std: tuple[float, ...] = (1.0, 1.0, 1.0)
    layout: str = "NCHW"
    pad_value: float = 114.0
    dtype: str = "float32"

    def __post_init__(self):
        if self.resize not in RESIZE_MODES:
            raise CalibrationError(f"Resize mode '{self.resize}' is not known; use one of: {', '.join(RESIZE_MODES)}.")
        if self.layout not in LAYOUTS:
            raise CalibrationError(f"Layout '{self.layout}' is not known; use one of: {', '.join(LAYOUTS)}.")
        if self.color not in ("RGB", "BGR", "GRAY"):
            raise CalibrationError(f"Color order '{self.color}' is not known; use RGB, BGR or GRAY.")
        if any(s == 0 for s in self.std):
            raise CalibrationError(f"Preprocess std {self.std} contains 0; every channel's std must be non-zero.")

    @property
    def channels(self) -> int:
        return 1 if self.color == "GRAY" else 3

    def to_dict(self) -> dict:
        """JSON-ready settings (recorded in a calibration cache's provenance)."""
        data = asdict(self)
        data["size"] = list(self.size) if self.size else None
        data["mean"], data["std"] = list(self.mean), list(self.std)
        return data


_FIELDS = {
    "size": "HxW",
    "resize": "stretch|letterbox",
    "color": "RGB|BGR|GRAY",
    "scale": "float",
    "mean": "a/b/c",
    "std": "a/b/c",
    "normalize": "|".join(NORMALIZE),
    "layout": "NCHW|NHWC",
    "pad": "0-255",
}


def parse_preprocess(text: str | None, field: str = "calibration.preprocess") -> dict:
    """``--calib-preprocess`` text → keyword arguments of :class:`Preprocess`.

    Example: ``"resize=letterbox,color=BGR,scale=0.00392157,mean=0.485/0.456/0.406,std=0.229/0.224/0.225,
    layout=NCHW,size=640x640"`` (every key optional). ``field``: the argument the text came from, for errors.

    Raises:
        UsageError: an unknown key, a malformed value or a choice :class:`Preprocess` refuses (names the key and
            the expected form).
    """
    out: dict = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        key, value = key.strip().lower(), value.strip()
        if not sep or key not in _FIELDS:
            accepted = ", ".join(f"{k}={v}" for k, v in _FIELDS.items())
            raise UsageError(f"{field} item '{item.strip()}' is not KEY=VALUE with a key of: {accepted}", field=field)
        try:
            out.update(_parse_field(key, value))
        except (ValueError, KeyError):
            raise UsageError(
                f"{field} {key}='{value}' is malformed; expected {key}={_FIELDS[key]}.", field=field
            ) from None
    try:
        Preprocess(**out)  # validate the choices now, with Preprocess's messages
    except CalibrationError as exc:
        raise UsageError(str(exc), field=field) from None
    return out


def _parse_field(key: str, value: str) -> dict:
    if key == "size":
        height, width = (int(v) for v in value.lower().split("x"))
        return {"size": (height, width)}
    if key in ("mean", "std"):
        return {key: tuple(float(v) for v in value.split("/"))}
    if key == "normalize":
        return NORMALIZE[value.lower()]
    if key in ("scale", "pad"):
        return {"pad_value" if key == "pad" else key: float(value)}
    return {key: value.upper() if key in ("color", "layout") else value.lower()}


def parse_normalize(text: str | None, field: str = "normalize") -> dict:
    """``--normalize`` text (``none``, ``imagenet`` or ``mean=a/b/c,std=a/b/c``) → ``{"mean", "std"}`` ({} for None);
    :class:`UsageError` for other text."""
    if text is None:
        return {}
    out = parse_preprocess(text, field) if "=" in text else NORMALIZE.get(text.lower(), {})
    if not out or set(out) - {"mean", "std"} or any(len(v) != 3 for v in out.values()):
        raise UsageError(f"--normalize takes none, imagenet or mean=R/G/B,std=R/G/B; not '{text}'.", field=field)
    return {**NORMALIZE["none"], **out}


def with_model_size(settings: Preprocess, input_shape) -> Preprocess:
    """Fill in ``size`` (and a one-channel color mode) from a model input shape such as ``(-1, 3, 224, 224)``.

    Raises:
        CalibrationError: the shape is not 4-D or its height/width are dynamic and no size was given.
    """
    if len(input_shape) != 4:
        raise CalibrationError(
            f"Image calibration needs a 4-D model input (N, C, H, W or N, H, W, C); this input has shape "
            f"{tuple(input_shape)}. Give the calibration data as .npy/.npz files instead."
        )
    if settings.layout == "NCHW":
        channels, height, width = input_shape[1], input_shape[2], input_shape[3]
    else:
        height, width, channels = input_shape[1], input_shape[2], input_shape[3]
    if channels == 1 and settings.color != "GRAY":
        settings = replace(settings, color="GRAY", mean=settings.mean[:1], std=settings.std[:1])
    if settings.size is not None:
        return settings
    if not (isinstance(height, int) and isinstance(width, int) and height > 0 and width > 0):
        raise CalibrationError(
            f"The model input's height and width are dynamic ({tuple(input_shape)}); give the calibration image size "
            f"explicitly (Preprocess(size=(H, W)))."
        )
    return replace(settings, size=(int(height), int(width)))


def load_image(path, settings: Preprocess) -> np.ndarray:
    """Read one image file and preprocess it into a CHW or HWC sample.

    Raises:
        CalibrationError: the file cannot be read as an image (names the file and pillow's reason).
    """
    from PIL import Image

    _size_of(settings)
    try:
        with Image.open(path) as img:
            return preprocess_image(img, settings)
    except (OSError, ValueError) as exc:
        raise CalibrationError(f"Cannot read calibration image '{path}': {exc}") from exc


def preprocess_image(img, settings: Preprocess) -> np.ndarray:
    """A pillow image → one sample (resized or letterboxed to ``settings.size``, normalized, in its layout)."""
    mode = "L" if settings.color == "GRAY" else "RGB"
    if img.mode != mode:  # converting an image already in its mode would only copy it
        img = img.convert(mode)
    return normalize(_fit(img, _size_of(settings), settings), settings)


def _size_of(settings: Preprocess) -> tuple[int, int]:
    if settings.size is None:
        raise CalibrationError("Preprocess.size is not set; call with_model_size() with the model's input shape.")
    return settings.size


def _fit(img, size: tuple[int, int], settings: Preprocess) -> np.ndarray:
    from PIL import Image

    height, width = size
    if settings.resize == "stretch":
        return np.asarray(img.resize((width, height), Image.Resampling.BILINEAR))
    _, new_w, new_h, left, top = letterbox_geometry(img.width, img.height, width, height)
    canvas = Image.new(img.mode, (width, height), color=_pad_color(img.mode, settings.pad_value))
    canvas.paste(img.resize((new_w, new_h), Image.Resampling.BILINEAR), (left, top))
    return np.asarray(canvas)


def letterbox_geometry(src_w: int, src_h: int, dst_w: int, dst_h: int) -> tuple:
    """Where a letterbox puts a ``src_w`` x ``src_h`` picture in ``dst_w`` x ``dst_h``:
    ``(scale, new_w, new_h, left, top)`` (a model's coordinates map back as ``(x - left) / scale``)."""
    ratio = min(dst_w / src_w, dst_h / src_h)
    new_w, new_h = max(1, round(src_w * ratio)), max(1, round(src_h * ratio))
    return ratio, new_w, new_h, (dst_w - new_w) // 2, (dst_h - new_h) // 2


def _pad_color(mode: str, value: float):
    v = int(round(value))
    return v if mode == "L" else (v, v, v)


def normalize(pixels: np.ndarray, settings: Preprocess) -> np.ndarray:
    """HWC (or HW) uint8 pixels in RGB order → one sample in the configured order, scale, mean/std and layout."""
    x = pixels.astype(np.float32)
    if x.ndim == 2:
        x = x[:, :, None]
    if settings.color == "BGR":
        x = x[:, :, ::-1]
    channels = x.shape[2]
    mean = np.asarray(settings.mean, dtype=np.float32)[:channels]
    std = np.asarray(settings.std, dtype=np.float32)[:channels]
    x = (x * np.float32(settings.scale) - mean) / std
    if settings.layout == "NCHW":
        x = x.transpose(2, 0, 1)
    return np.ascontiguousarray(x, dtype=settings.dtype)
