"""Small ONNX models whose constants are computed by subgraphs (what constant folding is for).

Shared by the CPU folding tests and the GPU test (tests/gpu/test_isolation_gpu.py).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def _const(name, array):
    return helper.make_node("Constant", [], [name], name=f"{name}_const", value=numpy_helper.from_array(array, name))


def _model(nodes, inputs, outputs, initializers=(), opset=17, name="g"):
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8  # readable by TensorRT 8.6's parser and by older onnx
    return model


def constant_of_shape_conv(opset=17, seed=0):
    """Conv whose weights and bias come from ConstantOfShape (+ an Add of an initializer): 8.6 wants initializers."""
    rng = np.random.default_rng(seed)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])
    delta = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w_delta")
    nodes = [
        _const("w_shape", np.array([8, 3, 3, 3], dtype=np.int64)),
        helper.make_node("ConstantOfShape", ["w_shape"], ["w_base"], name="w_fill",
                         value=numpy_helper.from_array(np.array([0.05], dtype=np.float32), "v")),
        helper.make_node("Add", ["w_base", "w_delta"], ["w"], name="w_add"),
        _const("b_shape", np.array([8], dtype=np.int64)),
        helper.make_node("ConstantOfShape", ["b_shape"], ["b"], name="b_fill",
                         value=numpy_helper.from_array(np.array([0.1], dtype=np.float32), "v")),
        helper.make_node("Conv", ["x", "w", "b"], ["conv"], name="conv0", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv"], ["y"], name="relu0"),
    ]
    return _model(nodes, [x], [y], [delta], opset, "cos_conv")


def static_shape_chain(opset=17):
    """Reshape whose target shape is computed Shape → Gather → Unsqueeze → Concat on a static input."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 60])
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], name="shape0"),
        _const("idx0", np.array(0, dtype=np.int64)),
        helper.make_node("Gather", ["shape", "idx0"], ["batch"], name="gather0", axis=0),
        _const("axes0", np.array([0], dtype=np.int64)),
        helper.make_node("Unsqueeze", ["batch", "axes0"], ["batch1"], name="unsqueeze0"),
        _const("minus1", np.array([-1], dtype=np.int64)),
        helper.make_node("Concat", ["batch1", "minus1"], ["target"], name="concat0", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"], name="reshape0"),
    ]
    return _model(nodes, [x], [y], opset=opset, name="shape_chain")


def dynamic_batch_shape_chain(opset=17):
    """Flatten-by-Reshape with a dynamic batch: Gather of the static dims of Shape folds, the batch part stays."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 60])
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], name="shape0"),
        _const("idx0", np.array([0], dtype=np.int64)),
        helper.make_node("Gather", ["shape", "idx0"], ["batch"], name="gather_batch", axis=0),
        _const("idx_rest", np.array([1, 2, 3], dtype=np.int64)),
        helper.make_node("Gather", ["shape", "idx_rest"], ["rest"], name="gather_rest", axis=0),
        helper.make_node("ReduceProd", ["rest"], ["features"], name="prod0", keepdims=1),
        helper.make_node("Concat", ["batch", "features"], ["target"], name="concat0", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"], name="reshape0"),
    ]
    return _model(nodes, [x], [y], opset=opset, name="dyn_chain")


def qdq_conv(opset=17):
    """Conv with weights from DequantizeLinear of INT8 values: Q/DQ must survive folding (TensorRT needs them)."""
    rng = np.random.default_rng(1)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])
    inits = [
        numpy_helper.from_array(rng.integers(-100, 100, (4, 2, 3, 3)).astype(np.int8), "wq"),
        numpy_helper.from_array(np.array(0.02, dtype=np.float32), "w_scale"),
    ]
    nodes = [
        helper.make_node("DequantizeLinear", ["wq", "w_scale"], ["w"], name="w_dq"),
        helper.make_node("Conv", ["x", "w"], ["y"], name="conv0", pads=[1, 1, 1, 1]),
    ]
    return _model(nodes, [x], [y], inits, opset, "qdq")


def random_noise(opset=17):
    """RandomUniform is computed from constants only, yet must never be folded."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    nodes = [
        helper.make_node("RandomUniform", [], ["noise"], name="noise0", shape=[2, 3], dtype=TensorProto.FLOAT),
        helper.make_node("Add", ["x", "noise"], ["y"], name="add0"),
    ]
    return _model(nodes, [x], [y], opset=opset, name="noise")


def if_with_outer_constant(opset=17):
    """An If whose branches use a value computed from constants in the outer graph."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    cond = helper.make_tensor_value_info("cond", TensorProto.BOOL, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    then_out = helper.make_tensor_value_info("then_y", TensorProto.FLOAT, [4])
    else_out = helper.make_tensor_value_info("else_y", TensorProto.FLOAT, [4])
    then_graph = helper.make_graph([helper.make_node("Add", ["x", "k"], ["then_y"], name="then_add")],
                                   "then", [], [then_out])
    else_graph = helper.make_graph([helper.make_node("Sub", ["x", "k"], ["else_y"], name="else_sub")],
                                   "else", [], [else_out])
    inits = [numpy_helper.from_array(np.arange(4, dtype=np.float32), "scale")]
    nodes = [
        _const("k_shape", np.array([4], dtype=np.int64)),
        helper.make_node("ConstantOfShape", ["k_shape"], ["k_base"], name="k_fill",
                         value=numpy_helper.from_array(np.array([2.0], dtype=np.float32), "v")),
        helper.make_node("Mul", ["k_base", "scale"], ["k"], name="k_mul"),
        helper.make_node("If", ["cond"], ["y"], name="if0", then_branch=then_graph, else_branch=else_graph),
    ]
    return _model(nodes, [x, cond], [y], inits, opset, "if_outer")


def constant_output(opset=17):
    """A graph output computed only from constants: it stays computed (outputs are never turned into weights)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    c = helper.make_tensor_value_info("c", TensorProto.FLOAT, [3])
    nodes = [
        _const("a", np.array([1, 2, 3], dtype=np.float32)),
        _const("b", np.array([4, 5, 6], dtype=np.float32)),
        helper.make_node("Add", ["a", "b"], ["c"], name="add_const"),
        helper.make_node("Mul", ["x", "c"], ["y"], name="mul0"),
    ]
    return _model(nodes, [x], [y, c], opset=opset, name="const_out")


def plain_relu(opset=17):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    return _model([helper.make_node("Relu", ["x"], ["y"], name="relu0")], [x], [y], opset=opset, name="relu")


def shape_derived_scale(opset=17):
    """x * 1/sqrt(last dim), the dim read by Shape(start=-1) of a tensor whose batch is dynamic (as torch exports)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])
    nodes = [
        helper.make_node("Shape", ["x"], ["last"], name="shape_last", start=-1),
        helper.make_node("Cast", ["last"], ["last_f"], name="cast0", to=TensorProto.FLOAT),
        helper.make_node("Sqrt", ["last_f"], ["root"], name="sqrt0"),
        helper.make_node("Reciprocal", ["root"], ["scale"], name="recip0"),
        helper.make_node("Mul", ["x", "scale"], ["y"], name="mul0"),
    ]
    return _model(nodes, [x], [y], opset=opset, name="shape_scale")


def ir3_initializers_as_inputs():
    """An IR version 3 model (as the onnx wheel's old model zoo files are): every initializer is also a graph input,
    and the Conv's weights come from a ConstantOfShape, so folding has work to do."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 4])
    bias = numpy_helper.from_array(np.array([0.5, -0.25], np.float32), "b")
    shape = numpy_helper.from_array(np.array([2, 2, 1, 1], np.int64), "w_shape")
    nodes = [
        helper.make_node("ConstantOfShape", ["w_shape"], ["w"], name="w_fill",
                         value=numpy_helper.from_array(np.array([0.5], np.float32))),
        helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv0"),
    ]
    as_inputs = [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2]),
                 helper.make_tensor_value_info("w_shape", TensorProto.INT64, [4])]
    model = _model(nodes, [x, *as_inputs], [y], [bias, shape], opset=9, name="ir3")
    model.ir_version = 3
    return model
