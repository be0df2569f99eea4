"""Compare two `trtkit run --post detection --results` files frame by frame (the same video decoded two ways):
frames, detections per frame, and the IoU of boxes paired by class. Prints one JSON line.

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


if __name__ == "__main__":
    print(json.dumps(compare(load(sys.argv[1]), load(sys.argv[2]))))
