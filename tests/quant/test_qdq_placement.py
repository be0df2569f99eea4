"""Q/DQ placement options for detectors (issue 15): residual adds behind an activation, Concats with one scale."""

import numpy as np
import onnx
import pytest

from tests.quant.qmodels import batchnorm_before_add, residual_cnn, silu_residual, yolo_like
from tests.runtime.fakes import fake_gpu  # noqa: F401 - fixture
from trtkit.quant.qdq import QdqOptions, insert_qdq, plan_qdq


def _inputs_of(model, node_name):
    node = next(n for n in model.graph.node if n.name == node_name)
    producers = {o: n for n in model.graph.node for o in n.output}
    return [producers[i].op_type if i in producers else i for i in node.input]


def _scale_of(model, dq_output):
    from onnx import numpy_helper

    dq = next(n for n in model.graph.node if dq_output in n.output)
    return float(numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == dq.input[1])))


def test_a_residual_add_behind_silu_is_not_seen_by_default():
    plan = plan_qdq(silu_residual(), QdqOptions(keep_output_layers=False))
    assert plan.residual == []
    assert ("add_res", 0) not in plan.consumers["stem_act"]


def test_residual_through_activation_quantizes_the_skip_input_of_the_silu_block():
    plan = plan_qdq(silu_residual(), QdqOptions(keep_output_layers=False, residual_through_activation=True))
    # conv_b's SiLU is the add's main input (conv_b runs last): the stem's activation is the skip
    assert plan.residual == [("add_res", "stem_act")]
    assert plan.consumers["stem_act"] == [("conv_a", 0), ("add_res", 0)]
    qdq, _ = insert_qdq(silu_residual(), {t: 3.0 for t in plan.activations}, plan)
    onnx.checker.check_model(qdq, full_check=True)
    assert _inputs_of(qdq, "add_res") == ["DequantizeLinear", "Mul"]
    assert "1 residual add(s)" in plan.summary()


def test_add_inputs_quantizes_the_activation_input_of_the_add_too():
    # act(conv) + skip: TensorRT cannot fold the add into conv_b's epilogue, so both inputs get Q/DQ (an INT8 add)
    options = QdqOptions(keep_output_layers=False, residual_through_activation=True, quantize_add_inputs=True)
    plan = plan_qdq(silu_residual(), options)
    assert plan.residual == [("add_res", "stem_act")]
    assert sorted(c for t in plan.activations for c in plan.consumers[t] if c[0] == "add_res") == [
        ("add_res", 0), ("add_res", 1)]
    qdq, _ = insert_qdq(silu_residual(), {t: 3.0 for t in plan.activations}, plan)
    onnx.checker.check_model(qdq, full_check=True)
    assert _inputs_of(qdq, "add_res") == ["DequantizeLinear", "DequantizeLinear"]
    # without residual_through_activation there is no such add, so nothing more is quantized
    assert plan_qdq(silu_residual(), QdqOptions(keep_output_layers=False, quantize_add_inputs=True)).residual == []


@pytest.mark.parametrize("batchnorm", [False, True], ids=["folded", "batchnorm-kept"])
def test_the_detector_placement_leaves_a_resnet_style_plan_as_it_is(batchnorm):
    # ResNet's adds read a convolution (through its BatchNormalization, in exports that keep it) before the
    # activation: TensorRT fuses them into the convolution, so quantizing that input too would split the fusion.
    # The detector options (through activations, both add inputs, shared Concat scales) change nothing here.
    model = batchnorm_before_add(residual_cnn()) if batchnorm else residual_cnn()
    default = plan_qdq(model)
    detector = plan_qdq(model, QdqOptions(residual_through_activation=True, quantize_add_inputs=True,
                                          concat_shared_scale=True))
    assert detector.residual == default.residual and len(default.residual) == 2
    assert detector.consumers == default.consumers and detector.scale_groups == default.scale_groups == {}


def test_an_activation_whose_convolution_output_is_read_elsewhere_does_not_count():
    # conv_b's output feeds its SiLU and a side Conv: the activation is not conv_b's alone, nothing fuses
    plan = plan_qdq(silu_residual(shared_stem=True), QdqOptions(keep_output_layers=False,
                                                                residual_through_activation=True))
    assert plan.residual == []


def test_residual_through_activation_needs_quantize_residual():
    plan = plan_qdq(silu_residual(), QdqOptions(keep_output_layers=False, residual_through_activation=True,
                                                quantize_residual=False))
    assert plan.residual == []


def test_concat_inputs_are_quantized_with_one_scale_shared_with_the_output():
    model = yolo_like()
    plain = plan_qdq(model)
    assert "up" not in plain.activations and plain.scale_groups == {}
    plan = plan_qdq(yolo_like(), QdqOptions(concat_shared_scale=True))
    assert plan.consumers["up"] == [("concat", 0)]
    assert ("concat", 1) in plan.consumers["stem_act"]  # the stem's feature: also read by down_conv, one Q for both
    # the Resize making "up" reads its input in the Concat's scale too (it runs in INT8 without a requantization)
    assert plan.consumers["down_act"] == [("upsample", 0)]
    assert plan.scale_groups == {"up": "cat", "down_act": "cat", "stem_act": "cat", "cat": "cat"}
    assert "1 shared-scale concat group(s)" in plan.summary()
    amax = {t: 1.0 for t in plan.activations} | {"up": 2.0, "stem_act": 5.0, "cat": 4.0}
    qdq, _ = insert_qdq(yolo_like(), amax, plan)
    onnx.checker.check_model(qdq, full_check=True)
    assert _inputs_of(qdq, "concat") == ["DequantizeLinear", "DequantizeLinear"]
    assert _inputs_of(qdq, "upsample")[0] == "DequantizeLinear"
    scales = {t: _scale_of(qdq, f"{t}_dequantized") for t in ("up", "down_act", "stem_act", "cat")}
    assert scales == pytest.approx(dict.fromkeys(scales, np.float32(5.0 / 127)))  # the largest amax of the group
    # tensors outside a group keep their own scale
    assert _scale_of(qdq, "neck_act_dequantized") == pytest.approx(1.0 / 127)


def test_shape_concats_are_left_alone():
    # the head's Concat feeds a Reshape, not a quantized layer: nothing to share
    plan = plan_qdq(yolo_like(), QdqOptions(concat_shared_scale=True, keep_output_layers=False))
    assert "head_concat" not in {node for pairs in plan.consumers.values() for node, _ in pairs}
    assert set(plan.scale_groups.values()) == {"cat"}


# --- through the build ---------------------------------------------------------------------------------------------

def _feeds(n=2):
    rng = np.random.default_rng(0)
    return [{"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)} for _ in range(n)]


def _config(**options):
    from trtkit.builder.config import BuildConfig, CalibrationSettings
    from trtkit.builder.profiles import parse_shapes

    return BuildConfig(precision="int8", int8_mode="qdq", profiles=[parse_shapes("x:1x3x8x8,2x3x8x8,4x3x8x8")],
                       calibration=CalibrationSettings(source=_feeds(), algorithm="minmax"), **options)


def test_placement_options_reach_the_plan_from_the_build_config(fake_gpu):  # noqa: F811 - fixture
    from trtkit._version_compat import capabilities
    from trtkit.builder.builder import statistics_engine_builder
    from trtkit.builder.precision import plan_precision
    from trtkit.model import load_model

    trt, _ = fake_gpu
    config = _config(qdq_residual_activations=True, qdq_keep_heads=False)
    plan = plan_precision(trt, load_model(silu_residual()), config, capabilities(trt),
                          build_statistics_engine=statistics_engine_builder(config, trt))
    assert "4 layer(s) quantized, 0 kept in higher precision, 1 residual add(s)" in plan.notes[0]


def test_placement_options_on_a_calibrator_build_are_refused_and_the_on_by_default_ones_are_not():
    from tests.fakes.fake_trt import make_fake_trt
    from tests.quant.test_precision_plan import with_calibrators
    from trtkit._version_compat import capabilities
    from trtkit.builder.precision import plan_precision
    from trtkit.errors import UnsupportedError
    from trtkit.model import load_model

    trt = with_calibrators(make_fake_trt("8.6.0"))
    config = _config(qdq_keep_heads=False)
    config.int8_mode = "calibrator"
    with pytest.raises(UnsupportedError, match=r"placement settings \(the quantized heads\) need Q/DQ "
                                               r"nodes.*use int8_mode 'qdq'"):
        plan_precision(trt, load_model(silu_residual()), config, capabilities(trt))
    config = _config()  # residual activations (add inputs with them), shared Concat scales: on, and ignored by the
    config.int8_mode = "calibrator"  # calibrator
    assert config.qdq_residual_activations and config.qdq_concat_shared_scale
    assert plan_precision(trt, load_model(silu_residual()), config, capabilities(trt)).calibrator is not None


def test_on_the_sample_detector_the_union_placement_covers_every_variant_and_leaves_no_mixed_reader():
    """What benchmarks/qdq_placement_h200.py relies on (one calibration: the union's tensors hold every variant's),
    and the analysis of issue 15: by default 12 quantized tensors are also read unquantized (10 by residual adds, 2
    by Concats), so TensorRT must keep a float copy of each; with both options none is."""
    from pathlib import Path

    model = onnx.load(Path(__file__).resolve().parents[2] / "samples" / "detection" / "model" / "detector.onnx")
    union = plan_qdq(model, QdqOptions(residual_through_activation=True, concat_shared_scale=True,
                                       keep_output_layers=False, quantize_add_inputs=True))
    for options in (QdqOptions(), QdqOptions(residual_through_activation=True), QdqOptions(concat_shared_scale=True),
                    QdqOptions(keep_output_layers=False),
                    QdqOptions(residual_through_activation=True, concat_shared_scale=True, keep_output_layers=False),
                    QdqOptions(residual_through_activation=True, concat_shared_scale=True, quantize_add_inputs=True)):
        assert set(plan_qdq(model, options).activations) <= set(union.activations)

    def mixed(plan):
        readers = {}
        for node in model.graph.node:
            for name in node.input:
                readers.setdefault(name, []).append(node)
        return sorted(r.op_type for t in plan.activations for r in readers[t]
                      if r.name not in {n for n, _ in plan.consumers[t]})

    assert mixed(plan_qdq(model)) == ["Add"] * 10 + ["Concat"] * 2
    assert mixed(plan_qdq(model, QdqOptions(residual_through_activation=True, concat_shared_scale=True))) == []
    assert len(union.residual) == 10 and len(set(union.scale_groups.values())) == 2


@pytest.mark.parametrize("argv, message", [
    (["--int8", "--int8-mode", "calibrator", "--calib-cache", "c.cache", "--no-qdq-concat-shared-scale"],
     r"--no-qdq-concat-shared-scale place\(s\) Q/DQ nodes, which --int8-mode calibrator does not make"),
    (["--fp16", "--qdq-residual-activations"], "--qdq-residual-activations applies only to --int8"),
])
def test_the_cli_refuses_placement_flags_that_would_do_nothing(tmp_path, capsys, argv, message):
    import re
    from pathlib import Path

    from trtkit.cli.main import main

    out = tmp_path / "x.engine"
    model = Path(__file__).resolve().parents[1] / "data" / "digits_cnn.onnx"
    assert main(["build", str(model), *argv, "-o", str(out)]) == 2
    assert re.search(message, capsys.readouterr().err)
    assert not out.exists()
