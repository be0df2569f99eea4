"""trtkit.prepare: load once, rewrites, folding; external-data models; the rewrite list."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.models import _model
from tests.rewrites.test_rewrites import placeholder_dims_model
from trtkit.builder.prepare import prepare
from trtkit.errors import ModelError, UsageError


def external_data_model(tmp_path):
    """y = x @ w with w in a separate data file, as exporters write models over 2 GB."""
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "w")
    model = _model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["?", 4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["?", 3])], [w])
    src = tmp_path / "src"
    src.mkdir()
    onnx.save(model, str(src / "big.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="big.onnx.data", size_threshold=0)
    return src / "big.onnx"


def test_prepare_is_cpu_only_and_names_every_rewrite():
    prepared = prepare(placeholder_dims_model())
    assert [r.rewrite for r in prepared.applied] == ["symbolic-dims"] * 3
    assert prepared.source_sha256 != prepared.sha256
    assert prepared.to_json()["rewrites"][0]["where"] == "input 'a' axis 0"
    assert "symbolic-dims ×3" in prepared.summary()


def test_no_sanitize_leaves_the_model_as_given():
    prepared = prepare(placeholder_dims_model(), sanitize=False, fold_constants=False)
    assert prepared.rewrites == [] and prepared.source_sha256 == prepared.sha256


def test_external_data_that_fits_in_memory_is_read_and_folded_and_its_files_never_written(tmp_path):
    """Exporters write external data for models far below 2 GB (Lightning Pose's 94 MB): it is prepared whole."""
    path = external_data_model(tmp_path)
    data = (path.parent / "big.onnx.data").read_bytes()
    prepared = prepare(path)
    kinds = [r.rewrite for r in prepared.rewrites]
    assert "symbolic-dims" in kinds and "external-data" not in kinds and "fold-constants" not in kinds
    assert prepared.loaded.path == path and prepared.fold is not None
    np.testing.assert_array_equal(numpy_helper.to_array(prepared.proto.graph.initializer[0]).ravel(), np.arange(12))
    for target in (path, path.parent / "big.onnx.data"):
        with pytest.raises(UsageError, match="is the same file as model"):
            prepared.save(target)
    out = tmp_path / "out" / "prepared.onnx"
    out.parent.mkdir()
    prepared.save(out)  # as the model came: its weights beside it
    assert (out.parent / "prepared.onnx.data").is_file()
    assert numpy_helper.to_array(onnx.load(str(out)).graph.initializer[0]).shape == (4, 3)
    assert (path.parent / "big.onnx.data").read_bytes() == data
    # saving leaves the prepared model whole in memory: its weights still in it, ready for the next step
    np.testing.assert_array_equal(numpy_helper.to_array(prepared.proto.graph.initializer[0]).ravel(), np.arange(12))


def test_external_data_over_2_gb_stays_outside_and_the_reason_says_its_size(tmp_path):
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4, 600_000_000])
    w.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "huge.onnx.data"), ("offset", "0"), ("length", str(2_400_000_000))):
        w.external_data.add(key=key, value=value)
    model = _model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 600_000_000])], [w])
    path = tmp_path / "huge.onnx"
    onnx.save(model, str(path))
    with open(tmp_path / "huge.onnx.data", "wb") as f:  # sparse: never read
        f.truncate(2_400_000_000)
    prepared = prepare(path)
    external = next(r for r in prepared.rewrites if r.rewrite == "external-data")
    assert external.why == "its 2.2 GB of weights and graph exceed the 2 GB one protobuf model can hold"
    assert ("fold-constants", "skipped") in [(r.rewrite, r.status) for r in prepared.rewrites]
    assert prepared.proto.graph.initializer[0].data_location == TensorProto.EXTERNAL


def test_a_missing_external_data_file_is_named(tmp_path):
    path = external_data_model(tmp_path)
    (path.parent / "big.onnx.data").unlink()
    with pytest.raises(ModelError, match=r"external data file\(s\) 'big.onnx.data' are missing"):
        prepare(path)


def test_saving_over_the_input_model_is_refused(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(placeholder_dims_model(), str(path))
    with pytest.raises(UsageError, match="is the same file as model") as info:
        prepare(path).save(path)
    assert info.value.field == "path"


def test_prepare_tells_each_step_as_it_starts():
    from tests.sanitize.sanitize_models import constant_of_shape_conv

    lines: list = []
    prepare(constant_of_shape_conv(), on_progress=lines.append)
    assert lines[0] == "compatibility rewrites"
    assert lines[1] == "folding constants: round 1, 0 node(s) folded so far"
    assert len(lines) >= 3 and lines[-1].startswith("folding constants: round ")
