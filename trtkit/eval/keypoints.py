"""``trtkit eval keypoints``: how far a pose model's keypoints are from its reference's, in pixels of the frame.

Pose users judge an engine by how far its keypoints move from those of the model it was built from, on real frames:
the mean and the largest deviation, which must stay small on confidently tracked keypoints (a keypoint whose heatmap
is split between two peaks may flip from one to the other under any precision change). Both models get the same
inputs, made from the images of a folder or from frames sampled evenly from a video; their first outputs are decoded
by :mod:`trtkit.detection.pose` (heatmaps with sub-pixel refinement, or the YOLOv8-pose keypoints of the person the
reference scores highest) and mapped back to the frame.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from calibrators.preprocess import Preprocess, preprocess_image, with_model_size
from trtkit.detection import ImageReadError, letterbox_meta, list_images, open_image
from trtkit.detection.pose import decode_heatmaps, pose_keypoints, pose_layout, to_frame
from trtkit.errors import InputError, UsageError
from trtkit.eval.models import open_model

DEFAULT_FRAMES = 100  # sampled from a video when no count is given; all of them where there are fewer


@dataclass(frozen=True)
class Deviation:
    """Distances in frame pixels of a set of keypoints (``None``: the set is empty)."""

    keypoints: int
    max_px: float | None
    mean_px: float | None
    p99_px: float | None

    @classmethod
    def of(cls, distances: np.ndarray) -> Deviation:
        if not distances.size:
            return cls(0, None, None, None)
        stats = (distances.max(), distances.mean(), np.percentile(distances, 99))
        return cls(int(distances.size), *(round(float(v), 4) for v in stats))


@dataclass(frozen=True)
class KeypointDeviation:
    """Deviation of a model's keypoints from its reference's over all keypoints and over the confident ones (the
    reference's confidence at or above ``min_confidence``).

    Attributes:
        decoding: ``"subpixel"`` or ``"peak-cell"`` (heatmaps; YOLOv8-pose heads give their keypoints as they are).
        layout: ``"heatmaps"`` or ``"yolov8-pose"``.
        images: frames or images compared; ``skipped``: images that could not be read, ``(file, reason)``.
    """

    all: Deviation
    confident: Deviation
    min_confidence: float
    images: int
    layout: str
    decoding: str
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def to_json(self) -> dict:
        return dict(asdict(self), units="frame pixels", skipped=[{"file": f, "reason": r} for f, r in self.skipped])


def evaluate_keypoints(
    model,
    reference,
    *,
    images=None,
    video=None,
    frames: int | None = None,
    preprocess: Preprocess | None = None,
    min_confidence: float = 0.5,
    refine: bool = True,
    batch: int = 8,
    runner_options: dict | None = None,
) -> KeypointDeviation:
    """Max, mean and 99th-percentile deviation (frame pixels) of ``model``'s keypoints from ``reference``'s.

    Args:
        model, reference: engine files, ONNX models or :class:`~trtkit.eval.models.Model` s (the reference: the
            ONNX model the engine was built from, or an FP32 engine).
        images, video: an image folder or a video file (one of them).
        frames: how many images or frames to compare, spread evenly from the first to the last (default: every
            image; up to :data:`DEFAULT_FRAMES` frames of a video).
        preprocess: how frames become inputs (default: a letterbox, RGB, 0..1); keypoints map back through it.
        min_confidence: the reference's confidence from which a keypoint counts as confident.
        refine: sub-pixel heatmap decoding (``False``: the peak cell).
        runner_options: extra ``TrtRunner`` keyword arguments (tests pass fakes).

    Raises:
        InputError: no reference, or one with other outputs; an output that is not a pose output; a source with
            fewer images or frames than ``frames``, or none readable.
    """
    if reference is None:
        raise InputError(
            "Keypoint deviation is measured against the model the engine was built from: give it as reference.",
            field="reference",
        )
    if (images is None) == (video is None):
        raise UsageError("Give the frames to compare on: images (a folder) or video (a file), one of them.")
    skipped: list[tuple[str, str]] = []
    pictures = sample_video(video, frames) if video is not None else _images(images, frames, skipped)
    settings = preprocess or Preprocess(resize="letterbox")
    distances, confidences, layout = [], [], ""
    opened = open_model(model, runner_options=runner_options), open_model(reference, runner_options=runner_options)
    with opened[0] as ours, opened[1] as ref:
        settings, size = with_model_size(settings, ours.input_shape), ours.input_size
        step = max(1, min(batch, ours.max_batch, ref.max_batch))
        for start in range(0, len(pictures), step):
            chunk = pictures[start : start + step]
            x = np.stack([preprocess_image(p, settings) for p in chunk])
            a, b = _outputs(ours, ref, x)
            metas = [_geometry(p.size, size, settings.resize) for p in chunk]
            d, c, layout = compare(a, b, size, metas, refine=refine)
            distances.append(d)
            confidences.append(c)
    if not distances:
        raise InputError(f"No frame of '{images or video}' could be read ({len(skipped)} skipped).")
    d, c = np.concatenate(distances), np.concatenate(confidences)
    return KeypointDeviation(
        Deviation.of(d),
        Deviation.of(d[c >= min_confidence]),
        min_confidence,
        len(pictures),
        layout,
        "subpixel" if refine or layout != "heatmaps" else "peak-cell",
        skipped,
    )


def _outputs(ours, ref, x) -> tuple[np.ndarray, np.ndarray]:
    """Both models' first outputs (the reference's order) for the batch ``x``."""
    a, b = ours.infer({ours.input_name: x}), ref.infer({ref.input_name: x})
    if sorted(a) != sorted(b):
        raise InputError(
            f"The reference {ref.description} has outputs {', '.join(b)}; {ours.description} has "
            f"{', '.join(a)}: give as reference the model the engine was built from."
        )
    name = next(iter(b))
    return np.asarray(a[name]), np.asarray(b[name])


def _geometry(picture: tuple[int, int], size: tuple[int, int], resize: str):
    """Where a ``picture = (width, height)`` sits in an input of ``size = (height, width)`` (see ``to_frame``)."""
    if resize == "letterbox":
        return letterbox_meta(picture[0], picture[1], size)
    return {"scale": (size[1] / picture[0], size[0] / picture[1]), "pad": (0, 0)}


def compare(ours, ref, input_size, metas, *, refine: bool = True) -> tuple[np.ndarray, np.ndarray, str]:
    """``(distances, the reference's confidences, layout)`` per keypoint of two batches of outputs, in the pixels of
    the frames ``metas`` describe (one per image: see :func:`~trtkit.detection.pose.to_frame`).

    Raises:
        InputError: the outputs are not pose outputs, or their shapes differ.
    """
    layout = pose_layout(ref)
    if ours.shape != ref.shape:
        raise InputError(f"The model's output {tuple(ours.shape)} and the reference's {tuple(ref.shape)} differ.")
    if layout == "heatmaps":
        (pa, _), (pb, cb) = (decode_heatmaps(out, input_size, refine=refine) for out in (ours, ref))
    else:
        best = ref[:, 4].argmax(-1)  # the reference's person, read from both
        ka, kb = (np.stack([pose_keypoints(h, i)[0] for h, i in zip(out, best)]) for out in (ours, ref))
        pa, pb, cb = ka[..., :2], kb[..., :2], kb[..., 2]
    pa, pb = (np.stack([to_frame(p, m) for p, m in zip(points, metas)]) for points in (pa, pb))
    return np.linalg.norm(pa - pb, axis=-1).reshape(-1), np.asarray(cb).reshape(-1), layout


def evenly(total: int, count: int | None, what: str) -> np.ndarray:
    """``count`` indices spread evenly over ``0..total - 1`` (first and last included); default up to
    :data:`DEFAULT_FRAMES`.

    Raises:
        InputError: ``count`` is above ``total`` (``what``: the source and what it holds, for the message).
    """
    if count is not None and count > total:
        raise InputError(f"{what}: {total}, fewer than the {count} asked to sample; sample {total} or fewer.")
    if not total:
        raise InputError(f"{what}: none to sample.")
    count = min(total, DEFAULT_FRAMES) if count is None else count
    return np.unique(np.linspace(0, total - 1, max(1, count)).round().astype(np.int64))


def _images(folder, count: int | None, skipped: list) -> list:
    files = list_images(folder)
    pictures = []
    for i in evenly(len(files), count or len(files), f"Images in '{folder}'"):
        try:
            pictures.append(open_image(files[i]))
        except ImageReadError as exc:
            skipped.append((str(files[i]), str(exc.__cause__ or exc)))
    return pictures


def sample_video(path, count: int | None = None) -> list:
    """``count`` frames of a video (pillow RGB images), spread evenly from its first to its last, decoded by PyAV.

    Raises:
        InputError: the video cannot be opened, or holds fewer frames than ``count``.
        DependencyError: PyAV is not installed.
    """
    from PIL import Image

    from trtkit.pipeline.video import PyAVReader

    reader = PyAVReader(path)
    try:
        total = reader.frames
        if not total:  # the container does not say: count them
            counter = PyAVReader(path)
            total = sum(1 for _ in counter)
            counter.close()
        wanted = set(evenly(total, count, f"Frames of video '{path}'").tolist())
        pictures = []
        for index, image in enumerate(reader):
            if index in wanted:
                pictures.append(Image.fromarray(image))
            if index >= max(wanted):
                break
    finally:
        reader.close()
    return pictures
