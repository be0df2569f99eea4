"""Append TensorRT's ``EfficientNMS_TRT`` plugin to a YOLOv8-style detector with onnx-graphsurgeon.

The model's one output ``(N, 4 + classes, anchors)`` (``cx, cy, w, h`` then class scores) is transposed to
``(N, anchors, 4 + classes)``, split into boxes and scores, and fed to the plugin, whose outputs replace it:

    num_dets  (N, 1) int32            detections kept per image
    boxes     (N, max, 4) float32     x1, y1, x2, y2 in input pixels
    scores    (N, max) float32
    classes   (N, max) int32

TensorRT's ONNX parser builds an unknown op from the plugin registry by its name, so no code beyond TensorRT's own
plugin library is needed at build time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trtkit import _check
from trtkit.detection.heads import fitting
from trtkit.detection.postprocess import MAX_CLASSES, looks_transposed
from trtkit.errors import ModelError
from trtkit.model import load_model

PLUGIN_OP = "EfficientNMS_TRT"
# A domain of its own keeps ONNX's checker from looking the op up in the standard opset; TensorRT's parser finds
# importers and plugins by op type alone.
PLUGIN_DOMAIN = "trt"
OUTPUT_NAMES = ("num_dets", "boxes", "scores", "classes")


@dataclass(frozen=True)
class NmsOptions:
    """Settings of the appended plugin.

    Attributes:
        score_threshold: detections scoring at or below this are dropped.
        iou_threshold: NMS IoU threshold (boxes of different classes never suppress each other unless
            ``class_agnostic``).
        max_detections: detections kept per image (the outputs' second dimension).
        class_agnostic: one NMS over all classes.
    """

    score_threshold: float = 0.25
    iou_threshold: float = 0.45
    max_detections: int = 100
    class_agnostic: bool = False

    def __post_init__(self):
        if not 0.0 <= _check.number("score_threshold", self.score_threshold) < 1.0:
            _check.fail("score_threshold", self.score_threshold, "a number from 0 up to 1 (1 excluded)")
        _check.number("iou_threshold", self.iou_threshold, high=1.0, above=0.0)
        _check.integer("max_detections", self.max_detections, low=1)


def head_layout(proto, *, unknown_ok: bool = False) -> tuple:
    """The ``(batch, 4 + classes, anchors)`` dims of an ONNX model's only output (ONNX shape inference fixing the
    dims its declaration leaves symbolic).

    Args:
        unknown_ok: return the dims of a head whose class and anchor dims no inference here fixes, rather than
            refusing it (the check before any work: folding constants may fix them later).

    Raises:
        ModelError: the outputs are not one YOLOv8 head (the message says what was found).
    """
    from trtkit.model import value_dims

    outputs = [(o.name, value_dims(o) if o.type.tensor_type.HasField("shape") else None) for o in proto.graph.output]
    if len(outputs) == 1:
        outputs = [(outputs[0][0], inferred_output_shape(proto, outputs[0][1]))]
    found = ", ".join(f"'{name}' {_shape_text(shape)}" for name, shape in outputs)
    expected = "one output (N, 4 + classes, anchors) as YOLOv8 exports it"
    if any(node.op_type == PLUGIN_OP for node in proto.graph.node):
        raise ModelError(
            f"The model already ends in {PLUGIN_OP} (outputs {found}); it needs no add_nms.", field="add_nms"
        )
    detr = [h.layout for h in fitting({n: s for n, s in outputs if s is not None}) if h.layout.startswith("detr")]
    if detr:
        raise ModelError(
            f"add_nms applies to YOLO heads; outputs {found} are DETR-family boxes and class logits per query "
            f"({' or '.join(detr)}), which need no NMS: each query is one detection already.",
            field="add_nms",
        )
    if len(outputs) != 1:
        raise ModelError(f"add_nms needs {expected}; the model has {len(outputs)} outputs: {found}.", field="add_nms")
    shape = outputs[0][1]
    if shape is None or len(shape) != 3:
        raise ModelError(f"add_nms needs {expected}; found output {found}.", field="add_nms")
    channels, anchors = shape[1], shape[2]
    if isinstance(channels, int) and channels < 5:
        raise ModelError(
            f"add_nms needs {expected} with a second dimension of at least 5; found output {found}.", field="add_nms"
        )
    if not isinstance(channels, int) and not (isinstance(anchors, int) and anchors > 4 + MAX_CLASSES):
        if unknown_ok:
            return tuple(shape)
        raise ModelError(
            f"add_nms needs {expected}; found output {found}, whose dimensions ONNX shape inference cannot fix, "
            "so its layout cannot be checked. Export the model with static class and anchor dimensions.",
            field="add_nms",
        )
    if looks_transposed(channels, anchors):
        raise ModelError(
            f"add_nms needs {expected}; found output {found}, which looks like (N, anchors, 4 + classes) (more "
            f"than {MAX_CLASSES} classes otherwise). "
            "Export the model with the head transposed (YOLOv8's layout), or transpose it in the graph.",
            field="add_nms",
        )
    return tuple(shape)


def add_nms(model, options: NmsOptions | None = None):
    """A copy of ``model`` ending in TensorRT's ``EfficientNMS_TRT`` plugin.

    Args:
        model: ONNX path, bytes or ``onnx.ModelProto`` with one YOLOv8-style output.
        options: thresholds and the number of detections kept (:class:`NmsOptions`; default one).

    Returns:
        An ``onnx.ModelProto`` whose outputs are ``num_dets, boxes, scores, classes``.

    Raises:
        ModelError: the model cannot be read, or its output is not the YOLOv8 head layout (says what it found).
    """
    import onnx
    import onnx_graphsurgeon as gs

    options = options or NmsOptions()
    proto = load_model(model, check=False).proto
    batch, channels, anchors = head_layout(proto)
    graph = gs.import_onnx(proto)
    head = graph.outputs[0]
    classes = channels - 4 if isinstance(channels, int) else "classes"
    dtype = head.dtype if head.dtype is not None else np.float32
    rows = gs.Variable("nms_head_rows", dtype=dtype, shape=[batch, anchors, channels])
    graph.layer(op="Transpose", name="nms_head_transpose", inputs=[head], outputs=[rows], attrs={"perm": [0, 2, 1]})
    boxes = _slice(graph, gs, rows, 0, 4, "nms_boxes_in", [batch, anchors, 4], dtype)
    # to the end: the class count need not be known here, TensorRT knows it when it builds
    scores = _slice(graph, gs, rows, 4, _TO_END, "nms_scores_in", [batch, anchors, classes], dtype)
    max_det = options.max_detections
    outputs = [
        gs.Variable(OUTPUT_NAMES[0], dtype=np.int32, shape=[batch, 1]),
        gs.Variable(OUTPUT_NAMES[1], dtype=dtype, shape=[batch, max_det, 4]),
        gs.Variable(OUTPUT_NAMES[2], dtype=dtype, shape=[batch, max_det]),
        gs.Variable(OUTPUT_NAMES[3], dtype=np.int32, shape=[batch, max_det]),
    ]
    attrs = {
        "plugin_version": "1",
        "background_class": -1,
        "max_output_boxes": max_det,
        "score_threshold": float(options.score_threshold),
        "iou_threshold": float(options.iou_threshold),
        "score_activation": 0,
        "class_agnostic": int(options.class_agnostic),
        "box_coding": 1,  # BoxCenterSize: cx, cy, w, h in; corners out
    }
    graph.layer(
        op=PLUGIN_OP, name="efficient_nms", domain=PLUGIN_DOMAIN, inputs=[boxes, scores], outputs=outputs, attrs=attrs
    )
    graph.outputs = outputs
    graph.cleanup().toposort()
    model = gs.export_onnx(graph)
    model.metadata_props.extend(proto.metadata_props)  # a detector's class names, for one
    if not any(o.domain == PLUGIN_DOMAIN for o in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid(PLUGIN_DOMAIN, 1))
    return model


_TO_END = np.iinfo(np.int64).max


def inferred_output_shape(proto, declared) -> list | None:
    """The only output's dims: each declared one, or what ONNX shape inference finds where the declared one is
    symbolic (exporters often name dims they could have fixed)."""
    import copy

    import onnx

    if declared is None or all(isinstance(d, int) for d in declared):
        return declared
    probe = copy.deepcopy(proto)
    probe.graph.output[0].type.tensor_type.ClearField("shape")
    try:
        inferred = onnx.shape_inference.infer_shapes(probe).graph.output[0].type.tensor_type.shape.dim
    except Exception:  # noqa: BLE001 - inference is a best effort; the declared dims stand
        return declared
    if len(inferred) != len(declared):
        return declared
    return [
        d if isinstance(d, int) or not inf.HasField("dim_value") else int(inf.dim_value)
        for d, inf in zip(declared, inferred)
    ]


def _slice(graph, gs, tensor, start: int, end: int, name: str, shape, dtype):
    out = gs.Variable(name, dtype=dtype, shape=shape)
    consts = [
        gs.Constant(f"{name}_{k}", np.array([v], np.int64)) for k, v in (("starts", start), ("ends", end), ("axes", 2))
    ]
    graph.layer(op="Slice", name=f"{name}_slice", inputs=[tensor, *consts], outputs=[out])
    return out


def _shape_text(shape) -> str:
    if shape is None:
        return "(unknown shape)"
    return "(" + ", ".join(str(d) if d is not None else "?" for d in shape) + ")"
