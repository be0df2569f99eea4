"""Compare two `trtkit run --results` files frame by frame (the same video decoded two ways). Detections
(``--post detection``): frames, detections per frame, and the IoU of boxes paired by class. Raw outputs (``--post
none``): per output, the largest and mean absolute difference, the outputs' own spread, and how often the arg max
(a classifier's top class) agrees. Prints one JSON line.

    python scripts/compare_runs.py a.jsonl b.jsonl
"""

from __future__ import annotations

import json
import sys


def load(path: str) -> list:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def boxes(record: dict) -> list:
    """``[(class, [x1, y1, x2, y2]), ...]`` of a line of JsonLinesSink (``result``: a Detections as JSON)."""
    found = record.get("result") or {}
    return list(zip(found.get("classes", []), found.get("boxes", [])))


def iou(a, b) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def compare(first: list, second: list) -> dict:
    paired, only, ious = 0, 0, []
    for x, y in zip(first, second):
        left, right = boxes(x), list(boxes(y))
        for cls, box in left:
            best = max(((iou(box, b), j) for j, (c, b) in enumerate(right) if c == cls), default=(0.0, None))
            if best[1] is None or best[0] < 0.5:
                only += 1
                continue
            ious.append(best[0])
            right.pop(best[1])
            paired += 1
        only += len(right)
    return {"frames": [len(first), len(second)], "boxes": [sum(len(boxes(r)) for r in first),
            sum(len(boxes(r)) for r in second)], "paired": paired, "unpaired": only,
            "min_iou": round(min(ious), 4) if ious else None,
            "mean_iou": round(sum(ious) / len(ious), 4) if ious else None}


def compare_raw(first: list, second: list) -> dict:
    """Per output name: ``max_abs_diff``, ``mean_abs_diff``, ``spread`` (the first file's standard deviation over
    every frame and element: what a difference is small against) and ``argmax_agree`` (the fraction of frames whose
    arg max is the same)."""
    import numpy as np

    outputs: dict = {}
    for name in (first[0].get("result") or {}) if first else ():
        a = np.array([np.asarray(r["result"][name], np.float64).ravel() for r in first])
        b = np.array([np.asarray(r["result"][name], np.float64).ravel() for r in second])
        if a.shape != b.shape:
            outputs[name] = {"shapes": [list(a.shape), list(b.shape)]}
            continue
        diff = np.abs(a - b)
        outputs[name] = {"max_abs_diff": round(float(diff.max()), 6), "mean_abs_diff": round(float(diff.mean()), 6),
                         "spread": round(float(a.std()), 6),
                         "argmax_agree": round(float((a.argmax(axis=1) == b.argmax(axis=1)).mean()), 4)}
    return {"frames": [len(first), len(second)], "outputs": outputs}


def is_detections(records: list) -> bool:
    return bool(records) and isinstance(records[0].get("result"), dict) and "boxes" in records[0]["result"]


if __name__ == "__main__":
    first, second = load(sys.argv[1]), load(sys.argv[2])
    print(json.dumps(compare(first, second) if is_detections(first) else compare_raw(first, second)))
