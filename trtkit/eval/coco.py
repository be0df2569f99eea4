"""COCO box metrics through pycocotools: mAP@[.5:.95], mAP@.5, mAP@.75 and AR@100, in points (0-100)."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from trtkit.errors import DependencyError, InputError


@dataclass(frozen=True)
class CocoMetrics:
    """COCO box metrics, in points (0-100). ``detections``: how many detections were scored."""

    map: float
    map50: float
    map75: float
    ar100: float
    detections: int

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> CocoMetrics:
        return cls(**{k: data[k] for k in ("map", "map50", "map75", "ar100", "detections")})


def load_coco(path) -> dict:
    """Read a COCO annotation file.

    Raises:
        InputError: it cannot be read or lacks ``images``/``annotations``/``categories``.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"Cannot read COCO annotations '{path}': {exc}") from exc
    missing = [key for key in ("images", "annotations", "categories") if key not in data]
    if not isinstance(data, dict) or missing:
        raise InputError(f"COCO annotations '{path}' lack the keys: {', '.join(missing) or 'images'}.")
    return data


def category_ids(coco: dict) -> list[int]:
    """Category ids sorted: a detector's class index ``i`` is ``category_ids(coco)[i]``."""
    return sorted(int(c["id"]) for c in coco["categories"])


def to_coco_results(image_id: int, detections, categories: list[int]) -> list[dict]:
    """One image's :class:`~trtkit.detection.Detections` (original-image pixels) → COCO result entries.

    Raises:
        InputError: a class index has no category.
    """
    if len(detections) and int(detections.classes.max()) >= len(categories):
        raise InputError(
            f"Class index {int(detections.classes.max())} has no COCO category: the annotations have "
            f"{len(categories)} categories. Is this the model these annotations were made for?"
        )
    boxes = np.asarray(detections.boxes, np.float64)
    wh = boxes[:, 2:] - boxes[:, :2]
    return [
        {
            "image_id": int(image_id),
            "category_id": categories[int(c)],
            "score": float(s),
            "bbox": [float(boxes[k, 0]), float(boxes[k, 1]), float(wh[k, 0]), float(wh[k, 1])],
        }
        for k, (c, s) in enumerate(zip(detections.classes, detections.scores))
    ]


def evaluate_coco(coco: dict, results: list[dict], image_ids: list[int] | None = None) -> CocoMetrics:
    """Score COCO result entries against the annotations with pycocotools' COCOeval (bbox).

    Args:
        coco: the annotations (:func:`load_coco`).
        results: entries as made by :func:`to_coco_results`.
        image_ids: score these images only (default: every image of the annotations).

    Raises:
        DependencyError: pycocotools is not installed.
    """
    try:
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval
    except ImportError as exc:
        raise DependencyError(
            "COCO metrics need pycocotools: pip install 'trtkit[eval]' (or pip install pycocotools)."
        ) from exc
    if not results:
        return CocoMetrics(0.0, 0.0, 0.0, 0.0, 0)
    # pycocotools prints its progress and summary; library code keeps stdout for the caller.
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = coco
        gt.createIndex()
        dt = gt.loadRes(results)
        ev = COCOeval(gt, dt, "bbox")
        if image_ids is not None:
            ev.params.imgIds = sorted(image_ids)
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    s = [max(0.0, float(v)) * 100.0 for v in ev.stats]
    return CocoMetrics(round(s[0], 3), round(s[1], 3), round(s[2], 3), round(s[8], 3), len(results))
