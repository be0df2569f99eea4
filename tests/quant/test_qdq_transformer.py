"""Q/DQ placement on transformer blocks (onnx.helper models): attention and MLP MatMuls quantized as NVIDIA's ModelOpt
places them, Softmax, normalizations and residual adds left alone, a DETR decoder's location layers kept."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, checker, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from trtkit.quant.qdq import QdqOptions, insert_qdq, plan_qdq

D, T = 64, 16  # model width, tokens


def _w(rng, name, *shape):
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)


def _decomposed_layernorm(x, out, p):
    """LayerNorm as some exports write it: ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add."""
    return [
        helper.make_node("ReduceMean", [x, "last"], [f"{p}_mu"], name=f"{p}_mean"),
        helper.make_node("Sub", [x, f"{p}_mu"], [f"{p}_d"], name=f"{p}_sub"),
        helper.make_node("Pow", [f"{p}_d", "two"], [f"{p}_sq"], name=f"{p}_pow"),
        helper.make_node("ReduceMean", [f"{p}_sq", "last"], [f"{p}_var"], name=f"{p}_var_mean"),
        helper.make_node("Add", [f"{p}_var", "eps"], [f"{p}_ve"], name=f"{p}_add_eps"),
        helper.make_node("Sqrt", [f"{p}_ve"], [f"{p}_sd"], name=f"{p}_sqrt"),
        helper.make_node("Div", [f"{p}_d", f"{p}_sd"], [f"{p}_n"], name=f"{p}_div"),
        helper.make_node("Mul", [f"{p}_n", "gamma"], [f"{p}_g"], name=f"{p}_mul"),
        helper.make_node("Add", [f"{p}_g", "beta"], [out], name=f"{p}_add"),
    ]


def encoder_block(seed=0):
    """x → LayerNormalization → Q, K, V → Q·K^T → scale → Softmax → ·V → out proj → + x, then a decomposed LayerNorm →
    MLP (fc1, Relu, fc2) → + residual → head MatMul → output."""
    rng = np.random.default_rng(seed)
    nodes = [
        helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["ln1"], axis=-1, name="ln1"),
        helper.make_node("MatMul", ["ln1", "wq"], ["q"], name="q_proj"),
        helper.make_node("MatMul", ["ln1", "wk"], ["k"], name="k_proj"),
        helper.make_node("MatMul", ["ln1", "wv"], ["v"], name="v_proj"),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1], name="k_t"),
        helper.make_node("MatMul", ["q", "kt"], ["s"], name="qk"),
        helper.make_node("Mul", ["s", "inv_sqrt_d"], ["s_scaled"], name="scale"),
        helper.make_node("Softmax", ["s_scaled"], ["p"], axis=-1, name="softmax"),
        helper.make_node("MatMul", ["p", "v"], ["a"], name="pv"),
        helper.make_node("MatMul", ["a", "wo"], ["o"], name="o_proj"),
        helper.make_node("Add", ["x", "o"], ["r1"], name="residual1"),
        *_decomposed_layernorm("r1", "ln2", "ln2"),
        helper.make_node("MatMul", ["ln2", "w1"], ["h"], name="fc1"),
        helper.make_node("Relu", ["h"], ["h_act"], name="act"),
        helper.make_node("MatMul", ["h_act", "w2"], ["m"], name="fc2"),
        helper.make_node("Add", ["r1", "m"], ["r2"], name="residual2"),
        helper.make_node("MatMul", ["r2", "w_head"], ["y"], name="head"),
    ]
    inits = [_w(rng, n, D, D) for n in ("wq", "wk", "wv", "wo")] + [_w(rng, "w1", D, 4 * D), _w(rng, "w2", 4 * D, D),
                                                                    _w(rng, "w_head", D, 8)]
    inits += [numpy_helper.from_array(np.ones(D, np.float32), "gamma"),
              numpy_helper.from_array(np.zeros(D, np.float32), "beta"),
              numpy_helper.from_array(np.float32(D ** -0.5), "inv_sqrt_d"),
              numpy_helper.from_array(np.float32(2.0), "two"), numpy_helper.from_array(np.float32(1e-5), "eps"),
              numpy_helper.from_array(np.array([-1], np.int64), "last")]
    graph = helper.make_graph(nodes, "encoder", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, T, D])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, T, 8])], inits)
    # opset 19: onnx's reference evaluator implements DequantizeLinear from there
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def test_attention_and_mlp_matmuls_are_quantized_and_the_rest_left_alone():
    model = encoder_block()
    plan = plan_qdq(model)
    assert plan.quantized == ["q_proj", "k_proj", "v_proj", "qk", "pv", "o_proj", "fc1", "fc2"]
    assert plan.skipped == {"head": "final layer (head) kept in higher precision"}
    # Q·K^T and Softmax·V: both activations; the LayerNorm output once, for its three readers
    assert plan.consumers["q"] == [("qk", 0)] and plan.consumers["kt"] == [("qk", 1)]
    assert plan.consumers["p"] == [("pv", 0)] and plan.consumers["v"] == [("pv", 1)]
    assert plan.consumers["ln1"] == [("q_proj", 0), ("k_proj", 0), ("v_proj", 0)]
    assert plan.consumers["ln2"] == [("fc1", 0)]  # the decomposed LayerNorm's output, not its inner tensors
    # nothing read by Softmax, a normalization or a residual add is quantized
    readers = {node for pairs in plan.consumers.values() for node, _ in pairs}
    assert readers == set(plan.quantized) and plan.residual == []
    assert {w.initializer for w in plan.weights.values()} == {"wq", "wk", "wv", "wo", "w1", "w2"}
    assert all(w.axis is None for w in plan.weights.values())  # per tensor unless per_channel_matmul
    per_channel = plan_qdq(encoder_block(), QdqOptions(per_channel_matmul=True))
    assert {w.axis for w in per_channel.weights.values()} == {1}  # along N of each (K, N) weight


def test_the_quantized_encoder_is_valid_and_close_to_fp32():
    model = encoder_block()
    plan = plan_qdq(model)
    x = np.random.default_rng(1).standard_normal((1, T, D)).astype(np.float32)
    names = list(plan.activations)
    extended = encoder_block()
    extended.graph.output.extend(helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names)
    values = ReferenceEvaluator(extended).run(None, {"x": x})
    amax = {n: float(np.abs(v).max()) for n, v in zip(names, values[1:])}
    amax["x"] = float(np.abs(x).max())
    qdq, _ = insert_qdq(model, amax, plan)
    checker.check_model(qdq)
    ops = [n.op_type for n in qdq.graph.node]
    assert ops.count("QuantizeLinear") == len(names) + len(plan.weights)
    got = ReferenceEvaluator(qdq).run(None, {"x": x})[0]
    assert np.abs(got - values[0]).max() <= 0.06 * np.abs(values[0]).max()  # INT8 error, a few % of the range


def detr_decoder_layer(seed=0):
    """A deformable-attention decoder layer's location path: ref = Sigmoid(ref_logits); query position = MLP(ref);
    offsets = MatMul(query); grid = 2 * (ref + offsets) - 1 → GridSample of a Conv-projected memory; out proj; the
    box head's delta added to inverse_sigmoid(ref) → Sigmoid → boxes."""
    rng = np.random.default_rng(seed)
    nodes = [
        helper.make_node("Sigmoid", ["ref_logits"], ["ref"], name="ref_sigmoid"),
        helper.make_node("MatMul", ["ref", "wp1"], ["qp1"], name="pos_mlp1"),
        helper.make_node("Relu", ["qp1"], ["qp1_act"], name="pos_act"),
        helper.make_node("MatMul", ["qp1_act", "wp2"], ["qp2"], name="pos_mlp2"),
        helper.make_node("Add", ["tgt", "qp2"], ["query"], name="with_pos"),
        helper.make_node("MatMul", ["query", "w_off"], ["off"], name="sampling_offsets"),
        helper.make_node("Reshape", ["off", "off_shape"], ["off_r"], name="off_reshape"),
        helper.make_node("Unsqueeze", ["ref", "axis2"], ["ref_u"], name="ref_unsqueeze"),
        helper.make_node("Add", ["ref_u", "off_r"], ["loc"], name="locations"),
        helper.make_node("Mul", ["loc", "two"], ["loc2"], name="loc_x2"),
        helper.make_node("Sub", ["loc2", "one"], ["grid"], name="loc_grid"),
        helper.make_node("Conv", ["memory", "w_value"], ["value"], name="value_proj"),
        helper.make_node("GridSample", ["value", "grid"], ["sampled"], name="sample", align_corners=0),
        helper.make_node("ReduceMean", ["sampled", "axis3"], ["pooled"], keepdims=0, name="pool"),
        helper.make_node("Transpose", ["pooled"], ["feat"], perm=[0, 2, 1], name="feat_t"),
        helper.make_node("MatMul", ["feat", "w_out"], ["attn"], name="out_proj"),
        helper.make_node("Add", ["tgt", "attn"], ["h"], name="residual"),
        helper.make_node("MatMul", ["h", "w_box"], ["delta"], name="box_head"),
        helper.make_node("Sub", ["one", "ref"], ["one_minus"], name="inv_sig_sub"),
        helper.make_node("Div", ["ref", "one_minus"], ["odds"], name="inv_sig_div"),
        helper.make_node("Log", ["odds"], ["ref_logit"], name="inv_sig_log"),
        helper.make_node("Add", ["delta", "ref_logit"], ["box_logit"], name="refine"),
        helper.make_node("Sigmoid", ["box_logit"], ["boxes"], name="box_sigmoid"),
    ]
    q, c = 8, 32
    inits = [_w(rng, "wp1", 2, 256), _w(rng, "wp2", 256, c), _w(rng, "w_off", c, 16), _w(rng, "w_out", c, c),
             _w(rng, "w_box", c, 2), _w(rng, "w_value", c, c, 1, 1),
             numpy_helper.from_array(np.array([1, q, 8, 2], np.int64), "off_shape"),
             numpy_helper.from_array(np.array([2], np.int64), "axis2"),
             numpy_helper.from_array(np.array([3], np.int64), "axis3"),
             numpy_helper.from_array(np.float32(2.0), "two"), numpy_helper.from_array(np.float32(1.0), "one")]
    inputs = [helper.make_tensor_value_info("ref_logits", TensorProto.FLOAT, [1, q, 2]),
              helper.make_tensor_value_info("tgt", TensorProto.FLOAT, [1, q, c]),
              helper.make_tensor_value_info("memory", TensorProto.FLOAT, [1, c, 8, 8])]
    graph = helper.make_graph(nodes, "decoder", inputs, [helper.make_tensor_value_info("boxes", TensorProto.FLOAT,
                                                                                        [1, q, 2])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def test_a_detr_decoders_reference_point_and_sampling_layers_stay_in_higher_precision():
    plan = plan_qdq(detr_decoder_layer(), QdqOptions(min_weight_elements=0))
    location = "reference points or sampling locations (DETR decoder) kept in higher precision"
    assert plan.skipped == {"pos_mlp1": location, "sampling_offsets": location,
                            "box_head": "final layer (head) kept in higher precision"}
    # the features around them are quantized: the second position layer, the value projection, the output projection
    assert plan.quantized == ["pos_mlp2", "value_proj", "out_proj"]
    assert "2 location" in plan.summary()
    # the rule stands without the head rule too (--qdq-quantize-heads)
    assert plan_qdq(detr_decoder_layer(), QdqOptions(keep_output_layers=False, min_weight_elements=0)).skipped == {
        "pos_mlp1": location, "sampling_offsets": location}


def test_models_without_a_grid_sample_have_no_location_layers():
    assert not any("reference points" in r for r in plan_qdq(encoder_block()).skipped.values())
