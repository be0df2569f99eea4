"""The built-in sample model of ``trtkit demo``: a small CNN generated here, nothing downloaded."""

from __future__ import annotations

SAMPLE_INPUT = "images"
SAMPLE_OUTPUT = "logits"
SAMPLE_SHAPE = (3, 64, 64)


def make_sample_cnn(*, seed: int = 0, num_classes: int = 10, opset: int = 17):
    """A classifier CNN with a dynamic batch: Conv-BN-ReLU ×3 with pooling, a residual block, global pooling, Gemm.

    Input ``images`` (N, 3, 64, 64) float32; output ``logits`` (N, num_classes). Weights are random (seeded) but
    scaled so activations stay O(1), which makes FP16 errors meaningful.
    """
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def const(name, values):
        inits.append(numpy_helper.from_array(np.asarray(values, dtype=np.float32), name))
        return name

    def weight(name, shape, fan_in):
        return const(name, rng.standard_normal(shape) * np.sqrt(2.0 / fan_in))

    def conv_bn_relu(x, name, cin, cout, stride=1, relu=True):
        w = weight(f"{name}.w", (cout, cin, 3, 3), cin * 9)
        b = weight(f"{name}.b", (cout,), 1.0e4)
        nodes.append(
            helper.make_node(
                "Conv", [x, w, b], [f"{name}.conv"], name=f"{name}/Conv", pads=[1, 1, 1, 1], strides=[stride, stride]
            )
        )
        scale = const(f"{name}.gamma", 1 + 0.1 * rng.standard_normal(cout))
        bias = const(f"{name}.beta", 0.1 * rng.standard_normal(cout))
        mean = const(f"{name}.mean", 0.1 * rng.standard_normal(cout))
        var = const(f"{name}.var", 1 + 0.1 * rng.random(cout))
        nodes.append(
            helper.make_node(
                "BatchNormalization",
                [f"{name}.conv", scale, bias, mean, var],
                [f"{name}.bn"],
                name=f"{name}/BatchNormalization",
            )
        )
        if not relu:
            return f"{name}.bn"
        nodes.append(helper.make_node("Relu", [f"{name}.bn"], [f"{name}.out"], name=f"{name}/Relu"))
        return f"{name}.out"

    x = conv_bn_relu(SAMPLE_INPUT, "stem", 3, 16, stride=2)
    x = conv_bn_relu(x, "layer1", 16, 32, stride=2)
    y = conv_bn_relu(x, "block.a", 32, 32)
    y = conv_bn_relu(y, "block.b", 32, 32, relu=False)
    nodes.append(helper.make_node("Add", [x, y], ["block.sum"], name="block/Add"))
    nodes.append(helper.make_node("Relu", ["block.sum"], ["block.out"], name="block/Relu"))
    x = conv_bn_relu("block.out", "layer2", 32, 64, stride=2)
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pool"], name="head/GlobalAveragePool"))
    nodes.append(helper.make_node("Flatten", ["pool"], ["flat"], name="head/Flatten", axis=1))
    w = weight("fc.w", (num_classes, 64), 64)
    b = weight("fc.b", (num_classes,), 1.0e4)
    nodes.append(helper.make_node("Gemm", ["flat", w, b], [SAMPLE_OUTPUT], name="head/Gemm", transB=1))
    graph = helper.make_graph(
        nodes,
        "trtkit_sample_cnn",
        [helper.make_tensor_value_info(SAMPLE_INPUT, TensorProto.FLOAT, ["batch", *SAMPLE_SHAPE])],
        [helper.make_tensor_value_info(SAMPLE_OUTPUT, TensorProto.FLOAT, ["batch", num_classes])],
        inits,
    )
    model = helper.make_model(graph, producer_name="trtkit", opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8  # readable by the ONNX parsers of TensorRT 8.6 and later
    return model
