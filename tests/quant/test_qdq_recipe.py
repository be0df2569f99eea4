"""Q/DQ placement rules for YOLO-style detectors: head branches, concat outputs, and the summary."""

import numpy as np
import onnx
import pytest
from onnx.reference import ReferenceEvaluator

from tests.quant.qmodels import residual_cnn, yolo_like
from trtkit.errors import UsageError
from trtkit.quant.qdq import QdqOptions, insert_qdq, plan_qdq

ALL_CONVS = ["stem_conv", "down_conv", "neck_conv", "box0_conv", "box_conv", "cls0_conv", "cls_conv"]
BARE = dict(keep_concat_outputs=False)
DEFAULT_KEPT = ["box_conv", "cls_conv"]  # the final layers only: what the recipe comparison chose


def _kept(options):
    plan = plan_qdq(yolo_like(), options)
    assert sorted(plan.quantized + list(plan.skipped)) == sorted(ALL_CONVS)
    return plan, sorted(plan.skipped)


def test_final_layers_of_both_head_branches_are_kept_at_depth_one():
    plan, kept = _kept(QdqOptions(output_depth=1, **BARE))
    assert kept == ["box_conv", "cls_conv"]
    assert plan.skipped["cls_conv"] == "final layer (head) kept in higher precision"


def test_depth_two_keeps_each_branch_up_to_the_feature_the_branches_share():
    plan, kept = _kept(QdqOptions(output_depth=2, **BARE))
    assert kept == ["box0_conv", "box_conv", "cls0_conv", "cls_conv"]
    assert plan.skipped["box0_conv"] == "head branch (within output_depth of an output) kept in higher precision"
    # the neck feeds both branches: the head stops below it, however deep
    assert _kept(QdqOptions(output_depth=10, **BARE))[1] == kept


def _chain(length=3):
    """x → (Conv 3x3 → Relu) × length → output: a plain chain, every layer feeding the next alone."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(length):
        inits.append(numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32), f"w{i}"))
        nodes += [helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}")]
        x = f"r{i}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 8, 4, 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(("depth", "kept"), [(1, ["conv2"]), (2, ["conv1", "conv2"]), (3, ["conv0", "conv1", "conv2"])])
def test_depth_climbs_a_chain_one_layer_per_level(depth, kept):
    plan = plan_qdq(_chain(), QdqOptions(output_depth=depth, **BARE))
    assert sorted(plan.skipped) == kept


def test_depth_stops_at_a_feature_with_two_consumers():
    # residual_cnn's pooled feature feeds both the Gemm head and the tiny conv: nothing above the final layers
    plan = plan_qdq(residual_cnn(), QdqOptions(output_depth=3, **BARE))
    assert plan.skipped["fc"] == "final layer (head) kept in higher precision"
    assert not any(reason.startswith("head branch") for reason in plan.skipped.values())


def test_heads_quantized_ignores_depth():
    plan, kept = _kept(QdqOptions(keep_output_layers=False, output_depth=3, **BARE))
    assert kept == []
    assert "box_conv" in plan.quantized


def test_concat_output_rule():
    plan, kept = _kept(QdqOptions(output_depth=1, keep_concat_outputs=True))
    assert kept == ["box_conv", "cls_conv", "neck_conv"]
    assert "cat" not in plan.activations


def test_summary_counts_the_kept_layers_by_reason():
    plan = plan_qdq(yolo_like(), QdqOptions(output_depth=2, keep_concat_outputs=True))
    text = plan.summary()
    assert text.startswith("2 layer(s) quantized, 5 kept in higher precision (")
    for part in ("1 concat output", "2 head branch", "2 final layer"):
        assert part in text
    assert plan_qdq(residual_cnn()).summary() == (
        "5 layer(s) quantized, 2 kept in higher precision (1 tiny, 1 final layer), 2 residual add(s)"
    )


def test_default_recipe_and_its_model_runs():
    model = yolo_like()
    plan = plan_qdq(model)
    assert sorted(plan.skipped) == sorted(DEFAULT_KEPT)
    model.opset_import[0].version = 19  # the reference evaluator's DequantizeLinear
    qdq, _ = insert_qdq(model, {name: 4.0 for name in plan.activations}, plan)
    onnx.checker.check_model(qdq, full_check=True)
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    assert ReferenceEvaluator(qdq).run(None, {"x": x})[0].shape == (2, 7, 64)


@pytest.mark.parametrize("depth", [0, -1, 1.5, True])
def test_output_depth_must_be_a_positive_integer(depth):
    with pytest.raises(UsageError, match="output_depth must be an integer of at least 1"):
        QdqOptions(output_depth=depth)
