"""Draw detections on an image with pillow."""

from __future__ import annotations

PALETTE = (
    (255, 56, 56),
    (72, 249, 10),
    (0, 148, 255),
    (255, 178, 29),
    (207, 210, 49),
    (146, 204, 23),
    (61, 219, 134),
    (26, 147, 52),
    (0, 212, 187),
    (44, 153, 168),
    (0, 194, 255),
    (52, 69, 147),
    (100, 115, 255),
    (0, 24, 236),
    (132, 56, 255),
    (82, 0, 133),
    (203, 56, 255),
    (255, 149, 200),
)


def class_colour(index: int) -> tuple[int, int, int]:
    return PALETTE[int(index) % len(PALETTE)]


def draw(image, detections, class_names=None, *, line_width: int = 2):
    """A copy of ``image`` (pillow) with each detection's box and a ``name score`` label.

    Args:
        image: a pillow image; the boxes are in its pixels (map them back through the letterbox first).
        detections: a :class:`~trtkit.detection.Detections`.
        class_names: names by class index; the index itself where missing.
        line_width: box outline width in pixels.
    """
    from PIL import ImageDraw

    out = image.convert("RGB")
    pen = ImageDraw.Draw(out)
    for box, score, cls in zip(detections.boxes, detections.scores, detections.classes):
        colour = class_colour(cls)
        x1, y1, x2, y2 = (float(v) for v in box)
        pen.rectangle([x1, y1, x2, y2], outline=colour, width=line_width)
        name = class_names[cls] if class_names is not None and 0 <= cls < len(class_names) else str(int(cls))
        label = f"{name} {float(score):.2f}"
        left, top, right, bottom = pen.textbbox((x1, y1), label)
        lift = bottom - top + 2
        ty = y1 - lift if y1 >= lift else y1
        pen.rectangle([x1, ty, x1 + (right - left) + 4, ty + lift], fill=colour)
        pen.text((x1 + 2, ty), label, fill=(255, 255, 255))
    return out
