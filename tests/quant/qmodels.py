"""Small generated ONNX graphs for precision tests (FP16 conversion, Q/DQ placement)."""

from __future__ import annotations

import contextlib

import numpy as np
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def _model(nodes, inputs, outputs, inits=(), opset=OPSET):
    graph = helper.make_graph(nodes, "q", inputs, outputs, list(inits))
    model = helper.make_model(graph, producer_name="trtkit-tests", opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _init(rng, name, shape, scale=0.3):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def fp16_mix(seed=0):
    """Conv → Relu → Pow (FP32 op) → Mul by a huge constant (clipped) → Resize (FP32 scales) → Reshape whose shape is
    computed from Shape (shape math stays FP32) → output; plus a second output read straight from the Relu."""
    rng = np.random.default_rng(seed)
    inits = [
        _init(rng, "w", (4, 3, 3, 3)),
        numpy_helper.from_array(np.array([1e6, 1.0, 1.0, 1.0], np.float32).reshape(1, 4, 1, 1), "big"),
        numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
        numpy_helper.from_array(np.array([1.0], np.float32), "one"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Constant", [], ["two"], name="two_const",
                         value=numpy_helper.from_array(np.array(2.0, np.float32))),
        helper.make_node("Pow", ["r", "two"], ["p"], name="pow"),
        helper.make_node("Mul", ["p", "big"], ["m"], name="mul"),
        helper.make_node("Resize", ["m", "", "scales"], ["z"], name="resize", mode="nearest"),
        helper.make_node("Shape", ["z"], ["s"], name="shape"),
        helper.make_node("Cast", ["s"], ["sf"], name="cast_f", to=TensorProto.FLOAT),
        helper.make_node("Mul", ["sf", "one"], ["sm"], name="shape_mul"),
        helper.make_node("Cast", ["sm"], ["si"], name="cast_i", to=TensorProto.INT64),
        helper.make_node("Reshape", ["z", "si"], ["y"], name="reshape"),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 8, 8]),
         helper.make_tensor_value_info("r", TensorProto.FLOAT, ["N", 4, 4, 4])],
        inits,
    )


def residual_cnn(seed=0, *, width=16):
    """stem Conv → Relu → [Conv → Relu → Conv] + skip → Relu → (Conv 3x3 + Conv 1x1 downsample) → Add → Relu →
    MaxPool → {tiny 1x1 Conv to 2 channels → output; GlobalAveragePool → Reshape → Gemm head → Softmax → output}:
    the shapes Q/DQ placement cares about."""
    rng = np.random.default_rng(seed)
    inits = [
        _init(rng, "w_stem", (width, 3, 3, 3)), _init(rng, "b_stem", (width,), 0.1),
        _init(rng, "w_a", (width, width, 3, 3)), _init(rng, "w_b", (width, width, 3, 3)),
        _init(rng, "w_down", (width, width, 1, 1)),
        _init(rng, "w_tiny", (2, width, 1, 1)),
        _init(rng, "w_fc", (10, width * 2)), _init(rng, "b_fc", (10,), 0.1),
        numpy_helper.from_array(np.array([-1, width * 2], np.int64), "flat_shape"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w_stem", "b_stem"], ["stem"], name="stem_conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["stem"], ["stem_r"], name="stem_relu"),
        helper.make_node("Conv", ["stem_r", "w_a"], ["a"], name="conv_a", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["a_r"], name="relu_a"),
        helper.make_node("Conv", ["a_r", "w_b"], ["b"], name="conv_b", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["b", "stem_r"], ["res"], name="add_skip"),
        helper.make_node("Relu", ["res"], ["res_r"], name="relu_res"),
        helper.make_node("Conv", ["res_r", "w_down"], ["down"], name="conv_down"),
        helper.make_node("Conv", ["res_r", "w_b"], ["main"], name="conv_main", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["main", "down"], ["res2"], name="add_two_convs"),
        helper.make_node("Relu", ["res2"], ["res2_r"], name="relu_res2"),
        helper.make_node("MaxPool", ["res2_r"], ["pool"], name="maxpool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["pool", "w_tiny"], ["tiny"], name="conv_tiny"),
        helper.make_node("Concat", ["tiny", "tiny"], ["tiny2"], name="concat", axis=1),
        helper.make_node("GlobalAveragePool", ["pool"], ["gap"], name="gap"),
        helper.make_node("Concat", ["gap", "gap"], ["gap2"], name="concat_gap", axis=1),
        helper.make_node("Reshape", ["gap2", "flat_shape"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "w_fc", "b_fc"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["prob"], name="softmax", axis=1),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, ["N", 10]),
         helper.make_tensor_value_info("tiny2", TensorProto.FLOAT, ["N", 4, 4, 4])],
        inits,
    )


def _silu(nodes, x, name):
    nodes += [helper.make_node("Sigmoid", [x], [f"{name}_sig"], name=f"{name}_sigmoid"),
              helper.make_node("Mul", [x, f"{name}_sig"], [f"{name}_act"], name=f"{name}_mul")]
    return f"{name}_act"


def yolo_like(seed=0):
    """A two-level YOLO-style detector: stem Conv (reads the image) → SiLU → strided Conv → SiLU → Resize ×2 → Concat
    with the stem's feature → 1x1 neck Conv → SiLU (the feature both head branches share) → box branch (Conv → SiLU
    → final Conv to 4) and class branch (Conv → SiLU → final Conv to 3 → Sigmoid) → Concat → Reshape to
    ``[N, 4 + 3, anchors]`` (the YOLOv8 head layout). SiLU is Sigmoid × x, as PyTorch exports it."""
    rng = np.random.default_rng(seed)
    inits = [
        _init(rng, "w_stem", (16, 3, 3, 3)), _init(rng, "w_down", (16, 16, 3, 3)), _init(rng, "w_neck", (16, 32, 1, 1)),
        _init(rng, "w_box0", (16, 16, 3, 3)), _init(rng, "w_box", (4, 16, 3, 3)),
        _init(rng, "w_cls0", (16, 16, 3, 3)), _init(rng, "w_cls", (3, 16, 3, 3)),
        numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "up_scales"),
        numpy_helper.from_array(np.array([0, 7, -1], np.int64), "head_shape"),
    ]
    pad = {"pads": [1, 1, 1, 1]}
    nodes = [helper.make_node("Conv", ["x", "w_stem"], ["stem"], name="stem_conv", **pad)]
    stem = _silu(nodes, "stem", "stem")
    nodes.append(helper.make_node("Conv", [stem, "w_down"], ["down"], name="down_conv", strides=[2, 2], **pad))
    down = _silu(nodes, "down", "down")
    nodes += [helper.make_node("Resize", [down, "", "up_scales"], ["up"], name="upsample", mode="nearest"),
              helper.make_node("Concat", ["up", stem], ["cat"], name="concat", axis=1),
              helper.make_node("Conv", ["cat", "w_neck"], ["neck"], name="neck_conv")]
    feature = _silu(nodes, "neck", "neck")
    for branch, out in (("box", "box_out"), ("cls", "cls_out")):
        nodes.append(helper.make_node("Conv", [feature, f"w_{branch}0"], [f"{branch}0"], name=f"{branch}0_conv", **pad))
        act = _silu(nodes, f"{branch}0", f"{branch}0")
        nodes.append(helper.make_node("Conv", [act, f"w_{branch}"], [out], name=f"{branch}_conv", **pad))
    nodes += [helper.make_node("Sigmoid", ["cls_out"], ["cls_prob"], name="cls_sigmoid"),
              helper.make_node("Concat", ["box_out", "cls_prob"], ["head"], name="head_concat", axis=1),
              helper.make_node("Reshape", ["head", "head_shape"], ["output0"], name="head_reshape")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                  [helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["N", 7, 64])], inits)


def matmul_block(seed=0):
    """x @ W (initializer) → Relu → MatMul with a second activation: weight vs activation MatMul inputs."""
    rng = np.random.default_rng(seed)
    inits = [_init(rng, "w", (16, 32))]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm_weight"),
        helper.make_node("Relu", ["h"], ["h_r"], name="relu"),
        helper.make_node("Transpose", ["h_r"], ["h_t"], name="transpose", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["h_r", "h_t"], ["y"], name="mm_act"),
    ]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, 16])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8, 8])], inits)


@contextlib.contextmanager
def capture_trtkit_log(caplog, level):
    """Attach pytest's log capture to the "trtkit" logger itself (the CLI may turn off propagation in other tests)."""
    import logging

    log = logging.getLogger("trtkit")
    log.addHandler(caplog.handler)
    old_level = log.level
    log.setLevel(level)
    caplog.handler.setLevel(level)
    try:
        yield
    finally:
        log.removeHandler(caplog.handler)
        log.setLevel(old_level)


def silu_residual(seed=0, *, shared_stem: bool = False):
    """stem Conv → SiLU (``stem_act``) → Conv a → SiLU → Conv b → SiLU (``b_act``) → Add(stem_act, b_act) → Conv out
    (the head). As YOLO-style blocks export: the residual add reads the activation, not the convolution. With
    ``shared_stem`` the stem Conv's output is also read by a second branch (a 1x1 Conv), so its SiLU is not alone."""
    rng = np.random.default_rng(seed)
    inits = [_init(rng, "w_stem", (16, 3, 3, 3)), _init(rng, "w_a", (16, 16, 3, 3)), _init(rng, "w_b", (16, 16, 3, 3)),
             _init(rng, "w_out", (16, 16, 1, 1)), _init(rng, "w_side", (16, 16, 1, 1))]
    pad = {"pads": [1, 1, 1, 1]}
    nodes = [helper.make_node("Conv", ["x", "w_stem"], ["stem"], name="stem_conv", **pad)]
    stem = _silu(nodes, "stem", "stem")
    nodes.append(helper.make_node("Conv", [stem, "w_a"], ["a"], name="conv_a", **pad))
    a = _silu(nodes, "a", "a")
    nodes.append(helper.make_node("Conv", [a, "w_b"], ["b"], name="conv_b", **pad))
    b = _silu(nodes, "b", "b")
    nodes += [helper.make_node("Add", [stem, b], ["res"], name="add_res"),
              helper.make_node("Conv", ["res", "w_out"], ["y"], name="conv_out")]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16, 8, 8])]
    if shared_stem:
        nodes.append(helper.make_node("Conv", ["b", "w_side"], ["side"], name="conv_side"))
        outputs.append(helper.make_tensor_value_info("side", TensorProto.FLOAT, ["N", 16, 8, 8]))
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])], outputs, inits)


def batchnorm_before_add(model, conv_output: str = "b", add: str = "add_skip", width: int = 16):
    """``model`` with a BatchNormalization between ``conv_output`` and the residual ``add`` that reads it (an export
    that kept its BatchNormalization nodes, as onnx's own test_resnet50 data: Conv → BatchNormalization → Add); the
    normalized tensor is ``<conv_output>_bn``, the node ``bn_<conv_output>``."""
    import numpy as np
    from onnx import helper, numpy_helper

    bn = [
        numpy_helper.from_array(np.full(width, v, np.float32), f"bn_{k}")
        for k, v in (("scale", 1.5), ("bias", 0.1), ("mean", 0.0), ("var", 1.0))
    ]
    model.graph.initializer.extend(bn)
    nodes = list(model.graph.node)
    at = next(i for i, n in enumerate(nodes) if n.name == add)
    nodes[at].input[list(nodes[at].input).index(conv_output)] = f"{conv_output}_bn"
    nodes.insert(at, helper.make_node("BatchNormalization", [conv_output, "bn_scale", "bn_bias", "bn_mean", "bn_var"],
                                      [f"{conv_output}_bn"], name=f"bn_{conv_output}"))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model
