"""``--post detection``: the pipeline's pre/post/draw from :mod:`trtkit.detection` (letterbox, the decode of the
engine's output layout, drawing), adapted to the pipeline's per-frame protocol.

``trtkit.detection`` is imported on first use; where this trtkit does not have it, :func:`detection_processing`
says so.
"""

from __future__ import annotations

import numpy as np

from trtkit.errors import DependencyError
from trtkit.pipeline.api import Processing


def _detection():
    import importlib

    try:
        detection = importlib.import_module("trtkit.detection")
    except ImportError as exc:
        raise DependencyError(
            f"Detection postprocessing needs trtkit.detection, which this trtkit does not have "
            f"({exc}); run without it to save the raw outputs"
        ) from exc
    return detection


def detection_processing(
    conf_threshold: float = 0.25, iou_threshold: float = 0.45, class_names=None, head: str | None = None, normalize=None
) -> Processing:
    """pre: letterbox to the engine's input (``normalize``: its mean/std, :class:`Processing`'s; ``meta``: the
    letterbox geometry); post: the frame's detections with
    boxes in the frame's pixels; draw: the boxes and labels (``class_names`` by class index) on the frame.

    The output layout (:data:`trtkit.detection.LAYOUTS`) is ``head``, or the one the engine's outputs fit; it is
    found, and ``class_names`` checked against the model's classes, when the engine is open, before any frame is
    read: ``run_engine`` raises :class:`~trtkit.detection.LayoutError` for outputs that fit no layout, several or
    not ``head``, and :class:`~trtkit.errors.UsageError` for fewer ``class_names`` than classes.

    Raises:
        DependencyError: this trtkit has no ``trtkit.detection``.
    """
    detection = _detection()

    def bind(layout):
        if layout is not None:
            detection.check_names(class_names, layout.classes)
        return layout

    def for_engine(target, output_specs) -> Processing:
        found = [bind(detection.find_layout(output_specs, head, unknown_ok=True))]  # unknown dims: the first frame's
        size = (target.height, target.width)
        letterbox = detection.Letterbox(size, dtype=target.dtype, layout=target.layout, **(normalize or {}))

        def pre(image):
            batch, metas = letterbox([image])
            return batch[0], metas[0]

        def post(outputs, meta, image):
            batched = {name: np.asarray(value)[None] for name, value in outputs.items()}
            found[0] = found[0] or bind(detection.find_layout(batched, head))
            dets = found[0].decode(batched, size, conf_threshold=conf_threshold, iou_threshold=iou_threshold)
            return dets[0].mapped(meta)

        def draw(image, detections):
            from PIL import Image

            return np.asarray(detection.draw(Image.fromarray(np.asarray(image)), detections, class_names))

        # the same letterbox as the GPU kernels (pad 114, 1/255, Pillow's filter): device frames are preprocessed
        # there, their geometry the LetterboxMeta that ``post`` maps boxes back with
        return Processing(pre=pre, post=post, draw=draw, device_meta=lambda geometry: geometry, normalize=normalize)

    return Processing(for_engine=for_engine)
