"""Decompositions and function bodies that reach more of ONNX's ops on TensorRT 8.6's parser: Hardmax as ArgMax +
OneHot, function bodies that use other function-bodied ops, bodies that read an attribute the node leaves at its
default, CastLike inside subgraphs, and version-converter output that onnx's checker refuses."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.models import _model
from tests.rewrites.test_rewrites import TARGET_86, _vi, run
from trtkit.builder.rewrites import FAILED, ParserTarget, apply_rewrites, castlike, decompose, functions, opset


def _ops(model) -> set:
    return {n.op_type for n in model.graph.node}


def _all_supported(model, version: int = 17) -> bool:
    return all(TARGET_86.supported(op, version) for op in _ops(model))


# --- Hardmax ---------------------------------------------------------------------------------------------------------


def hardmax_model(axis: int, shape=(2, 3, 4), opset_version: int = 17):
    return _model([helper.make_node("Hardmax", ["x"], ["y"], name="hardmax", axis=axis)],
                  [_vi("x", TensorProto.FLOAT, list(shape))], [_vi("y", TensorProto.FLOAT, list(shape))],
                  opset=opset_version)


def test_hardmax_becomes_argmax_and_onehot_with_the_same_outputs_ties_included():
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    x[0, :, 1] = x[0, :, 2] = 5.0  # a tie along axis 2: Hardmax marks the first maximum, as ArgMax picks it
    x[1, 2, :] = 7.0
    for axis in (0, 1, 2, -1, -2):
        model = hardmax_model(axis)
        assert not TARGET_86.supported("Hardmax", 17)  # marked N in onnx-tensorrt's 8.6-GA operator list
        rewritten, report = apply_rewrites(model, TARGET_86, steps=[("decompose", decompose.rewrite)])
        assert [(r.rewrite, r.status) for r in report] == [("decompose", "applied")]
        assert _ops(rewritten) == {"ArgMax", "OneHot"} and _all_supported(rewritten)
        onnx.checker.check_model(rewritten, full_check=True)
        got, want = run(rewritten, {"x": x})[0], run(model, {"x": x})[0]
        assert got.dtype == want.dtype and np.array_equal(got, want), axis
        assert got.sum() == x.size // x.shape[axis]


def test_hardmax_with_a_dynamic_axis_or_an_old_opset_is_named_and_left():
    dynamic = hardmax_model(1, shape=("N", "C", 4))
    report = decompose.rewrite(dynamic, TARGET_86)
    assert report[0].status == "skipped" and "axis 1 of 'x' is not static" in report[0].what
    assert _ops(dynamic) == {"Hardmax"}
    old = hardmax_model(1, opset_version=11)
    report = decompose.rewrite(old, TARGET_86)
    assert report[0].status == "skipped" and "flattened to 2-D" in report[0].what
    assert _ops(old) == {"Hardmax"}


def test_parsers_with_hardmax_keep_it():
    target = ParserTarget("has-hardmax", 17, False, lambda op: True)
    assert decompose.rewrite(hardmax_model(1), target) == []


# --- function bodies -------------------------------------------------------------------------------------------------


def softmax_cross_entropy_model():
    nodes = [helper.make_node("SoftmaxCrossEntropyLoss", ["scores", "labels"], ["loss"], name="sce",
                              reduction="mean")]
    return _model(nodes, [_vi("scores", TensorProto.FLOAT, [3, 5]), _vi("labels", TensorProto.INT64, [3])],
                  [_vi("loss", TensorProto.FLOAT, [])], opset=17)


def test_a_body_that_uses_another_function_bodied_op_is_expanded_to_the_end():
    # SoftmaxCrossEntropyLoss's body uses NegativeLogLikelihoodLoss: 8.6's parser has neither
    model = softmax_cross_entropy_model()
    assert not TARGET_86.supported("NegativeLogLikelihoodLoss", 17)
    rewritten, report = apply_rewrites(model, TARGET_86, steps=[("expand-function", functions.rewrite)])
    assert [r.where for r in report] == ["node 'sce' (SoftmaxCrossEntropyLoss)",
                                         "node '#7' (NegativeLogLikelihoodLoss)"]
    assert _all_supported(rewritten), _ops(rewritten)
    feeds = {"scores": np.random.default_rng(1).standard_normal((3, 5)).astype(np.float32),
             "labels": np.array([0, 4, 2], dtype=np.int64)}
    np.testing.assert_allclose(run(rewritten, feeds)[0], run(model, feeds)[0], rtol=1e-6)


def test_an_expansion_that_would_leave_an_unexpandable_op_is_undone_and_named():
    # a parser without GatherElements: NegativeLogLikelihoodLoss's body cannot be used, so neither is the outer one
    target = ParserTarget("picky", 17, False,
                          lambda op: op not in ("SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss", "Gather",
                                                "GatherElements"))
    model = softmax_cross_entropy_model()
    report = functions.rewrite(model, target)
    assert [(r.where, r.status) for r in report] == [("model", "skipped")]
    assert "NegativeLogLikelihoodLoss" in report[0].what
    assert _ops(model) == {"SoftmaxCrossEntropyLoss"}


def test_a_body_reading_an_attribute_the_node_leaves_at_its_default_is_expanded():
    # HannWindow's body casts with to=@output_datatype; the node does not set it (default 1, FLOAT)
    size = numpy_helper.from_array(np.array(10, dtype=np.int32), "size")
    model = _model([helper.make_node("HannWindow", ["size"], ["y"], name="hann")], [],
                   [_vi("y", TensorProto.FLOAT, [10])], [size], opset=17)
    rewritten, report = apply_rewrites(model, TARGET_86, steps=[("expand-function", functions.rewrite)])
    assert [r.status for r in report] == ["applied"]
    onnx.checker.check_model(rewritten, full_check=True)
    assert "HannWindow" not in _ops(rewritten) and _all_supported(rewritten)
    got = run(rewritten, {})[0]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, np.sin(np.pi * np.arange(10) / 10) ** 2, atol=1e-6)


def test_a_context_dependent_body_with_an_optional_input_left_out_is_expanded():
    # an empty name for a left-out optional input (the Attention cases leave out past_key/past_value this way)
    scale = numpy_helper.from_array(np.linspace(0.5, 1.5, 4).astype(np.float32), "scale")
    model = _model([helper.make_node("LayerNormalization", ["x", "scale", ""], ["y"], name="ln", axis=-1)],
                   [_vi("x", TensorProto.FLOAT, [2, 4])], [_vi("y", TensorProto.FLOAT, [2, 4])], [scale], opset=17)
    target = ParserTarget("no-layernorm", 17, False, lambda op: op != "LayerNormalization")
    rewritten, report = apply_rewrites(model, target, steps=[("expand-function", functions.rewrite)])
    assert [r.status for r in report] == ["applied"] and "LayerNormalization" not in _ops(rewritten)
    x = np.random.default_rng(2).standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_allclose(run(rewritten, {"x": x})[0], run(model, {"x": x})[0], rtol=1e-5, atol=1e-6)


# --- CastLike in subgraphs -------------------------------------------------------------------------------------------


def test_castlike_inside_an_if_branch_becomes_a_cast():
    ref = numpy_helper.from_array(np.array([0], dtype=np.int32), "ref")
    then = helper.make_graph([helper.make_node("CastLike", ["x", "ref"], ["t"], name="like_then")], "then", [],
                             [_vi("t", TensorProto.INT32, [3])])
    other = helper.make_graph([helper.make_node("Cast", ["x"], ["e"], name="cast_else", to=TensorProto.INT32)],
                              "else", [], [_vi("e", TensorProto.INT32, [3])])
    nodes = [helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then, else_branch=other)]
    model = _model(nodes, [_vi("c", TensorProto.BOOL, []), _vi("x", TensorProto.FLOAT, [3])],
                   [_vi("y", TensorProto.INT32, [3])], [ref], opset=17)
    report = castlike.rewrite(model, TARGET_86)
    assert [(r.where, r.what) for r in report] == [
        ("node 'like_then' (CastLike)", "replaced by Cast(to=INT32), the type of 'ref'")]
    inner = model.graph.node[0].attribute[0].g.node[0]
    assert inner.op_type == "Cast" and list(inner.input) == ["x"]
    onnx.checker.check_model(model, full_check=True)
    x = np.array([1.5, -2.0, 3.0], dtype=np.float32)
    assert np.array_equal(run(model, {"c": np.array(True), "x": x})[0], x.astype(np.int32))


# --- version converter output ----------------------------------------------------------------------------------------


def test_a_converted_model_the_checker_refuses_is_not_used():
    # AveragePool-19's dilations: the converter keeps the attribute at opset 17, where AveragePool has none, and a
    # parser reading opset 17 would pool without dilations
    model = _model([helper.make_node("AveragePool", ["x"], ["y"], name="pool", kernel_shape=[2, 2],
                                     dilations=[2, 2])],
                   [_vi("x", TensorProto.FLOAT, [1, 1, 5, 5])], [_vi("y", TensorProto.FLOAT, [1, 1, 3, 3])], opset=19)
    rewritten, report = apply_rewrites(model, TARGET_86, steps=[("opset", opset.rewrite)])
    assert report[0].status == FAILED and "gave an invalid model" in report[0].what
    assert "dilations" in report[0].what and rewritten is model


def test_attributes_the_older_opset_lacks_are_dropped_when_they_hold_their_default():
    # what torch.onnx.export(dynamo=True) writes at opsets 18-20: every ReduceMean says noop_with_empty_axes=0, which
    # the converter keeps at opset 17 (an invalid model), and which is what ReduceMean-13 computes anyway
    axes = numpy_helper.from_array(np.array([2, 3], dtype=np.int64), "axes")
    model = _model([helper.make_node("ReduceMean", ["x", "axes"], ["y"], name="mean", keepdims=1,
                                     noop_with_empty_axes=0)],
                   [_vi("x", TensorProto.FLOAT, [1, 2, 3, 3])], [_vi("y", TensorProto.FLOAT, [1, 2, 1, 1])],
                   [axes], opset=20)
    rewritten, report = apply_rewrites(model, TARGET_86, steps=[("opset", opset.rewrite)])
    assert report[0].status == "applied" and rewritten.opset_import[0].version == 17
    onnx.checker.check_model(rewritten, full_check=True)
    x = np.arange(18, dtype=np.float32).reshape(1, 2, 3, 3)
    np.testing.assert_allclose(run(rewritten, {"x": x})[0], x.mean(axis=(2, 3), keepdims=True))


# --- attribute forms after folding -----------------------------------------------------------------------------------


def test_reduce_axes_computed_from_constants_get_the_attribute_form_once_folded():
    # opset 18: axes = [0] + [1], computed, so the version converter cannot bring ReduceMean down to 17; folding makes
    # it an initializer, and then the opset-17 attribute form is possible
    from trtkit.builder.prepare import prepare

    zero = helper.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(np.array([0], np.int64)))
    one = helper.make_node("Constant", [], ["one"], value=numpy_helper.from_array(np.array([1], np.int64)))
    nodes = [zero, one, helper.make_node("Add", ["zero", "one"], ["axes"], name="axes"),
             helper.make_node("ReduceMean", ["x", "axes"], ["y"], name="mean", keepdims=0)]
    model = _model(nodes, [_vi("x", TensorProto.FLOAT, [2, 3])], [_vi("y", TensorProto.FLOAT, [2])], opset=18)
    prepared = prepare(model, target=TARGET_86)
    statuses = [(r.rewrite, r.status) for r in prepared.rewrites]
    assert statuses.index(("fold-constants", "applied")) < statuses.index(("attribute-inputs", "applied"))
    (mean,) = [n for n in prepared.proto.graph.node if n.op_type == "ReduceMean"]
    assert list(mean.input) == ["x"] and [list(a.ints) for a in mean.attribute if a.name == "axes"] == [[1]]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(run(model, {"x": x})[0], x.mean(axis=1))
