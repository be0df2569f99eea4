"""Input specs, shapes within a profile, random feeds, feeds from files; the ONNX reference on CPU."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests import models
from trtkit.builder.profiles import InputShape, Profile
from trtkit.errors import DependencyError, InputError, ModelError, ProfileError
from trtkit.parity.inputs import (
    InputSpec,
    conform_feed,
    input_specs,
    load_feeds,
    random_feeds,
    resolve_shapes,
)
from trtkit.parity.reference import OnnxReference, default_backend, load_model

PROFILE = {"x": ((1, 3, 8, 8), (4, 3, 8, 8), (8, 3, 8, 8))}


def test_input_specs_read_dtype_and_dynamic_dims():
    (spec,) = input_specs(models.tiny_conv())
    assert spec.name == "x" and spec.dtype == np.float32
    assert spec.dims == ("N", 3, 8, 8)
    assert spec.dynamic_axes == [0]


def test_input_specs_skip_initializers_listed_as_inputs():
    from onnx import TensorProto, helper

    model = models.tiny_conv(dynamic_batch=False)
    model.graph.input.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 3, 3, 3]))
    assert [s.name for s in input_specs(model)] == ["x"]


def test_shapes_default_to_profile_opt():
    specs = input_specs(models.tiny_conv())
    assert resolve_shapes(specs, None, PROFILE) == {"x": (4, 3, 8, 8)}


def test_shapes_accept_a_trtkit_profile():
    specs = input_specs(models.tiny_conv())
    profile = Profile({"x": InputShape((1, 3, 8, 8), (2, 3, 8, 8), (4, 3, 8, 8))})
    assert resolve_shapes(specs, None, profile) == {"x": (2, 3, 8, 8)}


def test_given_shape_wins_and_must_fit_the_profile():
    specs = input_specs(models.tiny_conv())
    assert resolve_shapes(specs, {"x": (8, 3, 8, 8)}, PROFILE) == {"x": (8, 3, 8, 8)}
    with pytest.raises(ProfileError, match=r"Input 'x': shape \(9, 3, 8, 8\) is outside the engine's profile "
                                           r"\(min \(1, 3, 8, 8\), max \(8, 3, 8, 8\)\)"):
        resolve_shapes(specs, {"x": (9, 3, 8, 8)}, PROFILE)


def test_fixed_dims_and_rank_are_checked():
    specs = input_specs(models.tiny_conv())
    with pytest.raises(ProfileError, match=r"changes fixed axis 1 \(3\) to 4"):
        resolve_shapes(specs, {"x": (1, 4, 8, 8)})
    with pytest.raises(ProfileError, match="has rank 3, the model's has 4"):
        resolve_shapes(specs, {"x": (1, 3, 8)})


def test_dynamic_input_without_shape_or_profile_shows_an_example_flag():
    specs = input_specs(models.tiny_conv())
    with pytest.raises(ProfileError, match=r"dynamic axes \(0\).*give its shape in shapes \(e.g. x:1x3x8x8\)"):
        resolve_shapes(specs)


def test_static_model_needs_nothing_and_unknown_names_are_refused():
    specs = input_specs(models.tiny_conv(dynamic_batch=False))
    assert resolve_shapes(specs) == {"x": (1, 3, 8, 8)}
    with pytest.raises(ProfileError, match="'images' the model does not have \\(inputs: 'x'\\)"):
        resolve_shapes(specs, {"images": (1, 3, 8, 8)})


def test_random_feeds_are_reproducible_typed_and_in_range():
    specs = [InputSpec("f", np.dtype(np.float16), (2, 3)), InputSpec("i", np.dtype(np.int64), (5,)),
             InputSpec("b", np.dtype(np.bool_), (4,))]
    shapes = {"f": (2, 3), "i": (5,), "b": (4,)}
    a = random_feeds(specs, shapes, trials=3, seed=7)
    b = random_feeds(specs, shapes, trials=3, seed=7)
    assert len(a) == 3
    for fa, fb in zip(a, b):
        for name in shapes:
            np.testing.assert_array_equal(fa[name], fb[name])
    assert a[0]["f"].dtype == np.float16 and a[0]["i"].dtype == np.int64 and a[0]["b"].dtype == np.bool_
    assert np.all(np.abs(a[0]["f"]) <= 1.0)
    assert np.all((a[0]["i"] >= 0) & (a[0]["i"] <= 4))
    assert not np.array_equal(a[0]["f"], a[1]["f"])  # trials differ
    assert not np.array_equal(random_feeds(specs, shapes, seed=8)[0]["f"], a[0]["f"])


def test_random_feeds_refuse_zero_trials_and_empty_ranges():
    with pytest.raises(InputError, match="trials must be at least 1, got 0"):
        random_feeds([], {}, trials=0)
    with pytest.raises(InputError, match=r"must be \(low, high\) with low < high, got \(1.0, 1.0\)"):
        random_feeds([], {}, float_range=(1.0, 1.0))


def test_load_npz_npy_folder_and_json(tmp_path):
    specs = input_specs(models.tiny_conv())
    x = np.ones((2, 3, 8, 8), dtype=np.float64)
    np.savez(tmp_path / "one.npz", x=x)
    np.save(tmp_path / "two.npy", x * 2)
    (feed,) = load_feeds(tmp_path / "one.npz", specs)
    assert feed["x"].dtype == np.float32  # cast within its kind
    folder = load_feeds(tmp_path, specs)
    assert [float(f["x"][0, 0, 0, 0]) for f in folder] == [1.0, 2.0]
    assert len(load_feeds(tmp_path, specs, limit=1)) == 1

    from polygraphy.json import save_json

    save_json([{"x": x.astype(np.float32)}, {"x": x.astype(np.float32) * 3}], str(tmp_path / "inputs.json"))
    assert [float(f["x"].max()) for f in load_feeds(tmp_path / "inputs.json", specs)] == [1.0, 3.0]


def test_load_errors_name_the_file_and_the_fix(tmp_path):
    specs = input_specs(models.two_inputs())
    with pytest.raises(InputError, match="do not exist; give a .npz, .npy, .json file or a folder"):
        load_feeds(tmp_path / "nope.npz", specs)
    with pytest.raises(InputError, match="holds no .npz or .npy files"):
        load_feeds(tmp_path, specs)
    np.save(tmp_path / "a.npy", np.zeros((2, 4), np.float32))
    with pytest.raises(InputError, match=r"holds one array but the model has 2 inputs \('a', 'b'\)"):
        load_feeds(tmp_path / "a.npy", specs)
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(InputError, match="Cannot read inputs from '.*bad.npz'"):
        load_feeds(tmp_path / "bad.npz", specs)


def test_conform_feed_names_missing_unknown_and_wrong_kind():
    specs = input_specs(models.two_inputs())
    a = np.zeros((2, 4), np.float32)
    with pytest.raises(InputError, match=r"missing input\(s\) \['b'\], unknown input\(s\) \['c'\]"):
        conform_feed({"a": a, "c": a}, specs)
    with pytest.raises(InputError, match="input 'b' is int32, the model wants float32"):
        conform_feed({"a": a, "b": a.astype(np.int32)}, specs)
    with pytest.raises(InputError, match="has rank 1"):
        conform_feed({"a": a, "b": np.zeros(4, np.float32)}, specs)


def test_reference_runs_the_model_with_onnx_reference_evaluator():
    ref = OnnxReference(models.two_inputs(), backend="onnx-reference")
    a, b = np.ones((2, 4), np.float32), np.full((2, 4), 0.5, np.float32)
    out = ref({"a": a, "b": b})
    assert list(out) == ["y"]
    np.testing.assert_array_equal(out["y"], a * 2 + b)


def test_reference_errors():
    with pytest.raises(ModelError, match="Unknown reference backend 'tvm'"):
        OnnxReference(models.two_inputs(), backend="tvm")
    with pytest.raises(ModelError, match="failed to run in onnx-reference"):
        OnnxReference(models.two_inputs(), backend="onnx-reference")({"a": np.ones((2, 4), np.float32)})


def test_a_model_the_evaluator_cannot_run_names_onnxruntime():
    # DETR's query selection: GatherElements over more than 63 tokens (numpy.choose's limit in onnx's evaluator)
    graph = helper.make_graph(
        [helper.make_node("GatherElements", ["x", "i"], ["y"], axis=1)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 4]),
         helper.make_tensor_value_info("i", TensorProto.INT64, [1, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4])],
    )
    ref = OnnxReference(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), backend="onnx-reference")
    with pytest.raises(ModelError, match=r"failed to run in onnx-reference: .*pip install 'trtkit\[eval\]' and take "
                       "the onnxruntime reference"):
        ref({"x": np.zeros((1, 64, 4), np.float32), "i": np.zeros((1, 3, 4), np.int64)})


def test_the_default_backend_is_onnxruntime_where_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # not installed
    assert OnnxReference(models.two_inputs()).backend == "onnx-reference"
    monkeypatch.setitem(sys.modules, "onnxruntime", types.ModuleType("onnxruntime"))  # installed
    assert default_backend() == "onnxruntime"


def test_onnxruntime_backend_is_optional():
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        with pytest.raises(DependencyError, match="pip install onnxruntime"):
            OnnxReference(models.two_inputs(), backend="onnxruntime")
    else:
        out = OnnxReference(models.two_inputs(), backend="onnxruntime")(
            {"a": np.ones((2, 4), np.float32), "b": np.zeros((2, 4), np.float32)})
        np.testing.assert_array_equal(out["y"], np.full((2, 4), 2.0, np.float32))


def test_load_model_errors(tmp_path):
    with pytest.raises(ModelError, match="does not exist"):
        load_model(tmp_path / "missing.onnx")
    (tmp_path / "junk.onnx").write_bytes(b"\x00\x01garbage")
    with pytest.raises(ModelError, match="is not a valid ONNX model"):
        load_model(tmp_path / "junk.onnx")
    path = tmp_path / "m.onnx"
    path.write_bytes(models.two_inputs().SerializeToString())
    assert load_model(path).graph.output[0].name == "y"
    assert load_model(path.read_bytes()).graph.output[0].name == "y"


def _images(folder, count, size=(12, 10)):
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        Image.new("RGB", size, color=(i * 40, 255, 0)).save(folder / f"img{i}.png")
    return folder


def test_image_folder_is_batched_to_the_input_shape(tmp_path):
    from trtkit.parity.inputs import image_feeds, is_image_folder

    folder = _images(tmp_path / "imgs", 5)
    assert is_image_folder(folder) and not is_image_folder(tmp_path / "missing")
    specs = input_specs(models.tiny_conv())
    feeds = image_feeds(folder, specs, (2, 3, 8, 8))
    assert len(feeds) == 2  # 5 images, batches of 2, the partial batch dropped
    x = feeds[0]["x"]
    assert x.shape == (2, 3, 8, 8) and x.dtype == np.float32
    np.testing.assert_allclose(x[1, :, 0, 0], [40 / 255, 1.0, 0.0], rtol=1e-6)  # RGB, 0..1, NCHW
    assert len(image_feeds(folder, specs, (2, 3, 8, 8), limit=1)) == 1


def test_image_folder_errors(tmp_path):
    from trtkit.parity.inputs import image_feeds

    folder = _images(tmp_path / "imgs", 1)
    with pytest.raises(InputError, match=r"fewer images than one batch of 4 \(input 'x' shape \(4, 3, 8, 8\)\)"):
        image_feeds(folder, input_specs(models.tiny_conv()), (4, 3, 8, 8))
    with pytest.raises(InputError, match="can feed a model with one input; this one has 2: a, b"):
        image_feeds(folder, input_specs(models.two_inputs()), (2, 4))
    (folder / "broken.png").write_bytes(b"not a png")
    with pytest.raises(InputError, match="broken.png"):
        image_feeds(folder, input_specs(models.tiny_conv()), (1, 3, 8, 8))
