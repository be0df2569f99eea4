"""Tensor types TensorRT has no counterpart for (trtkit.builder.rewrites.dtypes): named by node before the parser,
which names none (8.6: `convertDtype ... Failed to convert ONNX data type`, node index -1)."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper

from tests.fakes.fake_trt import make_fake_trt
from tests.models import _model
from trtkit import prepare
from trtkit.builder.rewrites import ParserTarget


def _vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def bf16_celu():
    """onnx's test_celu_bfloat16: a BFLOAT16 graph."""
    return _model([helper.make_node("Celu", ["x"], ["y"], name="celu")], [_vi("x", TensorProto.BFLOAT16, [4])],
                  [_vi("y", TensorProto.BFLOAT16, [4])], opset=17)


def float8_cast():
    nodes = [helper.make_node("Cast", ["x"], ["q"], name="to_fp8", to=TensorProto.FLOAT8E5M2),
             helper.make_node("Cast", ["q"], ["y"], name="back", to=TensorProto.FLOAT)]
    return _model(nodes, [_vi("x", TensorProto.FLOAT, [4])], [_vi("y", TensorProto.FLOAT, [4])], opset=19)


def test_a_type_tensorrt_86_lacks_is_named_at_the_first_node_that_reads_it():
    hazards = prepare(bf16_celu(), target=ParserTarget.assumed()).hazards
    assert [(h.node, h.op_type) for h in hazards] == [("celu", "Celu")]
    assert "reads BFLOAT16 ('x'), a type TensorRT 8.6" in hazards[0].what
    assert "convert it in the model" in hazards[0].advice


def test_a_cast_to_a_missing_type_is_named_at_the_cast():
    hazards = prepare(float8_cast(), target=ParserTarget.from_trt(make_fake_trt("10.9.0"))).hazards
    # the two first nodes per type: the cast that makes it, the one that reads it
    assert [(h.node, h.op_type) for h in hazards] == [("to_fp8", "Cast"), ("back", "Cast")]
    assert "makes FLOAT8E5M2 ('q')" in hazards[0].what  # no TensorRT has E5M2


@pytest.mark.parametrize("version, refused", [("8.6.1", True), ("10.9.0", False), ("11.0.0", False)])
def test_bfloat16_is_refused_where_tensorrt_has_no_bf16_and_left_where_it_has(version, refused):
    hazards = prepare(bf16_celu(), target=ParserTarget.from_trt(make_fake_trt(version))).hazards
    assert bool(hazards) is refused


def test_the_build_names_the_node_instead_of_the_parsers_nodeless_error():
    from trtkit.builder import BuildConfig, build
    from trtkit.errors import ModelError

    with pytest.raises(ModelError, match=r"node 'celu' \(Celu\): reads BFLOAT16"):
        build(bf16_celu(), BuildConfig(profiling_verbosity="NONE"), trt=make_fake_trt("8.6.1"))


def test_models_of_the_types_every_tensorrt_has_are_left():
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [_vi("x", TensorProto.FLOAT16, [4])],
                   [_vi("y", TensorProto.FLOAT16, [4])], opset=17)
    assert prepare(model, target=ParserTarget.assumed()).hazards == []
