"""Detection pre- and post-processing for YOLO-style models: letterbox, head decode, NMS, drawing, NMS plugin.

The small API other code builds on::

    from trtkit.detection import Letterbox, decode, nms, draw

    letterbox = Letterbox((640, 640))
    batch, metas = letterbox(images)                  # (N, 3, 640, 640) float32, one LetterboxMeta per image
    dets = [d.mapped(m) for d, m in zip(decode(runner.infer({"images": batch})["output0"]), metas)]
    draw(image, dets[0], class_names).save("out.jpg")

``add_nms(model)`` appends TensorRT's ``EfficientNMS_TRT`` plugin so the engine returns
``num_dets, boxes, scores, classes``. :func:`find_layout` tells a detector's output layout (YOLOv8, YOLOv5, the DETR
family, the plugin's) from its outputs, and :func:`detections_from_outputs` decodes any of them.
"""

from __future__ import annotations

from trtkit.detection.draw import draw
from trtkit.detection.heads import LAYOUTS, Head, LayoutError, detections_from_outputs, find_layout
from trtkit.detection.letterbox import (
    ImageReadError,
    Letterbox,
    LetterboxMeta,
    letterbox_meta,
    list_images,
    open_image,
)
from trtkit.detection.names import check_names, metadata_names, read_names
from trtkit.detection.nms_plugin import NmsOptions, add_nms  # onnx-graphsurgeon is imported on first use
from trtkit.detection.postprocess import (
    Detections,
    box_iou,
    check_head,
    decode,
    from_efficient_nms,
    nms,
    xywh_to_xyxy,
)

__all__ = [
    "LAYOUTS",
    "Detections",
    "Head",
    "ImageReadError",
    "LayoutError",
    "Letterbox",
    "LetterboxMeta",
    "NmsOptions",
    "add_nms",
    "box_iou",
    "check_head",
    "check_names",
    "decode",
    "detections_from_outputs",
    "draw",
    "find_layout",
    "from_efficient_nms",
    "letterbox_meta",
    "list_images",
    "metadata_names",
    "nms",
    "open_image",
    "read_names",
    "xywh_to_xyxy",
]
