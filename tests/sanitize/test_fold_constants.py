"""Constant folding: what it folds, what it must leave alone, and that results never change."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import sanitize_models as models
from onnx.reference import ReferenceEvaluator

from trtkit.builder.sanitize import fold_constants, save_model
from trtkit.errors import ModelError


def _random_feeds(model, rng, batch=3):
    feeds = {}
    initializers = {t.name for t in model.graph.initializer}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor_type = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else batch for d in tensor_type.shape.dim]
        if tensor_type.elem_type == onnx.TensorProto.BOOL:
            feeds[value.name] = np.array(rng.random() > 0.5) if not dims else rng.random(dims) > 0.5
        else:
            feeds[value.name] = rng.standard_normal(dims).astype(np.float32)
    return feeds


def _assert_same_outputs(before, after, trials=3):
    rng = np.random.default_rng(0)
    for _ in range(trials):
        feeds = _random_feeds(before, rng)
        expected = ReferenceEvaluator(before).run(None, feeds)
        actual = ReferenceEvaluator(after).run(None, feeds)
        assert len(expected) == len(actual)
        for e, a in zip(expected, actual):
            np.testing.assert_array_equal(e, a)


def _ops(model):
    return [n.op_type for n in model.graph.node]


def test_constant_of_shape_conv_weights_become_initializers():
    model = models.constant_of_shape_conv()
    folded, report = fold_constants(model)
    assert _ops(folded) == ["Conv", "Relu"]
    assert sorted(report.initializers) == ["b", "w"]
    assert {name for name, _ in report.folded} >= {"w_fill", "b_fill", "w_add"}
    assert report.changed and report.nodes_before == 7 and report.nodes_after == 2
    _assert_same_outputs(model, folded)


def test_static_shape_chain_folds_into_reshape_target():
    model = models.static_shape_chain()
    folded, report = fold_constants(model)
    assert _ops(folded) == ["Reshape"]
    target = {t.name: onnx.numpy_helper.to_array(t) for t in folded.graph.initializer}["target"]
    assert target.tolist() == [2, -1]
    assert [op for _, op in report.folded].count("Shape") == 1
    _assert_same_outputs(model, folded)


def test_dynamic_batch_keeps_batch_part_and_folds_static_dims():
    model = models.dynamic_batch_shape_chain()
    folded, report = fold_constants(model)
    assert "gather_rest" in {name for name, _ in report.folded}
    assert "gather_batch" not in {name for name, _ in report.folded}
    assert {t.name: onnx.numpy_helper.to_array(t) for t in folded.graph.initializer}["features"].tolist() == [60]
    _assert_same_outputs(model, folded)


def test_shape_slice_of_static_dims_folds_even_with_dynamic_batch():
    model = models.shape_derived_scale()
    folded, report = fold_constants(model)
    assert _ops(folded) == ["Mul"]
    assert [op for _, op in report.folded] == ["Shape", "Cast", "Sqrt", "Reciprocal"]
    _assert_same_outputs(model, folded)


def test_subgraph_use_of_a_folded_value_keeps_working():
    model = models.if_with_outer_constant()
    folded, report = fold_constants(model)
    assert _ops(folded) == ["If"] and report.initializers == ["k"]
    _assert_same_outputs(model, folded, trials=4)


@pytest.mark.parametrize("make", [models.qdq_conv, models.random_noise, models.constant_output, models.plain_relu])
def test_leaves_qdq_random_ops_outputs_and_plain_models_alone(make):
    model = make()
    folded, report = fold_constants(model)
    assert folded is model
    assert not report.changed
    assert report.summary() == "constant folding: nothing to fold"


def test_size_threshold_leaves_big_values_computed():
    model = models.constant_of_shape_conv()
    folded, report = fold_constants(model, size_threshold=100)  # weights are 8*3*3*3*4 = 864 bytes
    assert "Conv" in _ops(folded)
    assert report.skipped == [("w_fill", "value larger than 100 bytes")]
    assert "w" not in report.initializers
    _assert_same_outputs(model, folded)


def test_report_summary_and_json_name_what_changed():
    _, report = fold_constants(models.constant_of_shape_conv())
    assert report.summary().startswith("constant folding: folded 5 node(s) (")
    assert "ConstantOfShape ×2" in report.summary() and "7 → 2 nodes" in report.summary()
    data = report.to_json()
    assert data["changed"] is True and {"name": "w_fill", "op": "ConstantOfShape"} in data["folded"]


def test_accepts_path_and_bytes_and_saves_the_result(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(models.constant_of_shape_conv(), path)
    from_path, _ = fold_constants(str(path))
    from_bytes, _ = fold_constants(path.read_bytes())
    assert _ops(from_path) == _ops(from_bytes) == ["Conv", "Relu"]
    saved = save_model(from_path, tmp_path / "m.sanitized.onnx")
    onnx.checker.check_model(onnx.load(saved))
    _assert_same_outputs(models.constant_of_shape_conv(), onnx.load(saved))


def test_unreadable_model_is_a_model_error():
    with pytest.raises(ModelError, match="not a valid ONNX model"):
        fold_constants(b"definitely not onnx")


def test_save_to_missing_folder_says_so(tmp_path):
    with pytest.raises(ModelError, match="Cannot write the sanitized model"):
        save_model(models.plain_relu(), tmp_path / "missing" / "m.onnx")


def test_keeps_opset_and_metadata():
    model = models.constant_of_shape_conv(opset=19)
    model.producer_name = "exporter"
    folded, _ = fold_constants(model)
    assert [(o.domain, o.version) for o in folded.opset_import] == [("", 19)]
    assert folded.producer_name == "exporter" and folded.ir_version == model.ir_version


def test_an_ir3_model_whose_initializers_are_inputs_folds_and_stays_valid():
    model = models.ir3_initializers_as_inputs()
    onnx.checker.check_model(model)
    folded, report = fold_constants(model)
    assert report.changed and _ops(folded) == ["Conv"]
    onnx.checker.check_model(folded)  # IR 4 or later: initializers need not be inputs, and are not
    assert folded.ir_version >= 4 and [v.name for v in folded.graph.input] == ["x"]
    _assert_same_outputs(model, folded)
    assert len(model.graph.input) == 3 and model.ir_version == 3  # the given model is left as it was


LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"  # IR version 3 models
light = pytest.mark.skipif(not LIGHT.is_dir(), reason="this onnx wheel ships no backend test data")


@light
@pytest.mark.parametrize("name", sorted(p.stem for p in LIGHT.glob("light_*.onnx")) or ["none"])
def test_the_onnx_wheels_ir3_models_fold(name):
    model = onnx.load(LIGHT / f"{name}.onnx")
    assert model.ir_version < 4
    # values over 1 MiB stay computed: the large fully connected weights would only make the test slow
    folded, report = fold_constants(model, size_threshold=1 << 20)
    assert report.changed and not report.notes, report.notes
    onnx.checker.check_model(folded)


@light
@pytest.mark.parametrize("name", ["light_squeezenet", "light_shufflenet"])
def test_the_onnx_wheels_ir3_models_build_folded(name, fake_trt, tmp_path, capsys):
    from trtkit.builder.builder import build_serialized
    from trtkit.cli.main import main

    result = build_serialized(LIGHT / f"{name}.onnx", trt=fake_trt)
    (fold,) = [r for r in result.manifest.prepare["rewrites"] if r["rewrite"] == "fold-constants"]
    assert result.engine and fold["status"] == "applied", fold
    assert main(["sanitize", str(LIGHT / f"{name}.onnx"), "-o", str(tmp_path / "s.onnx")]) == 0
    out = capsys.readouterr().out
    assert "trtkit bug" not in out and "applied" in out
    onnx.checker.check_model(onnx.load(tmp_path / "s.onnx"))


def test_a_failed_fold_names_the_cli_flag_and_keeps_the_checkers_whole_line(tmp_path, monkeypatch, capsys):
    from trtkit.cli.main import main

    line = "Node (w_fill) has input size 1 not in range [min=1, max=1]. Bad node spec for node. Name: w_fill"
    real_check = onnx.checker.check_model

    def refuse_folded(model, *args, **kwargs):
        if isinstance(model, onnx.ModelProto) and "w_fill" not in {n.name for n in model.graph.node}:
            raise onnx.checker.ValidationError(f"{line}\n\n==> Context: more detail")
        return real_check(model, *args, **kwargs)

    monkeypatch.setattr(onnx.checker, "check_model", refuse_folded)
    with pytest.raises(ModelError) as info:
        fold_constants(models.constant_of_shape_conv())
    assert info.value.field == "fold_constants" and line in str(info.value)
    onnx.save(models.constant_of_shape_conv(), tmp_path / "m.onnx")
    assert main(["sanitize", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "s.onnx")]) == 0
    out = " ".join(capsys.readouterr().out.replace("│", " ").split())
    assert "build without constant folding" in out and "fold_constants=False" not in out, out
    assert "[min=1, max=1]" in out, out
