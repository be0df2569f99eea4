"""Compatibility rewrites: each one on a small onnx.helper model showing the failure it prevents."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from tests.models import _model, tiny_conv
from trtkit.builder.rewrites import (
    FAILED,
    ParserTarget,
    Rewrite,
    apply_rewrites,
    attributes,
    dims,
    functions,
    int64_io,
    opset,
)

TARGET_86 = ParserTarget.assumed()


def _vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def placeholder_dims_model():
    """Two inputs whose exporter named every dynamic dimension '?' (a real classifier's export)."""
    nodes = [helper.make_node("ReduceSum", ["a"], ["sa"], name="sum_a", keepdims=0),
             helper.make_node("ReduceSum", ["b"], ["sb"], name="sum_b", keepdims=0),
             helper.make_node("Add", ["sa", "sb"], ["y"], name="add")]
    return _model(nodes, [_vi("a", TensorProto.FLOAT, ["?", "?"]), _vi("b", TensorProto.FLOAT, ["?", 3])],
                  [_vi("y", TensorProto.FLOAT, [])])


def run(model, feeds):
    return ReferenceEvaluator(model).run(None, feeds)


# --- symbolic dimensions ---------------------------------------------------------------------------------------------


def _dim_params(model, name):
    value = next(v for v in model.graph.input if v.name == name)
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


def test_placeholder_dims_get_one_name_per_axis_and_the_fake_build_then_succeeds():
    from tests.fakes import fake_trt
    from trtkit.builder import BuildConfig, build, parse_shapes
    from trtkit.errors import BuildError

    model = placeholder_dims_model()
    profile = parse_shapes("a:1x2,2x5,4x9 b:1x3,2x3,4x3")
    config = BuildConfig(profiles=[profile], profiling_verbosity="NONE", sanitize=False)
    with pytest.raises(BuildError, match="Input dimensions with this name are inconsistent"):
        build(model, config, trt=fake_trt.make_fake_trt())
    changes = dims.rewrite(model)
    assert _dim_params(model, "a") == ["a_dim0", "a_dim1"]
    assert _dim_params(model, "b") == ["b_dim0", 3]
    assert {c.where for c in changes} == {"input 'a' axis 0", "input 'a' axis 1", "input 'b' axis 0"}
    assert build(model, config, trt=fake_trt.make_fake_trt()).engine
    # and the build's own prepare step does the same by default
    config.sanitize = True
    result = build(placeholder_dims_model(), config, trt=fake_trt.make_fake_trt())
    assert [r["rewrite"] for r in result.manifest.to_json()["prepare"]["rewrites"]] == ["symbolic-dims"] * 3


@pytest.mark.parametrize("placeholder", ["?", "-1", "None", "", "unk__42"])
def test_every_placeholder_spelling_is_renamed(placeholder):
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", TensorProto.FLOAT, [placeholder, 4])],
                   [_vi("y", TensorProto.FLOAT, [placeholder, 4])])
    assert dims.ambiguous_dims(model)
    dims.rewrite(model)
    assert _dim_params(model, "x") == ["x_dim0", 4]
    assert not dims.ambiguous_dims(model)


def test_meaningful_names_shared_across_inputs_stay_shared_but_not_within_one_tensor():
    model = _model([helper.make_node("Add", ["a", "b"], ["y"])],
                   [_vi("a", TensorProto.FLOAT, ["batch", "S", "S"]), _vi("b", TensorProto.FLOAT, ["batch", 1, 1])],
                   [_vi("y", TensorProto.FLOAT, ["batch", "S", "S"])])
    dims.rewrite(model)
    assert _dim_params(model, "a") == ["batch", "a_dim1", "a_dim2"]
    assert _dim_params(model, "b") == ["batch", 1, 1]


def test_inspect_check_names_the_ambiguity():
    lines = dims.describe_ambiguity(placeholder_dims_model())
    assert len(lines) == 1 and "a[0], a[1], b[0]" in lines[0] and "'?' is a placeholder" in lines[0]


# --- INT64 inputs and outputs ----------------------------------------------------------------------------------------


def int64_model():
    """Token ids in (INT64), an index out (INT64): what 8.6 engines cannot take or return."""
    nodes = [helper.make_node("Add", ["ids", "one"], ["next"], name="add"),
             helper.make_node("ArgMax", ["next"], ["best"], name="argmax", axis=1, keepdims=0)]
    one = numpy_helper.from_array(np.array(1, dtype=np.int64), "one")
    return _model(nodes, [_vi("ids", TensorProto.INT64, [2, 3])], [_vi("best", TensorProto.INT64, [2])], [one])


def test_int64_io_becomes_int32_at_the_boundary_with_the_same_results():
    model = int64_model()
    rewritten, report = apply_rewrites(model, TARGET_86, steps=[("int64-io", int64_io.rewrite)])
    onnx.checker.check_model(rewritten)
    assert rewritten.graph.input[0].type.tensor_type.elem_type == TensorProto.INT32
    assert rewritten.graph.output[0].type.tensor_type.elem_type == TensorProto.INT32
    assert int64_io.original_dtypes(report) == {"ids": "int64", "best": "int64"}
    ids = np.array([[1, 5, 2], [7, 0, 3]])
    expected = run(model, {"ids": ids.astype(np.int64)})[0]
    got = run(rewritten, {"ids": ids.astype(np.int32)})[0]
    assert got.dtype == np.int32 and np.array_equal(got, expected)
    assert model.graph.input[0].type.tensor_type.elem_type == TensorProto.INT64  # the input model is untouched


def test_int64_io_is_left_alone_where_tensorrt_has_int64_io():
    model = int64_model()
    target = ParserTarget("TensorRT 10", 20, True)
    assert int64_io.rewrite(model, target) == []


def float64_model():
    """Doubles in and out (numpy's default dtype in an exporter's graph): TensorRT has no FP64 engine I/O."""
    scale = numpy_helper.from_array(np.array([0.5, 2.0, -1.0]), "scale")
    nodes = [helper.make_node("Mul", ["x", "scale"], ["scaled"], name="mul"),
             helper.make_node("ReduceSum", ["scaled"], ["total"], name="sum", keepdims=0)]
    return _model(nodes, [_vi("x", TensorProto.DOUBLE, [2, 3])],
                  [_vi("scaled", TensorProto.DOUBLE, [2, 3]), _vi("total", TensorProto.DOUBLE, [])], [scale])


def test_float64_io_becomes_float32_at_the_boundary_named_apart_from_int64():
    model = float64_model()
    rewritten, report = apply_rewrites(model, TARGET_86, steps=[("int64-io", int64_io.rewrite)])
    onnx.checker.check_model(rewritten)
    assert {r.rewrite for r in report} == {"float64-io"}
    assert "FLOAT32 keeps about 7 significant digits" in report[0].why
    assert [v.type.tensor_type.elem_type for v in [*rewritten.graph.input, *rewritten.graph.output]] == \
        [TensorProto.FLOAT] * 3
    assert int64_io.original_dtypes(report) == {"x": "float64", "scaled": "float64", "total": "float64"}
    x = np.array([[1, 5, 2], [7, 0, 3]], dtype=np.float64)
    got = run(rewritten, {"x": x.astype(np.float32)})
    assert all(g.dtype == np.float32 for g in got)
    for g, e in zip(got, run(model, {"x": x})):
        np.testing.assert_allclose(g, e, rtol=1e-6)


def test_float64_io_is_rewritten_even_where_tensorrt_has_int64_io():
    report = int64_io.rewrite(float64_model(), ParserTarget("TensorRT 10", 20, True))
    assert [r.rewrite for r in report] == ["float64-io"] * 3


def test_a_float64_input_returned_as_is_is_named_and_left():
    model = _model([helper.make_node("Identity", ["x"], ["y"])], [_vi("x", TensorProto.DOUBLE, [2])],
                   [_vi("x", TensorProto.DOUBLE, [2]), _vi("y", TensorProto.DOUBLE, [2])])
    report = int64_io.rewrite(model, TARGET_86)
    assert [(r.where, r.status) for r in report] == [("tensor 'x'", "skipped"), ("output 'y'", "applied")]
    assert "left FLOAT64" in report[0].what and int64_io.original_dtypes(report) == {"y": "float64"}


# --- function-bodied ops ---------------------------------------------------------------------------------------------


def test_ops_the_parser_lacks_are_expanded_into_their_function_body():
    scale = numpy_helper.from_array(np.linspace(0.5, 1.5, 4).astype(np.float32), "scale")
    nodes = [helper.make_node("Mish", ["x"], ["m"], name="mish"),
             helper.make_node("LayerNormalization", ["m", "scale"], ["y"], name="ln", axis=-1)]
    model = _model(nodes, [_vi("x", TensorProto.FLOAT, [2, 4])], [_vi("y", TensorProto.FLOAT, [2, 4])], [scale],
                   opset=18)
    # onnx-tensorrt's 8.6-GA operator list (trtkit/builder/data/onnx_ops.json) has LayerNormalization, not Mish
    assert not TARGET_86.supported("Mish", 18) and TARGET_86.supported("LayerNormalization", 18)
    rewritten, report = apply_rewrites(model, TARGET_86, steps=[("expand-function", functions.rewrite)])
    assert [r.where for r in report] == ["node 'mish' (Mish)"]
    ops = {n.op_type for n in rewritten.graph.node}
    assert "Mish" not in ops and "LayerNormalization" in ops
    assert all(TARGET_86.supported(op, 18) for op in ops)
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_allclose(run(rewritten, {"x": x})[0], run(model, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_an_op_whose_body_uses_unsupported_ops_is_named_and_left():
    # Softplus has a function body of its own (Exp, Log, Add): a parser without Exp cannot have it either
    target = ParserTarget("picky", 17, False, lambda op: op not in ("Mish", "Softplus", "Exp"))
    model = _model([helper.make_node("Mish", ["x"], ["y"], name="mish")], [_vi("x", TensorProto.FLOAT, [4])],
                   [_vi("y", TensorProto.FLOAT, [4])], opset=18)
    report = functions.rewrite(model, target)
    assert report[0].status == "skipped" and "Softplus" in report[0].what
    assert model.graph.node[0].op_type == "Mish"


# --- opset range -----------------------------------------------------------------------------------------------------


def test_an_opset_above_the_parsers_range_is_converted_down():
    axes = numpy_helper.from_array(np.array([1], dtype=np.int64), "axes")
    model = _model([helper.make_node("ReduceMean", ["x", "axes"], ["y"], name="mean", keepdims=0)],
                   [_vi("x", TensorProto.FLOAT, [2, 3])], [_vi("y", TensorProto.FLOAT, [2])], [axes], opset=18)
    report = opset.rewrite(model, TARGET_86)
    assert report[0].status == "applied" and "from opset 18 to 17" in report[0].what
    assert model.opset_import[0].version == 17
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(run(model, {"x": x})[0], x.mean(axis=1))


def test_an_opset_the_converter_cannot_bring_down_fails_naming_the_range():
    # ReduceMean-18 with axes from a graph input: no version converter adapter can make that an attribute
    model = _model([helper.make_node("ReduceMean", ["x", "axes"], ["y"], name="mean")],
                   [_vi("x", TensorProto.FLOAT, [2, 3]), _vi("axes", TensorProto.INT64, [1])],
                   [_vi("y", TensorProto.FLOAT, None)], opset=18)
    rewritten, report = apply_rewrites(model, TARGET_86, steps=[("opset", opset.rewrite)])
    assert report[0].status == FAILED
    assert "opsets up to 17" in report[0].why and "re-export the model at opset 17" in report[0].what
    assert rewritten is model


def opset6_linear_model():
    """A Gemm and an Add with the opset-6 ``broadcast`` attribute: what old PyTorch exports (test_Linear) look like."""
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4) / 10, "w")
    b = numpy_helper.from_array(np.array([1, 2, 3], dtype=np.float32), "b")
    c = numpy_helper.from_array(np.array([0.5], dtype=np.float32), "c")
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["g"], name="linear", transB=1, broadcast=1),
             helper.make_node("Add", ["g", "c"], ["y"], name="add", broadcast=1)]
    return _model(nodes, [_vi("x", TensorProto.FLOAT, [2, 4])], [_vi("y", TensorProto.FLOAT, [2, 3])], [w, b, c],
                  opset=6)


def test_an_opset_below_the_parsers_range_is_converted_up_and_the_fake_build_then_succeeds(tmp_path):
    from tests.fakes.fake_cuda import FakeCudart
    from tests.fakes.fake_trt import make_fake_trt
    from trtkit.builder import BuildConfig, build
    from trtkit.errors import ParseError
    from trtkit.runtime import TrtRunner
    from trtkit.runtime.cuda import Cuda

    model = opset6_linear_model()
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    expected = run(model, {"x": x})[0]
    with pytest.raises(ParseError, match="Pre-opset 7 broadcasting is unsupported"):
        build(model, BuildConfig(profiling_verbosity="NONE", sanitize=False), trt=make_fake_trt())
    rewritten, report = apply_rewrites(model, TARGET_86, steps=[("opset", opset.rewrite)])
    assert [(r.status, r.what) for r in report] == [
        ("applied", "converted from opset 6 to 7 with onnx's version converter")]
    assert "reads ai.onnx opsets from 7; the model uses 6" in report[0].why
    onnx.checker.check_model(rewritten)
    assert not any(a.name == "broadcast" for n in rewritten.graph.node for a in n.attribute)
    # the build's own prepare step does the same by default, and the engine gives the opset-6 model's numbers
    trt = make_fake_trt()
    path = tmp_path / "linear.engine"
    result = build(model, BuildConfig(profiling_verbosity="NONE"), output=path, trt=trt)
    assert "opset" in [r["rewrite"] for r in result.manifest.to_json()["prepare"]["rewrites"]]
    with TrtRunner(path, trt=trt, cuda=Cuda(FakeCudart())) as runner:
        got = runner.infer({"x": x})["y"]
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    np.testing.assert_allclose(got, x @ (np.arange(12).reshape(3, 4) / 10).T + [1.5, 2.5, 3.5], rtol=1e-5)


def test_an_opset_the_converter_cannot_bring_up_fails_naming_the_range():
    # Upsample-1's height_scale/width_scale form has no adapter to opset 7's scales
    model = _model([helper.make_node("Upsample", ["x"], ["y"], name="up", scales=[1.0, 2.0])],
                   [_vi("x", TensorProto.FLOAT, [2, 4])], [_vi("y", TensorProto.FLOAT, None)], opset=6)
    rewritten, report = apply_rewrites(model, TARGET_86, steps=[("opset", opset.rewrite)])
    assert report[0].status == FAILED
    assert "could not convert opset 6 to 7" in report[0].what and "re-export the model at opset 7" in report[0].what
    assert rewritten is model


def test_models_inside_the_parsers_range_or_without_ai_onnx_ops_are_left():
    assert opset.rewrite(int64_model(), TARGET_86) == []
    no_ai_onnx = _model([], [_vi("x", TensorProto.FLOAT, [1])], [_vi("x", TensorProto.FLOAT, [1])])
    del no_ai_onnx.opset_import[:]
    assert opset.rewrite(no_ai_onnx, TARGET_86) == []
    assert opset.rewrite(opset6_linear_model(), ParserTarget("no lower limit", 17, False, min_opset=None)) == []


# --- opset-18 inputs back as attributes ------------------------------------------------------------------------------


def test_constant_reduce_axes_pad_axes_and_split_outputs_become_the_opset_17_forms():
    consts = [numpy_helper.from_array(np.array([1], dtype=np.int64), "axes"),
              numpy_helper.from_array(np.array([1, 2], dtype=np.int64), "pads"),
              numpy_helper.from_array(np.array([1], dtype=np.int64), "pad_axes")]
    nodes = [helper.make_node("ReduceMax", ["x", "axes"], ["m"], name="max", keepdims=1),
             helper.make_node("Pad", ["m", "pads", "", "pad_axes"], ["p"], name="pad"),
             helper.make_node("Split", ["x"], ["s0", "s1"], name="split", axis=1, num_outputs=2)]
    model = _model(nodes, [_vi("x", TensorProto.FLOAT, [2, 5])],
                   [_vi("p", TensorProto.FLOAT, None), _vi("s0", TensorProto.FLOAT, None),
                    _vi("s1", TensorProto.FLOAT, None)], consts, opset=18)
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    expected = run(model, {"x": x})
    report = attributes.rewrite(model, TARGET_86)
    assert [r.status for r in report] == ["applied"] * 3, [str(r) for r in report]
    # what a parser reading opset 17 sees: attributes where opset 18 has inputs
    model.opset_import[0].version = 17
    got = run(model, {"x": x})
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)


def test_axes_from_a_graph_input_are_named_and_left():
    model = _model([helper.make_node("ReduceMean", ["x", "axes"], ["y"], name="mean")],
                   [_vi("x", TensorProto.FLOAT, [2, 3]), _vi("axes", TensorProto.INT64, [1])],
                   [_vi("y", TensorProto.FLOAT, None)], opset=18)
    report = attributes.rewrite(model, TARGET_86)
    assert report[0].status == "skipped" and "'axes' is not a constant" in report[0].what


# --- the driver ------------------------------------------------------------------------------------------------------


def test_a_rewrite_that_raises_is_named_and_the_model_kept():
    def broken(proto, target):
        proto.graph.node[0].op_type = "Changed"
        raise ValueError("boom at node x")

    model = placeholder_dims_model()
    rewritten, report = apply_rewrites(model, TARGET_86, steps=[("broken", broken), ("symbolic-dims", dims.rewrite)])
    assert report[0] == Rewrite("broken", "model", "not applied: the rewrite raised", "boom at node x", FAILED)
    assert rewritten.graph.node[0].op_type == "ReduceSum"
    assert [r.rewrite for r in report[1:]] == ["symbolic-dims"] * 3


def test_target_from_the_fake_tensorrt_asks_by_feature():
    from tests.fakes import fake_trt

    assert not ParserTarget.from_trt(fake_trt.make_fake_trt("8.6.1")).int64_io
    assert ParserTarget.from_trt(fake_trt.make_fake_trt("10.9.0")).int64_io
    assert ParserTarget.from_trt(fake_trt.make_fake_trt("8.6.1")).max_opset == 17
    assert ParserTarget.from_trt(fake_trt.make_fake_trt("10.9.0")).min_opset == 7 == ParserTarget.assumed().min_opset


def test_the_op_check_report_flags_ambiguous_dimension_names():
    from tests.fakes.fake_trt import make_fake_trt
    from trtkit.builder.opcheck import preflight

    report = preflight(placeholder_dims_model(), trt=make_fake_trt())
    assert any("a[0], a[1], b[0]" in note and "TensorRT would treat them as equal" in note for note in report.notes)


def _rename_first_node_quietly(proto, target):
    proto.graph.node[0].name = "renamed-without-saying"
    return []


def _rename_first_node(proto, target):
    old, proto.graph.node[0].name = proto.graph.node[0].name, "renamed"
    return [Rewrite("rename", f"node '{old}'", "renamed", "a test step")]


def test_a_step_that_changes_the_model_without_applying_is_dropped_and_the_next_step_sees_the_model():
    model = tiny_conv(dynamic_batch=False)
    name = model.graph.node[0].name
    seen = []

    def look(proto, target):
        seen.append(proto.graph.node[0].name)
        return []

    steps = [("quiet", _rename_first_node_quietly), ("look", look), ("rename", _rename_first_node), ("look", look)]
    rewritten, report = apply_rewrites(model, TARGET_86, steps=steps)
    assert seen == [name, "renamed"]
    assert rewritten.graph.node[0].name == "renamed" and model.graph.node[0].name == name
    assert [r.rewrite for r in report] == ["rename"]


def _grid_sample_model(mode, x_shape):
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], name="gs", mode=mode, align_corners=0)
    return _model([node], [_vi("x", TensorProto.FLOAT, x_shape), _vi("grid", TensorProto.FLOAT, [1, 3, 3, 2])],
                  [_vi("y", TensorProto.FLOAT, None)], opset=20)


@pytest.mark.parametrize("mode, old", [("linear", "bilinear"), ("cubic", "bicubic")])
def test_grid_sample_20_mode_names_become_the_opset_16_names_with_the_same_values(mode, old):
    from trtkit.builder.rewrites import semantics

    model = _grid_sample_model(mode, [1, 2, 4, 4])
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((1, 2, 4, 4)).astype(np.float32),
             "grid": rng.uniform(-1, 1, (1, 3, 3, 2)).astype(np.float32)}
    expected = run(model, feeds)[0]
    assert semantics.find(model, TARGET_86)  # as exported: an opset-17 parser does not know the mode
    report = attributes.rewrite(model, TARGET_86)
    assert [(r.status, r.what.split(" (")[0]) for r in report] == [("applied", f"mode '{mode}' -> '{old}'")]
    assert semantics.find(model, TARGET_86) == []
    # what the parser reads: GridSample-16 (onnx's reference evaluator knows only the newest names; ONNX Runtime both)
    ort = pytest.importorskip("onnxruntime")
    model.opset_import[0].version = 16
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, feeds)[0], expected, rtol=1e-4, atol=1e-5)


def test_grid_sample_on_a_5d_input_is_named_and_left():
    model = _grid_sample_model("linear", [1, 2, 4, 4, 4])
    report = attributes.rewrite(model, TARGET_86)
    assert report[0].status == "skipped" and "rank 5 (GridSample-16 takes 4-D inputs only)" in report[0].what
