"""Keypoint deviation in pixels of an engine against its ONNX model (``trtkit eval detection --metric keypoint-px``).

Pose users judge an engine by how far its keypoints move from the ONNX model's, in input pixels. Two output forms:

- heatmaps ``(N, K, H, W)``: each keypoint is its heatmap's peak, scaled from the heatmap grid to the input;
- a YOLOv8-pose head ``(N, 4 + 1 + 3K, anchors)``: the keypoints ``(x, y, visibility)`` of the anchor the ONNX
  model scores highest (the same anchor is read from the engine, so both describe the same person).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from trtkit.detection import Letterbox, list_images
from trtkit.errors import InputError
from trtkit.eval.detection import read_images
from trtkit.eval.models import open_model


@dataclass(frozen=True)
class KeypointDeviation:
    """Deviation of the model's keypoints from the reference's, in input pixels."""

    max_px: float
    mean_px: float
    p99_px: float
    images: int
    keypoints: int
    layout: str

    def to_json(self) -> dict:
        return asdict(self)


def heatmap_peaks(heatmaps: np.ndarray, input_size: tuple[int, int]) -> np.ndarray:
    """``(N, K, H, W)`` heatmaps → ``(N, K, 2)`` peak ``x, y`` in input pixels."""
    n, k, h, w = heatmaps.shape
    flat = heatmaps.reshape(n, k, h * w).argmax(-1)
    ys, xs = np.divmod(flat, w)
    return np.stack([xs * (input_size[1] / w), ys * (input_size[0] / h)], -1).astype(np.float32)


def pose_keypoints(head: np.ndarray, anchors: np.ndarray) -> np.ndarray:
    """``(N, 5 + 3K, A)`` YOLOv8-pose head → ``(N, K, 2)`` keypoints of the given anchor of each image."""
    rows = head[np.arange(len(head)), 5:, anchors]  # (N, 3K)
    return rows.reshape(len(head), -1, 3)[..., :2]


def _layout(output: np.ndarray) -> str:
    if output.ndim == 4:
        return "heatmaps"
    if output.ndim == 3 and output.shape[1] > 5 and (output.shape[1] - 5) % 3 == 0:
        return "yolov8-pose"
    raise InputError(
        f"The keypoint-px metric reads heatmaps (N, K, H, W) or a YOLOv8-pose head (N, 5 + 3K, anchors); the model's "
        f"first output has shape {tuple(output.shape)}."
    )


def compare(ours: np.ndarray, ref: np.ndarray, input_size) -> tuple[np.ndarray, str]:
    """Per-keypoint pixel distances between two batches of outputs of one layout."""
    layout = _layout(ref)
    if ours.shape != ref.shape:
        raise InputError(f"The model's output {tuple(ours.shape)} and the reference's {tuple(ref.shape)} differ.")
    if layout == "heatmaps":
        a, b = heatmap_peaks(ours, input_size), heatmap_peaks(ref, input_size)
    else:
        best = ref[:, 4].argmax(-1)
        a, b = pose_keypoints(ours, best), pose_keypoints(ref, best)
    return np.linalg.norm(a - b, axis=-1).reshape(-1), layout


def evaluate_keypoints(
    model, images, reference, *, batch: int = 8, runner_options: dict | None = None
) -> KeypointDeviation:
    """Max, mean and 99th-percentile keypoint deviation (input pixels) of ``model`` from ``reference``.

    Raises:
        InputError: no reference, an unknown output layout, or no readable image.
    """
    if reference is None:
        raise InputError(
            "The keypoint-px metric compares against the ONNX model: give it as reference.", field="reference"
        )
    pairs = [(p, i) for i, p in enumerate(list_images(images))]
    with open_model(model, runner_options=runner_options) as ours, open_model(reference) as ref:
        letterbox = Letterbox(ours.input_size)
        distances: list[np.ndarray] = []
        skipped: list[tuple[str, str]] = []
        layout = ""
        for pils, _ in read_images(pairs, min(batch, ours.max_batch, ref.max_batch), skipped):
            x, _ = letterbox(pils)
            a = np.asarray(next(iter(ours.infer({ours.input_name: x}).values())))
            b = np.asarray(next(iter(ref.infer({ref.input_name: x}).values())))
            d, layout = compare(a, b, ours.input_size)
            distances.append(d)
    if not distances:
        raise InputError(f"No image of '{images}' could be read ({len(skipped)} skipped).")
    d = np.concatenate(distances)
    per_image = len(d) // (len(pairs) - len(skipped))
    return KeypointDeviation(
        round(float(d.max()), 3),
        round(float(d.mean()), 4),
        round(float(np.percentile(d, 99)), 3),
        len(pairs) - len(skipped),
        per_image,
        layout,
    )
