"""Detector output layouts: a decoder for each, and :func:`find_layout` to tell which one a model's outputs have.

Every decoder takes a batch of outputs (numpy) and returns one :class:`Detections` per image, boxes x1, y1, x2, y2 in
input pixels (map them back through the letterbox with :meth:`Detections.mapped`):

- ``yolov8``: one output ``(N, 4 + classes, anchors)``: cx, cy, w, h in input pixels, then each class's score (after
  a sigmoid); class-aware NMS. Ultralytics exports YOLOv8, YOLO11 and YOLOv5u (``yolov5nu.yaml``: YOLOv5's backbone
  with YOLOv8's anchor-free, objectness-free head) this way, as ``output0``, e.g. ``(1, 84, 8400)`` at 640.
- ``yolov5``: one output ``(N, anchors, 5 + classes)``: cx, cy, w, h in input pixels, the objectness, then each
  class's score (all after a sigmoid), a class scoring objectness times its score; NMS. The ``export.py`` of
  ultralytics/yolov5 writes it as ``output0``, e.g. ``(1, 25200, 85)`` at 640.
- ``detr-sigmoid``: boxes ``(N, queries, 4)``, cx, cy, w, h relative to the input, and class logits
  ``(N, queries, classes)``; each (query, class) pair scores the sigmoid of its logit, the best ``max_detections``
  pairs kept, no NMS. RF-DETR exports them as ``dets`` and ``labels`` (its ``PostProcess`` keeps the top 300);
  RT-DETR in transformers returns ``pred_boxes`` and ``logits`` (``post_process_object_detection``, focal loss).
- ``detr-softmax``: the same boxes, and logits ``(N, queries, classes + 1)`` whose last class is "no object": each
  query's best other class after a softmax, no NMS. DETR in transformers returns ``logits`` and ``pred_boxes``.
- ``efficient-nms``: TensorRT's ``EfficientNMS_TRT`` outputs: the count ``(N, 1)``, boxes ``(N, K, 4)`` x1, y1, x2,
  y2 in input pixels, scores and classes ``(N, K)``, named ``num_dets, boxes, scores, classes``
  (``trtkit build --add-nms``), ``num_dets, det_boxes, det_scores, det_classes`` or with ``labels`` for the classes.

Where the shapes fit both YOLO layouts, the longer axis is taken for the anchors. RT-DETR's and DETR's outputs have
the same names and ranks, so they fit both DETR layouts and one is asked for by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from trtkit.detection.postprocess import MAX_CLASSES, Detections, decode, from_efficient_nms, xywh_to_xyxy
from trtkit.errors import InputError, UsageError


class LayoutError(InputError, UsageError):
    """The outputs fit no known layout, several, or not the one asked for; or the layout asked for is unknown."""


@dataclass(frozen=True)
class Head:
    """A layout bound to a model's outputs.

    Attributes:
        layout: its name, a key of :data:`LAYOUTS`.
        outputs: what each output is, role → output name (``head``; ``boxes``, ``logits``; ``count``, ``boxes``,
            ``scores``, ``classes``).
        classes: the number of classes; ``None`` where the outputs do not tell (the plugin's, symbolic dims).
        likely: ``False`` where the outputs fit but their proportions or names point to another layout.
    """

    layout: str
    outputs: dict
    classes: int | None = None
    likely: bool = True

    def decode(self, outputs: dict, size=None, **options) -> list[Detections]:
        """The detections of a batch of ``outputs`` (output name → array) for an input of ``size`` ``(H, W)``.

        Args:
            options: ``conf_threshold``, ``iou_threshold`` (the YOLO layouts), ``max_detections``, and
                :func:`~trtkit.detection.decode`'s ``multi_label`` and ``max_candidates`` (the YOLO layouts).
        """
        arrays = {role: np.asarray(outputs[name]) for role, name in self.outputs.items()}
        return LAYOUTS[self.layout].decode(arrays, size, **options)


@dataclass(frozen=True)
class Layout:
    """An output layout: what it looks like (for messages), how to recognise it and how to decode it."""

    what: str
    match: Callable[[dict], Head | None]
    decode: Callable[..., list]


def _yolo(name: str, extra: int, channels_axis: int):
    """The match of a one-output YOLO head ``(N, ., .)`` with ``extra`` rows before the classes."""

    def match(shapes: dict) -> Head | None:
        if len(shapes) != 1 or len(next(iter(shapes.values()))) != 3:
            return None
        output, dims = next(iter(shapes.items()))
        channels, anchors = dims[channels_axis], dims[3 - channels_axis]
        if channels is None or not extra < channels <= extra + MAX_CLASSES:
            return None
        return Head(name, {"head": output}, channels - extra, likely=anchors is None or anchors > channels)

    return match


BOX_NAMES = ("dets", "pred_boxes", "boxes")


def _detr(name: str, extra: int):
    """The match of DETR-family outputs: boxes ``(N, Q, 4)`` and logits ``(N, Q, classes + extra)``; other outputs
    (an RF-DETR segmentation model's ``masks``) are left alone."""

    def match(shapes: dict) -> Head | None:
        ranked = {n: d for n, d in shapes.items() if len(d) == 3}
        boxes = [n for n, d in ranked.items() if d[2] == 4]
        boxes = [n for n in boxes if n in BOX_NAMES] if len(boxes) > 1 else boxes
        logits = [n for n, d in ranked.items() if boxes and n != boxes[0] and d[:2] == ranked[boxes[0]][:2]]
        if len(boxes) != 1 or len(logits) != 1 or (ranked[logits[0]][2] or 0) <= extra:
            return None
        rf_detr = (boxes[0], logits[0]) == ("dets", "labels")
        classes = ranked[logits[0]][2] - extra
        return Head(name, {"boxes": boxes[0], "logits": logits[0]}, classes, likely=not (extra and rf_detr))

    return match


NMS_ROLES = {"count": ("num",), "boxes": ("box",), "scores": ("score",), "classes": ("class", "label")}


def _efficient_nms(shapes: dict) -> Head | None:
    roles = {}
    for role, words in NMS_ROLES.items():
        named = [n for n in shapes if any(w in n.lower() for w in words)]
        if len(named) != 1:
            return None
        roles[role] = named[0]
    if len(set(roles.values())) != 4 or len(shapes[roles["boxes"]]) != 3:
        return None
    return Head("efficient-nms", roles)


def _yolov8(arrays: dict, size, **options) -> list[Detections]:
    return decode(arrays["head"], **options)


def _yolov5(arrays: dict, size, conf_threshold: float = 0.25, **options) -> list[Detections]:
    results = []
    for rows in np.asarray(arrays["head"], np.float32):
        rows = rows[rows[:, 4] > conf_threshold]  # a class scores at most the objectness
        head = np.concatenate([rows[:, :4], rows[:, 5:] * rows[:, 4:5]], axis=1).T[None]
        results += decode(head, conf_threshold, **options)
    return results


def _detr_sigmoid(arrays: dict, size, conf_threshold: float = 0.25, max_detections: int = 300, **_) -> list:
    results = []
    for boxes, logits in zip(_pixels(arrays["boxes"], size), np.asarray(arrays["logits"], np.float32)):
        scores = 0.5 + 0.5 * np.tanh(0.5 * logits.reshape(-1))  # the sigmoid, without overflow
        top = _best(scores, conf_threshold, max_detections)
        classes = logits.shape[1]
        results.append(Detections(boxes[top // classes], scores[top], (top % classes).astype(np.int32)))
    return results


def _detr_softmax(arrays: dict, size, conf_threshold: float = 0.25, max_detections: int = 300, **_) -> list:
    results = []
    for boxes, logits in zip(_pixels(arrays["boxes"], size), np.asarray(arrays["logits"], np.float32)):
        exp = np.exp(logits - logits.max(-1, keepdims=True))
        probs = exp[:, :-1] / exp.sum(-1, keepdims=True)  # the last class is "no object"
        classes, scores = probs.argmax(-1).astype(np.int32), probs.max(-1)
        top = _best(scores, conf_threshold, max_detections)
        results.append(Detections(boxes[top], scores[top], classes[top]))
    return results


def _best(scores: np.ndarray, threshold: float, limit: int) -> np.ndarray:
    """Indices of the best ``limit`` scores above ``threshold``, best first."""
    above = np.nonzero(scores > threshold)[0]
    return above[np.argsort(-scores[above], kind="stable")[:limit]]


def _pixels(boxes, size) -> np.ndarray:
    """``(N, Q, 4)`` cx, cy, w, h relative to the input → x1, y1, x2, y2 in its pixels."""
    if size is None:
        raise LayoutError("The DETR layouts give boxes relative to the input: pass its size=(height, width).")
    height, width = size
    return xywh_to_xyxy(np.asarray(boxes, np.float32)) * np.array([width, height, width, height], np.float32)


LAYOUTS: dict[str, Layout] = {
    "yolov8": Layout("one output (N, 4 + classes, anchors): YOLOv8, YOLO11, YOLOv5u", _yolo("yolov8", 4, 1), _yolov8),
    "yolov5": Layout("one output (N, anchors, 5 + classes) with objectness: YOLOv5", _yolo("yolov5", 5, 2), _yolov5),
    "detr-sigmoid": Layout(
        "boxes (N, queries, 4) and logits (N, queries, classes), sigmoid top-k: RF-DETR, RT-DETR",
        _detr("detr-sigmoid", 0),
        _detr_sigmoid,
    ),
    "detr-softmax": Layout(
        "boxes (N, queries, 4) and logits (N, queries, classes + 1), softmax with no-object: DETR",
        _detr("detr-softmax", 1),
        _detr_softmax,
    ),
    "efficient-nms": Layout(
        "num_dets (N, 1), boxes (N, K, 4), scores, classes (N, K): EfficientNMS_TRT",
        _efficient_nms,
        lambda arrays, size, **_: from_efficient_nms(*(arrays[r] for r in NMS_ROLES)),
    ),
}


def fitting(outputs) -> list[Head]:
    """Every layout ``outputs`` fit (see :func:`find_layout` for ``outputs``), in :data:`LAYOUTS` order."""
    shapes = _shapes(outputs)
    return [head for head in (layout.match(shapes) for layout in LAYOUTS.values()) if head is not None]


def find_layout(outputs, head: str | None = None, *, unknown_ok: bool = False):
    """The layout of a detector's outputs (a :class:`Head`): ``head`` where given, else the one layout they fit.

    Args:
        outputs: output name → shape or array, or the engine's output specs (``name`` and ``shape`` each); a dim
            that is not a positive int is unknown.
        head: the name of a layout in :data:`LAYOUTS`; ``None``: the one the outputs fit.
        unknown_ok: return ``None`` rather than refuse outputs with unknown dims past the batch (their arrays tell).

    Raises:
        LayoutError: ``head`` is unknown, or the outputs do not fit it; they fit no layout, or several (both named).
    """
    shapes = _shapes(outputs)
    try:
        return _find(shapes, head)
    except LayoutError:
        if unknown_ok and head in (None, *LAYOUTS) and any(not d or None in d[1:] for d in shapes.values()):
            return None
        raise


def _find(shapes: dict, head: str | None) -> Head:
    found = ", ".join(f"'{name}' {_text(dims)}" for name, dims in shapes.items()) or "none"
    if head is not None:
        if head not in LAYOUTS:
            raise LayoutError(f"head={head!r} is not a known layout; use one of: {', '.join(LAYOUTS)}", field="head")
        bound = LAYOUTS[head].match(shapes)
        if bound is None:
            raise LayoutError(f"The outputs {found} do not fit head={head!r}: {LAYOUTS[head].what}", field="head")
        return bound
    fits = fitting(shapes)
    fits = [h for h in fits if h.likely] or fits
    if len(fits) == 1:
        return fits[0]
    if fits:
        raise LayoutError(
            f"The outputs {found} fit "
            + " and ".join(f"{h.layout} ({LAYOUTS[h.layout].what})" for h in fits)
            + "; choose one with "
            + " or ".join(f"head={h.layout!r}" for h in fits),
            field="head",
        )
    known = "; ".join(f"{name}: {layout.what}" for name, layout in LAYOUTS.items())
    raise LayoutError(f"The outputs {found} fit no known detector layout ({known})")


def detections_from_outputs(outputs: dict, size=None, *, head: str | None = None, **options) -> list[Detections]:
    """The detections of a batch of a detector's outputs (output name → array), whatever its layout (found with
    :func:`find_layout`); ``size``: the input's ``(H, W)``, which the DETR layouts' relative boxes need.

    Raises:
        LayoutError: as :func:`find_layout`.
    """
    return find_layout(outputs, head).decode(outputs, size, **options)


def _shapes(outputs) -> dict:
    """Output name → dims, each a positive int or ``None``."""
    if not isinstance(outputs, dict):
        outputs = {spec.name: spec.shape for spec in outputs}
    dims = {name: getattr(value, "shape", value) for name, value in outputs.items()}
    return {name: tuple(d if isinstance(d, int) and d > 0 else None for d in shape) for name, shape in dims.items()}


def _text(dims) -> str:
    return "(" + ", ".join("?" if d is None else str(d) for d in dims) + ")"
