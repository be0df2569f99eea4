"""Post-processing of YOLO-style detector outputs in numpy: decode the head, class-aware NMS, plugin outputs.

The head layout is YOLOv8's: one output ``(N, 4 + classes, anchors)``, rows ``cx, cy, w, h`` in input pixels, then
one score per class (already through a sigmoid). Engines built with ``--add-nms`` return TensorRT's
``EfficientNMS_TRT`` outputs instead; :func:`from_efficient_nms` turns those into the same :class:`Detections`.
The other layouts (YOLOv5's, the DETR family's) are decoded in :mod:`trtkit.detection.heads`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trtkit.errors import InputError


@dataclass(frozen=True)
class Detections:
    """The detections of one image, best score first.

    Attributes:
        boxes: ``(K, 4)`` float32 x1, y1, x2, y2.
        scores: ``(K,)`` float32.
        classes: ``(K,)`` int32 class indices.
    """

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray

    def __len__(self) -> int:
        return len(self.scores)

    @classmethod
    def empty(cls) -> Detections:
        return cls(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int32))

    def mapped(self, meta) -> Detections:
        """The same detections with boxes mapped through ``meta`` (a :class:`LetterboxMeta`) to the original image."""
        return Detections(meta.to_original(self.boxes), self.scores, self.classes)


def xywh_to_xyxy(boxes: np.ndarray) -> np.ndarray:
    """``(..., 4)`` centre x, centre y, width, height → x1, y1, x2, y2."""
    half = boxes[..., 2:4] / 2
    return np.concatenate([boxes[..., 0:2] - half, boxes[..., 0:2] + half], axis=-1)


def box_iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """IoU of one x1, y1, x2, y2 ``box`` with each of ``(K, 4)`` ``boxes``."""
    ix = np.clip(np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0]), 0, None)
    iy = np.clip(np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1]), 0, None)
    inter = ix * iy
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    return inter / np.maximum(area + areas - inter, 1e-9)


def nms(
    boxes: np.ndarray,
    scores: np.ndarray,
    iou_threshold: float,
    classes: np.ndarray | None = None,
    max_output: int | None = None,
) -> np.ndarray:
    """Greedy non-maximum suppression; indices of the kept boxes, best score first.

    Args:
        boxes: ``(K, 4)`` x1, y1, x2, y2.
        scores: ``(K,)``.
        iou_threshold: a box whose IoU with a kept, better box is above this is dropped.
        classes: with class indices, boxes of different classes never suppress each other (class-aware NMS).
        max_output: stop after this many kept boxes.
    """
    boxes = np.asarray(boxes, np.float32)
    if classes is not None and len(boxes):
        # Shift each class to its own region so one IoU pass is class-aware.
        span = float(boxes.max() - min(boxes.min(), 0.0)) + 1.0
        boxes = boxes + (np.asarray(classes, np.float32) * span)[:, None]
    order = np.argsort(-np.asarray(scores), kind="stable")
    limit = len(order) if max_output is None else max_output
    if not order.size or limit < 1:
        return np.zeros(0, np.int64)
    # every IoU at once (the candidates are few once filtered by score), then one greedy pass, best first
    suppressed = iou_matrix(boxes[order]) > iou_threshold
    dropped = np.zeros(len(order), bool)
    keep: list[int] = []
    for k in range(len(order)):
        if dropped[k]:
            continue
        keep.append(k)
        if len(keep) == limit:
            break
        dropped |= suppressed[k]
    return order[np.asarray(keep, np.int64)]


def iou_matrix(boxes: np.ndarray) -> np.ndarray:
    """``(K, K)`` IoU of each x1, y1, x2, y2 box with each other, row ``i`` as :func:`box_iou` of box ``i``."""
    ix = np.clip(
        np.minimum(boxes[:, None, 2], boxes[None, :, 2]) - np.maximum(boxes[:, None, 0], boxes[None, :, 0]), 0, None
    )
    iy = np.clip(
        np.minimum(boxes[:, None, 3], boxes[None, :, 3]) - np.maximum(boxes[:, None, 1], boxes[None, :, 1]), 0, None
    )
    inter = ix * iy
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    return inter / np.maximum(areas[:, None] + areas[None, :] - inter, 1e-9)


MAX_CLASSES = 1000


def looks_transposed(channels, anchors) -> bool:
    """Whether a ``(N, channels, anchors)`` head is more likely ``(N, anchors, 4 + classes)``: more than
    :data:`MAX_CLASSES` classes, and fewer anchors than that."""
    return (
        isinstance(channels, int)
        and channels - 4 > MAX_CLASSES
        and (not isinstance(anchors, int) or anchors < channels)
    )


def check_head(output: np.ndarray) -> int:
    """The number of classes of a YOLOv8-style ``(N, 4 + classes, anchors)`` output.

    Raises:
        InputError: the array does not have that layout (says what it has).
    """
    if output.ndim != 3 or output.shape[1] < 5:
        raise InputError(
            f"A detector output of shape {tuple(output.shape)} is not the YOLOv8 head layout (N, 4 + classes, anchors)."
        )
    if looks_transposed(output.shape[1], output.shape[2]):
        raise InputError(
            f"A detector output of shape {tuple(output.shape)} looks like (N, anchors, 4 + classes) (more than "
            f"{MAX_CLASSES} classes otherwise); transpose it to (N, 4 + classes, anchors) first."
        )
    return output.shape[1] - 4


def decode(
    output: np.ndarray,
    conf_threshold: float = 0.25,
    iou_threshold: float = 0.45,
    max_detections: int = 300,
    multi_label: bool = False,
    max_candidates: int = 30000,
) -> list[Detections]:
    """Decode a batch of YOLOv8-style head outputs into :class:`Detections` (input pixels), one per image.

    Args:
        output: ``(N, 4 + classes, anchors)``.
        conf_threshold: candidates scoring at or below this are dropped.
        iou_threshold: class-aware NMS threshold.
        max_detections: kept per image.
        multi_label: every (anchor, class) above the threshold is a candidate, as TensorRT's EfficientNMS plugin
            treats them; otherwise only each anchor's best class.
        max_candidates: the best this many candidates per image enter NMS.

    Raises:
        InputError: the output does not have the YOLOv8 head layout.
    """
    output = np.asarray(output)
    check_head(output)
    results = []
    for i in range(output.shape[0]):
        scores_all = output[i, 4:]
        if multi_label:
            cls, anchor = np.nonzero(scores_all > conf_threshold)
            scores = scores_all[cls, anchor]
        else:  # filter by each anchor's best score first: the class argmax and the boxes only for what is left
            best_scores = scores_all.max(0)
            anchor = np.nonzero(best_scores > conf_threshold)[0]
            cls, scores = scores_all[:, anchor].argmax(0), best_scores[anchor]
        if scores.size > max_candidates:
            top = np.argpartition(-scores, max_candidates)[:max_candidates]
            cls, anchor, scores = cls[top], anchor[top], scores[top]
        boxes = xywh_to_xyxy(output[i, :4, anchor])
        keep = nms(boxes, scores, iou_threshold, classes=cls, max_output=max_detections)
        results.append(
            Detections(boxes[keep].astype(np.float32), scores[keep].astype(np.float32), cls[keep].astype(np.int32))
        )
    return results


def from_efficient_nms(
    num_dets: np.ndarray, boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray
) -> list[Detections]:
    """The four outputs of TensorRT's ``EfficientNMS_TRT`` plugin → one :class:`Detections` per image.

    The detections are copies: the outputs may be a runner's buffers, overwritten by its next call."""
    counts = np.asarray(num_dets).reshape(-1)
    return [
        Detections(
            np.array(boxes[i, :n], np.float32),
            np.array(scores[i, :n], np.float32),
            np.array(classes[i, :n], np.int32),
        )
        for i, n in enumerate(counts.astype(int))
    ]
