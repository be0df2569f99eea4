"""Tiny ONNX models generated for tests, each registered with what it is for.

Helpers add generators here as separate functions; keep each one small and deterministic.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def _model(nodes, inputs, outputs, inits=(), opset=OPSET, name="test"):
    graph = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    model = helper.make_model(graph, producer_name="trtkit-tests", opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def tiny_conv(*, dynamic_batch: bool = True, channels: int = 4, size: int = 8, seed: int = 0):
    """Conv → Relu → GlobalAveragePool: the smallest network with a real convolution (builder/runtime paths)."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((channels, 3, 3, 3)).astype(np.float32) * 0.3, "w")
    b = numpy_helper.from_array(rng.standard_normal(channels).astype(np.float32) * 0.1, "b")
    batch = "N" if dynamic_batch else 1
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["y"], name="pool"),
    ]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, size, size])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, channels, 1, 1])], [w, b])


def two_inputs(*, dynamic: bool = True):
    """y = a * 2 + b: two inputs, for missing/extra/misnamed input errors."""
    two = numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two")
    dims = ["N", 4] if dynamic else [2, 4]
    nodes = [helper.make_node("Mul", ["a", "two"], ["m"], name="mul"),
             helper.make_node("Add", ["m", "b"], ["y"], name="add")]
    return _model(nodes, [helper.make_tensor_value_info("a", TensorProto.FLOAT, dims),
                          helper.make_tensor_value_info("b", TensorProto.FLOAT, dims)],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)], [two])


def unsupported_op():
    """Relu followed by a custom-domain op that no TensorRT parser (nor plugin) knows: a valid ONNX model that
    TensorRT refuses to parse (the fake parser refuses it the same way)."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Mystery", ["r"], ["y"], name="mystery", domain="com.example")]
    graph = helper.make_graph(nodes, "unsupported", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET),
                                                    helper.make_opsetid("com.example", 1)])
    model.ir_version = 8
    return model


def constant_detector(head: np.ndarray, *, size: int = 32):
    """A YOLOv8-layout "detector" whose output is always ``head`` (1, 4 + classes, anchors), repeated over the batch:
    input ``images`` (N, 3, size, size), output ``output0`` (N, 4 + classes, anchors). For evaluation and NMS-graph
    tests whose right answer is known from ``head``."""
    head = np.asarray(head, np.float32)
    const = numpy_helper.from_array(head, "head")
    nodes = [
        helper.make_node("ReduceMean", ["images"], ["m"], name="mean", axes=[1, 2, 3], keepdims=0),
        helper.make_node("Mul", ["m", "zero"], ["z"], name="zero_out"),
        helper.make_node("Reshape", ["z", "col"], ["z3"], name="to_3d"),
        helper.make_node("Add", ["z3", "head"], ["output0"], name="add_head"),
    ]
    inits = [const, numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
             numpy_helper.from_array(np.array([-1, 1, 1], np.int64), "col")]
    return _model(nodes, [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, size, size])],
                  [helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["N", head.shape[1], head.shape[2]])],
                  inits, name="constant_detector")


def constant_outputs(outputs: dict, *, size: int = 32, uint8_nhwc: bool = False, metadata: dict | None = None):
    """A "detector" of any output layout: input ``images`` (N, 3, size, size) float32, or (N, size, size, 3) uint8
    with ``uint8_nhwc`` (an engine built with ``--input-uint8-nhwc``); each output ``name`` is always the array
    ``outputs[name]`` (1, A, B), repeated over the batch. ``metadata`` becomes the model's ``metadata_props``. For
    decode, layout and pipeline tests of the DETR family and YOLOv5 heads whose right answer is known."""
    nodes = [helper.make_node("Cast", ["images"], ["pixels"], to=TensorProto.FLOAT),
             helper.make_node("ReduceMean", ["pixels"], ["m"], axes=[1, 2, 3], keepdims=0),
             helper.make_node("Mul", ["m", "zero"], ["z"]),
             helper.make_node("Reshape", ["z", "col"], ["z3"])]
    inits = [numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
             numpy_helper.from_array(np.array([-1, 1, 1], np.int64), "col")]
    declared = []
    for name, value in outputs.items():
        value = np.asarray(value, np.float32)
        inits.append(numpy_helper.from_array(value, f"{name}_value"))
        nodes.append(helper.make_node("Add", ["z3", f"{name}_value"], [name]))
        declared.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, ["N", *value.shape[1:]]))
    image = (helper.make_tensor_value_info("images", TensorProto.UINT8, ["N", size, size, 3]) if uint8_nhwc else
             helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, size, size]))
    model = _model(nodes, [image], declared, inits, name="constant_outputs")
    if metadata:
        helper.set_model_props(model, metadata)
    return model


def conv_detector(*, size: int = 32, classes: int = 2, seed: int = 0, opset: int = OPSET):
    """A convolutional YOLOv8-layout head with random weights: images (N, 3, size, size) → Conv stride 8 → Sigmoid
    → output0 (N, 4 + classes, (size / 8)^2), the four box rows scaled to input pixels. Cheap to run, quantizable."""
    rng = np.random.default_rng(seed)
    rows = 4 + classes
    w = numpy_helper.from_array(rng.standard_normal((rows, 3, 8, 8)).astype(np.float32) * 0.2, "w")
    scale = numpy_helper.from_array(np.array([size, size, size / 4, size / 4] + [1.0] * classes,
                                             np.float32).reshape(1, rows, 1), "scale")
    nodes = [
        helper.make_node("Conv", ["images", "w"], ["c"], name="head_conv", strides=[8, 8]),
        helper.make_node("Sigmoid", ["c"], ["s"], name="sigmoid"),
        helper.make_node("Reshape", ["s", "shape"], ["r"], name="flatten"),
        helper.make_node("Mul", ["r", "scale"], ["output0"], name="to_pixels"),
    ]
    inits = [w, scale, numpy_helper.from_array(np.array([0, rows, -1], np.int64), "shape")]
    anchors = (size // 8) ** 2
    return _model(nodes, [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, size, size])],
                  [helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["N", rows, anchors])], inits,
                  opset=opset, name="conv_detector")


def expand_shape(*, rank: int = 3):
    """y = Expand(x, shape): ``shape`` (INT64, ``rank`` values) is a graph input TensorRT parses as a shape tensor,
    as in onnx's test_expand_shape_model cases (its profile gives values, not dims)."""
    nodes = [helper.make_node("Expand", ["x", "shape"], ["y"], name="expand")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 1]),
                          helper.make_tensor_value_info("shape", TensorProto.INT64, [rank])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [f"d{i}" for i in range(rank)])],
                  name="expand_shape")


def reshape_shape(*, size: int = 12):
    """y = Reshape(x, shape) + 1: a 2-value shape-tensor input whose elementwise max values need not be a valid shape
    of ``size`` elements (the runner sizes outputs at the opt values then)."""
    one = numpy_helper.from_array(np.array(1.0, dtype=np.float32), "one")
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
             helper.make_node("Add", ["r", "one"], ["y"], name="add")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [size]),
                          helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", "cols"])], [one],
                  name="reshape_shape")


def constant_pose(output: np.ndarray, *, size: int = 32, name: str = "heatmaps"):
    """A pose "model" whose output ``name`` is always ``output`` (``(1, K, H, W)`` heatmaps or a ``(1, 5 + 3K,
    anchors)`` YOLOv8-pose head), repeated over the batch; input ``images`` (N, 3, size, size). For decoding,
    drawing and mapping tests whose right answer is known from ``output``."""
    output = np.asarray(output, np.float32)
    nodes = [
        helper.make_node("ReduceMean", ["images"], ["m"], name="mean", axes=[1, 2, 3], keepdims=0),
        helper.make_node("Mul", ["m", "zero"], ["z"], name="zero_out"),
        helper.make_node("Reshape", ["z", "col"], ["zs"], name="to_rank"),
        helper.make_node("Add", ["zs", "constant"], [name], name="add_output"),
    ]
    inits = [numpy_helper.from_array(output, "constant"), numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
             numpy_helper.from_array(np.array([-1] + [1] * (output.ndim - 1), np.int64), "col")]
    return _model(nodes, [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, size, size])],
                  [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["N", *output.shape[1:]])], inits,
                  name="constant_pose")


def pooled_heatmaps(*, size: int = 32, stride: int = 4, name: str = "heatmaps"):
    """A heatmap pose model of 3 keypoints: images (N, 3, size, size) → ``name`` (N, 3, size / stride, size /
    stride), keypoint k the mean of channel k over each stride x stride cell, so a bright spot of one colour is that
    keypoint's peak."""
    w = np.zeros((3, 3, stride, stride), np.float32)
    for k in range(3):
        w[k, k] = 1.0 / stride**2
    nodes = [helper.make_node("Conv", ["images", "w"], [name], name="pool", strides=[stride, stride])]
    cells = size // stride
    return _model(nodes, [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, size, size])],
                  [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["N", 3, cells, cells])],
                  [numpy_helper.from_array(w, "w")], name="pooled_heatmaps")


def multiview(views: int = 2, *, inputs: tuple = (), heatmaps: np.ndarray | None = None, size: int = 32):
    """A multi-view "model": one input ``images`` (N, V, 3, size, size), or one (N, 3, size, size) input per name of
    ``inputs`` (stacked in that order). Output ``means`` (N, V), each view's mean pixel (which frame of which view
    went where); with ``heatmaps`` (``(1, V * K, h, w)``), output ``heatmaps``: those, repeated over the batch."""
    views = len(inputs) or views
    shape = [["N", 3, size, size]] * len(inputs) if inputs else [["N", views, 3, size, size]]
    names = list(inputs) or ["images"]
    nodes = [helper.make_node("Unsqueeze", [n, "one"], [f"{n}_5d"], name=f"unsqueeze_{n}") for n in inputs]
    if inputs:
        nodes.append(helper.make_node("Concat", [f"{n}_5d" for n in inputs], ["images"], name="stack", axis=1))
    inits = [numpy_helper.from_array(np.array([1], np.int64), "one")]
    if heatmaps is None:
        nodes.append(helper.make_node("ReduceMean", ["images"], ["means"], name="means", axes=[2, 3, 4], keepdims=0))
        output = helper.make_tensor_value_info("means", TensorProto.FLOAT, ["N", views])
    else:
        heatmaps = np.asarray(heatmaps, np.float32)
        nodes += [helper.make_node("ReduceMean", ["images"], ["m"], name="mean", axes=[1, 2, 3, 4], keepdims=0),
                  helper.make_node("Mul", ["m", "zero"], ["z"], name="zero_out"),
                  helper.make_node("Reshape", ["z", "col"], ["zs"], name="to_rank"),
                  helper.make_node("Add", ["zs", "constant"], ["heatmaps"], name="add_output")]
        inits += [numpy_helper.from_array(heatmaps, "constant"),
                  numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
                  numpy_helper.from_array(np.array([-1, 1, 1, 1], np.int64), "col")]
        output = helper.make_tensor_value_info("heatmaps", TensorProto.FLOAT, ["N", *heatmaps.shape[1:]])
    return _model(nodes, [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in zip(names, shape)],
                  [output], inits, name="multiview")
