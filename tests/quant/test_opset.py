"""Raising the opset to 19 for FP16 Q/DQ scales: Reduce axes move to inputs, results unchanged."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from trtkit.errors import ModelError
from trtkit.quant.opset import upgrade_opset


def _reduce_model(opset=17):
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], name="mean", axes=[2, 3], keepdims=1),
             helper.make_node("ReduceMax", ["m"], ["y"], name="max", axes=[1], keepdims=0)]
    graph = helper.make_graph(nodes, "r", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def test_reduce_axes_become_inputs_and_results_match():
    model = _reduce_model()
    up = upgrade_opset(model)
    onnx.checker.check_model(up, full_check=True)
    assert up.opset_import[0].version == 19
    assert [list(n.input) for n in up.graph.node] == [["x", "mean_axes"], ["m", "max_axes"]]
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 4)).astype(np.float32)
    np.testing.assert_allclose(ReferenceEvaluator(up).run(None, {"x": x})[0],
                               ReferenceEvaluator(model).run(None, {"x": x})[0])


def test_old_opsets_and_current_ones():
    with pytest.raises(ModelError, match="Cannot raise opset 11 to 19: re-export the model with opset 13"):
        upgrade_opset(_reduce_model(11))
    already = _reduce_model(19)
    assert upgrade_opset(already) == already
