"""``--post detection``: the pipeline's pre/post/draw from :mod:`trtkit.detection` (letterbox, head decode or the
EfficientNMS outputs, NMS, drawing), adapted to the pipeline's per-frame protocol.

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


def detection_processing(conf_threshold: float = 0.25, iou_threshold: float = 0.45, class_names=None) -> Processing:
    """pre: letterbox to the engine's input (``meta``: the letterbox geometry); post: the frame's detections with
    boxes in the frame's pixels; draw: the boxes and labels on the frame.

    Raises:
        DependencyError: this trtkit has no ``trtkit.detection``.
    """
    detection = _detection()

    def pre_for(target):
        letterbox = detection.Letterbox((target.height, target.width), dtype=target.dtype)

        def pre(image):
            batch, metas = letterbox([image])
            return batch[0], metas[0]

        return pre

    def post(outputs, meta, image):
        batched = {name: np.asarray(value)[None] for name, value in outputs.items()}
        found = detection.detections_from_outputs(batched, conf_threshold=conf_threshold, iou_threshold=iou_threshold)
        return found[0].mapped(meta)

    def draw(image, detections):
        from PIL import Image

        return np.asarray(detection.draw(Image.fromarray(np.asarray(image)), detections, class_names))

    # the same letterbox as the GPU kernels (pad 114, 1/255, Pillow's filter): device frames are preprocessed there,
    # their geometry the LetterboxMeta that ``post`` maps boxes back with
    return Processing(post=post, draw=draw, pre_for=pre_for, device_meta=lambda geometry: geometry)
