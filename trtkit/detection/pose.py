"""Pose post-processing in numpy: heatmap keypoints refined below the cell, YOLOv8-pose heads, skeletons, drawing.

Two output forms, both decoded to :class:`Poses` in model-input pixels (:meth:`Poses.mapped` takes them to the
frame through the letterbox or plain resize that made the input):

- heatmaps ``(N, K, H, W)``, one per keypoint (Lightning Pose, HRNet-style models): :func:`decode_heatmaps`;
- a YOLOv8-pose head ``(N, 4 + 1 + 3K, anchors)``: rows ``cx, cy, w, h``, the person score, then ``x, y,
  visibility`` of each keypoint, in input pixels (``x, y`` alone for a ``kpt_shape`` of ``(K, 2)``, as ultralytics'
  metadata gives it): :func:`decode_pose_head`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trtkit.detection.draw import class_colour
from trtkit.detection.letterbox import LetterboxMeta
from trtkit.detection.postprocess import nms, xywh_to_xyxy
from trtkit.errors import InputError

CONFIDENCE_RADIUS = 2  # cells around the peak whose mass is a heatmap keypoint's confidence
LOG_FLOOR = 1e-300  # log h of a cell at or below zero: as if it were this (a steep fall, not a NaN)


@dataclass(frozen=True)
class Poses:
    """The keypoints of one image, one row per instance (a heatmap model has one; a YOLOv8-pose head one per person
    kept by NMS).

    Attributes:
        points: ``(P, K, 2)`` float32 x, y.
        confidence: ``(P, K)`` float32, 0..1 (see :func:`decode_heatmaps`; YOLOv8-pose: the keypoint's visibility).
        boxes: ``(P, 4)`` x1, y1, x2, y2 of each person (YOLOv8-pose), else ``None``.
        scores: ``(P,)`` person scores (YOLOv8-pose), else ``None``.
    """

    points: np.ndarray
    confidence: np.ndarray
    boxes: np.ndarray | None = None
    scores: np.ndarray | None = None

    def mapped(self, meta) -> Poses:
        """The same poses in the pixels of the frame the input was made from (``meta``: see :func:`to_frame`)."""
        boxes = None if self.boxes is None else to_frame(self.boxes.reshape(-1, 2, 2), meta).reshape(-1, 4)
        return Poses(to_frame(self.points, meta), self.confidence, boxes, self.scores)


def to_frame(points, meta) -> np.ndarray:
    """``(..., 2)`` x, y in model-input pixels → pixels of the frame the input was made from: ``(x - left) / sx``.

    Args:
        points: the points.
        meta: a :class:`~trtkit.detection.LetterboxMeta` (:class:`~trtkit.detection.Letterbox`'s), or the
            pipeline's preprocessing meta ``{"scale": s | (sx, sy), "pad": (left, top)}`` (a letterbox or a plain
            resize).
    """
    if isinstance(meta, LetterboxMeta):
        scale, pad = np.array([meta.scale, meta.scale]), np.array([meta.pad_x, meta.pad_y])
    else:
        scale, pad = np.broadcast_to(np.asarray(meta["scale"], np.float64), (2,)), np.asarray(meta["pad"])
    return ((np.asarray(points, np.float64) - pad) / scale).astype(np.float32)


def decode_heatmaps(heatmaps, input_size: tuple[int, int], *, refine: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """``(N, K, H, W)`` heatmaps → ``(N, K, 2)`` x, y in input pixels and ``(N, K)`` confidence.

    Each keypoint starts at its heatmap's peak cell ``(px, py)``; ``refine`` moves it by one Newton step on the
    log-heatmap ``L = log h`` (the Taylor expansion of DARK, Zhang et al., CVPR 2020), its derivatives the central
    differences at the peak::

        g = ((L[x+1] - L[x-1]) / 2,  (L[y+1] - L[y-1]) / 2)
        H = [[L[x+1] - 2 L + L[x-1],  (L[x+1,y+1] - L[x+1,y-1] - L[x-1,y+1] + L[x-1,y-1]) / 4],
             [the same,               L[y+1] - 2 L + L[y-1]]]
        (dx, dy) = -H^-1 g,  each clipped to one cell

    The log of a Gaussian is a quadratic, so this lands on a Gaussian heatmap's centre exactly, whatever its scale:
    a softmax-normalized heatmap such as Lightning Pose's (whose log is the logits) or an unnormalized one. A peak on
    the border, or where ``H`` is not negative definite (a flat or saddle-shaped top), stays at its cell.

    Cells map to input pixels as Lightning Pose and HRNet draw their training targets (a keypoint at input pixel x
    sits at heatmap coordinate ``x * w / W``): ``x = (px + dx) * W / w``.

    The confidence is the share of the heatmap's positive mass within :data:`CONFIDENCE_RADIUS` cells of the peak
    (Lightning Pose's likelihood pools its heatmap around the prediction alike): near 1 for one sharp peak, about
    1/2 for a keypoint split between two peaks (the ones that can flip from one to the other when precision
    changes), near 0 for a flat heatmap.

    Args:
        heatmaps: the model's heatmap output.
        input_size: the model input's ``(height, width)``.
        refine: the sub-pixel step; ``False``: the peak cell itself.
    """
    h = np.asarray(heatmaps, np.float64)
    _, _, rows, cols = h.shape
    py, px = np.divmod(h.reshape(*h.shape[:2], -1).argmax(-1), cols)
    positive = np.maximum(h, 0)
    near = _window(positive, py, px, CONFIDENCE_RADIUS).sum((-2, -1))
    confidence = near / np.maximum(positive.sum((-2, -1)), np.finfo(np.float64).tiny)
    x, y = px.astype(np.float64), py.astype(np.float64)
    if refine:
        dx, dy = _newton_step(np.log(np.maximum(_window(h, py, px, 1), LOG_FLOOR)))
        inside = (px > 0) & (px < cols - 1) & (py > 0) & (py < rows - 1)
        x, y = x + np.where(inside, dx, 0), y + np.where(inside, dy, 0)
    points = np.stack([x * (input_size[1] / cols), y * (input_size[0] / rows)], -1)
    return points.astype(np.float32), confidence.astype(np.float32)


def _window(h: np.ndarray, py: np.ndarray, px: np.ndarray, r: int) -> np.ndarray:
    """``(N, K, 2r + 1, 2r + 1)``: each heatmap's cells within ``r`` of its ``(py, px)``, zero outside the map."""
    padded = np.pad(h, ((0, 0), (0, 0), (r, r), (r, r)))
    span = np.arange(2 * r + 1)
    n, k = py.shape
    return padded[
        np.arange(n)[:, None, None, None],
        np.arange(k)[None, :, None, None],
        (py[..., None] + span)[..., :, None],
        (px[..., None] + span)[..., None, :],
    ]


def _newton_step(log3: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(dx, dy)`` of :func:`decode_heatmaps` from the log-heatmap's 3x3 cells around each peak."""
    c = log3[..., 1, 1]
    gx, gy = (log3[..., 1, 2] - log3[..., 1, 0]) / 2, (log3[..., 2, 1] - log3[..., 0, 1]) / 2
    hxx, hyy = log3[..., 1, 2] - 2 * c + log3[..., 1, 0], log3[..., 2, 1] - 2 * c + log3[..., 0, 1]
    hxy = (log3[..., 2, 2] - log3[..., 2, 0] - log3[..., 0, 2] + log3[..., 0, 0]) / 4
    det = hxx * hyy - hxy * hxy
    ok = (hxx < 0) & (det > 0)
    det = np.where(ok, det, 1.0)
    dx = np.where(ok, -(hyy * gx - hxy * gy) / det, 0.0)
    dy = np.where(ok, -(hxx * gy - hxy * gx) / det, 0.0)
    return np.clip(dx, -1, 1), np.clip(dy, -1, 1)


def pose_layout(output, kpt_shape=None) -> str:
    """``"heatmaps"`` for ``(N, K, H, W)``, ``"yolov8-pose"`` for ``(N, 5 + K * D, anchors)``, ``kpt_shape`` being
    ``(K, D)`` (``D``: 3 for x, y, visibility, 2 for x, y; ``None``: any ``K``, ``D`` = 3).

    Raises:
        InputError: neither (says what the output's shape is).
    """
    shape = tuple(np.shape(output))
    if len(shape) == 4:
        return "heatmaps"
    count, dims = kpt_shape or (None, 3)
    if len(shape) == 3 and shape[1] > 5 and (shape[1] - 5) % dims == 0 and count in (None, (shape[1] - 5) // dims):
        return "yolov8-pose"
    raise InputError(
        f"A pose model's output is heatmaps (N, K, H, W) or a YOLOv8-pose head (N, 5 + 3K, anchors); this one has "
        f"shape {shape}" + (f", which its kpt_shape {list(kpt_shape)} does not fit." if kpt_shape else ".")
    )


def pose_keypoints(head: np.ndarray, anchors, dims: int = 3) -> np.ndarray:
    """One image's ``(5 + K * dims, A)`` YOLOv8-pose head → ``(P, K, 3)`` x, y, visibility of the given anchors (1
    where the head has x, y alone: ``dims`` 2)."""
    anchors = np.asarray(anchors, np.int64).reshape(-1)
    points = head[5:, anchors].T.reshape(len(anchors), (head.shape[0] - 5) // dims, dims)
    return points if dims == 3 else np.concatenate([points, np.ones_like(points[..., :1])], -1)


def decode_pose_head(
    head, conf_threshold: float = 0.25, iou_threshold: float = 0.45, max_detections: int = 300, kpt_shape=None
) -> list[Poses]:
    """A batch of YOLOv8-pose heads ``(N, 5 + 3K, anchors)`` → one :class:`Poses` per image (input pixels): the
    anchors scoring above ``conf_threshold``, through NMS at ``iou_threshold``, best first; ``kpt_shape``: see
    :func:`pose_layout`.

    Raises:
        InputError: the output is not a YOLOv8-pose head (of ``kpt_shape``).
    """
    head = np.asarray(head)
    if pose_layout(head, kpt_shape) != "yolov8-pose":
        raise InputError(f"A YOLOv8-pose head is (N, 5 + 3K, anchors); this output has shape {head.shape}.")
    found = []
    for image in head:
        anchors = np.nonzero(image[4] > conf_threshold)[0]
        boxes = xywh_to_xyxy(image[:4, anchors].T)
        kept = anchors[nms(boxes, image[4, anchors], iou_threshold, max_output=max_detections)]
        keypoints = pose_keypoints(image, kept, (kpt_shape or (0, 3))[1]).astype(np.float32)
        boxes = xywh_to_xyxy(image[:4, kept].T).astype(np.float32)
        found.append(Poses(keypoints[..., :2], keypoints[..., 2], boxes, image[4, kept].astype(np.float32)))
    return found


def decode_poses(output, input_size: tuple[int, int], *, refine: bool = True, **head_options) -> list[Poses]:
    """Heatmaps or a YOLOv8-pose head (see :func:`pose_layout`) → one :class:`Poses` per image, in input pixels;
    ``head_options`` (``kpt_shape`` among them) go to :func:`decode_pose_head`."""
    if pose_layout(output, head_options.get("kpt_shape")) == "yolov8-pose":
        return decode_pose_head(output, **head_options)
    points, confidence = decode_heatmaps(output, input_size, refine=refine)
    return [Poses(p[None], c[None]) for p, c in zip(points, confidence)]


# COCO's 17 keypoints (nose, eyes, ears, shoulders, elbows, wrists, hips, knees, ankles), as its skeleton joins them
COCO17 = (
    (15, 13), (13, 11), (16, 14), (14, 12), (11, 12), (5, 11), (6, 12), (5, 6), (5, 7), (6, 8),
    (7, 9), (8, 10), (1, 2), (0, 1), (0, 2), (1, 3), (2, 4), (3, 5), (4, 6),
)  # fmt: skip


@dataclass(frozen=True)
class Skeleton:
    """Lines between keypoints, by index; ``keypoints``: the count it is made for (``None``: any count above its
    highest index)."""

    name: str
    pairs: tuple[tuple[int, int], ...]
    keypoints: int | None = None

    def check(self, count: int) -> None:
        """Raises :class:`~trtkit.errors.InputError` unless this skeleton fits a model of ``count`` keypoints."""
        need = self.keypoints or 1 + max((max(p) for p in self.pairs), default=-1)
        if need > count or (self.keypoints is not None and count != self.keypoints):
            raise InputError(
                f"Skeleton '{self.name}' joins {need} keypoints; the model gives {count}: give a skeleton for "
                f"{count} keypoints (a JSON file of [a, b] index pairs, 0 to {count - 1})."
            )


SKELETONS = {"coco17": Skeleton("coco17", COCO17, 17)}


def load_skeleton(spec: str) -> Skeleton:
    """A built-in skeleton by name (``coco17``) or a JSON file holding a list of ``[a, b]`` keypoint index pairs.

    Raises:
        InputError: neither a built-in name nor a readable file of such pairs.
    """
    if spec in SKELETONS:
        return SKELETONS[spec]
    try:
        pairs = json.loads(Path(spec).read_text())
        if not isinstance(pairs, list) or not all(
            isinstance(p, list) and len(p) == 2 and all(type(i) is int and i >= 0 for i in p) for p in pairs
        ):
            raise ValueError("it holds something else")
    except (OSError, ValueError) as exc:
        raise InputError(
            f"Skeleton '{spec}' is neither built in ({', '.join(SKELETONS)}) nor a JSON file of [a, b] keypoint index "
            f"pairs ({exc})"
        ) from exc
    return Skeleton(Path(spec).name, tuple((a, b) for a, b in pairs))


def draw_poses(image, poses: Poses, skeleton: Skeleton | None = None, *, min_confidence: float = 0.5, radius: int = 3):
    """A copy of ``image`` (pillow, in the pixels of ``poses``) with each person's box, its keypoints at or above
    ``min_confidence`` (coloured by keypoint) and the skeleton's lines between them (coloured by instance)."""
    from PIL import ImageDraw

    out = image.convert("RGB")
    pen = ImageDraw.Draw(out)
    for p, (points, confidence) in enumerate(zip(poses.points.tolist(), poses.confidence)):
        if poses.boxes is not None:
            pen.rectangle(poses.boxes[p].tolist(), outline=class_colour(p), width=2)
        shown = confidence >= min_confidence
        for a, b in skeleton.pairs if skeleton else ():
            if shown[a] and shown[b]:
                pen.line([tuple(points[a]), tuple(points[b])], fill=class_colour(p), width=2)
        for k in np.nonzero(shown)[0].tolist():
            x, y = points[k]
            pen.ellipse([x - radius, y - radius, x + radius, y + radius], fill=class_colour(k))
    return out
