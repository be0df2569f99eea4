"""Shape-tensor inputs at build time: recognised after parsing, their profile entries taken as values
(``set_shape_input``), a missing entry named with the flag to give, the manifest recording them."""

from __future__ import annotations

import json

import pytest

from tests import models
from tests.fakes.fake_trt import make_fake_trt
from tests.fakes.fake_trt.runtime import parse_fake_engine
from tests.runtime.fakes import fake_gpu  # noqa: F401 - fixture
from trtkit.builder import BuildConfig, build, parse_shapes, shape_tensor_inputs
from trtkit.builder.builder import build_serialized
from trtkit.builder.profiles import Profile, may_have_shape_inputs, resolve_profiles
from trtkit.errors import ProfileError
from trtkit.manifest import Manifest, manifest_path

VALUES = "shape:1x3x1,2x3x2,4x3x4"


@pytest.mark.parametrize("version", ["8.6.0", "10.8.0", "11.4.0"])
def test_the_parser_says_which_inputs_are_shape_tensors(version):
    trt = make_fake_trt(version)
    assert shape_tensor_inputs(models.expand_shape(), trt=trt) == ["shape"]
    assert shape_tensor_inputs(models.reshape_shape(), trt=trt) == ["shape"]
    assert shape_tensor_inputs(models.tiny_conv(), trt=trt) == []


def test_without_values_the_build_fails_naming_the_input_and_the_entry_to_give(fake_trt_any):
    with pytest.raises(ProfileError) as info:
        build_serialized(models.expand_shape(), BuildConfig(), trt=fake_trt_any)
    message = str(info.value)
    assert "'shape' (dims [3]) as shape tensors" in message
    assert "Add for example 'shape:1x1x1,8x8x8,8x8x8' to the profile" in message and info.value.field == "profiles"


def test_a_profile_without_the_shape_input_is_refused_by_index():
    model = models.expand_shape()
    with pytest.raises(ProfileError, match=r"'shape' \(dims \[3\]\) as shape tensors.*profile 0 gives none"):
        build_serialized(model, BuildConfig(profiles=[parse_shapes("x:3x1")]), trt=make_fake_trt("10.8.0"))


def test_values_of_the_wrong_count_are_refused_with_an_example():
    with pytest.raises(ProfileError, match=r"shape-tensor input 'shape': min values \(1, 3\) has 2 value\(s\), the "
                                           r"input holds 3 \(dims \[3\]\); give e.g. shape:1x1x1,8x8x8,8x8x8"):
        build_serialized(models.expand_shape(), BuildConfig(profiles=[parse_shapes("shape:1x3,2x3,4x3")]),
                         trt=make_fake_trt("10.8.0"))


def test_values_are_set_with_set_shape_input_and_recorded(tmp_path, fake_trt_any):
    out = tmp_path / "expand.engine"
    result = build(models.expand_shape(), BuildConfig(profiles=[parse_shapes(VALUES)], profiling_verbosity="NONE"),
                   output=out, trt=fake_trt_any)
    header, _ = parse_fake_engine(result.engine)
    assert header["shape_values"] == [{"shape": [[1, 3, 1], [2, 3, 2], [4, 3, 4]]}]
    assert "shape" not in header["profiles"][0]  # no set_shape for it: its own dims are fixed
    written = json.loads(manifest_path(out).read_text())
    assert written["model"]["shape_inputs"] == ["shape"]
    assert written["build"]["profiles"][0]["shape"] == {"min": [1, 3, 1], "opt": [2, 3, 2], "max": [4, 3, 4]}
    assert Manifest.from_json(written).model.shape_inputs == ["shape"]


def test_the_fake_refuses_a_network_with_shape_inputs_and_no_values_as_tensorrt_does(fake_trt):
    """The raw API (as the onnx backend suite's raw adapter uses it): no profile, then a profile with dims only."""
    builder = fake_trt.Builder(fake_trt.Logger())
    logged = []
    builder.logger = type("L", (), {"log": lambda self, sev, msg: logged.append(msg)})()
    network = builder.create_network(0)
    assert fake_trt.OnnxParser(network, builder.logger).parse(models.expand_shape().SerializeToString())
    assert network.get_input(1).is_shape_tensor and not network.get_input(0).is_shape_tensor
    config = builder.create_builder_config()
    assert builder.build_serialized_network(network, config) is None
    assert "Network has dynamic or shape inputs, but no optimization profile has been defined" in logged[-1]
    profile = builder.create_optimization_profile()
    profile.set_shape("shape", (3,), (3,), (3,))
    config.add_optimization_profile(profile)
    assert builder.build_serialized_network(network, config) is None
    assert "shape tensor input given dimensions instead of values" in logged[-1]
    profile.set_shape_input("shape", (1, 3, 1), (1, 3, 1), (2, 3, 2))
    assert profile.get_shape_input("shape") == [[1, 3, 1], [1, 3, 1], [2, 3, 2]]


def test_manifests_without_the_key_read_as_no_shape_inputs_and_are_written_back_unchanged():
    data = {"format": 1, "model": {"name": "m", "inputs": {"x": [1, 3]}}}
    manifest = Manifest.from_json(data)
    assert manifest.model.shape_inputs == []
    assert "shape_inputs" not in manifest.to_json()["model"]


def test_only_models_with_a_small_integer_input_wait_for_the_parser():
    assert may_have_shape_inputs(models.expand_shape())
    assert not may_have_shape_inputs(models.tiny_conv())


def test_resolve_takes_a_shape_inputs_entry_as_values_and_keeps_dims_rules_for_the_others():
    inputs = {"x": [3, 1], "shape": [3]}
    profile = parse_shapes(VALUES)
    (resolved,) = resolve_profiles(inputs, [profile], ["shape"])
    assert resolved.shapes["shape"] == profile.shapes["shape"]
    assert resolved.shapes["x"].max == (3, 1)
    with pytest.raises(ProfileError, match="rank 3 but the model's input has rank 1"):
        resolve_profiles(inputs, [profile])  # without knowing it is a shape tensor, its values read as dims
    with pytest.raises(ProfileError, match="value 1 needs min <= opt <= max"):
        bad = Profile({"shape": type(profile.shapes["shape"])((1, 3, 1), (1, 5, 1), (1, 4, 1))})
        resolve_profiles(inputs, [bad], ["shape"])


def test_the_cli_names_the_flag(tmp_path, fake_gpu, capsys):  # noqa: F811 - the fixture
    import onnx

    from trtkit.cli.main import main

    path = tmp_path / "expand.onnx"
    onnx.save(models.expand_shape(), path)
    assert main(["build", str(path), "--no-isolate", "-o", str(tmp_path / "e.engine")]) != 0
    err = capsys.readouterr().err
    assert "error: --shapes: " in err and "Add for example 'shape:1x1x1,8x8x8,8x8x8' to the profile" in err, err
    assert main(["build", str(path), "--no-isolate", "--shapes", VALUES, "-o", str(tmp_path / "e.engine")]) == 0
    assert json.loads(manifest_path(tmp_path / "e.engine").read_text())["model"]["shape_inputs"] == ["shape"]


def test_inspect_shows_the_values_and_run_feeds_the_opt_values(tmp_path, fake_gpu, capsys):  # noqa: F811
    from trtkit.cli.main import main

    engine = tmp_path / "e.engine"
    build(models.expand_shape(), BuildConfig(profiles=[parse_shapes(VALUES)]), output=engine, trt=fake_gpu[0],
          isolate=False)
    assert main(["inspect", str(engine)]) == 0
    assert "profile 0: shape (shape-tensor values) min 1x3x1 opt 2x3x2 max 4x3x4" in capsys.readouterr().out
    assert main(["run", str(engine), "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["outputs"]["y"]["shape"] == [2, 3, 2]


def test_shape_inputs_are_found_in_a_model_that_parses_only_after_its_rewrites(monkeypatch):
    # onnx's test_sce_mean on the H200: the raw parse refused SoftmaxCrossEntropyLoss, which the build expands
    from onnx import TensorProto, helper

    from tests.fakes.fake_trt import builder as fake_builder
    from trtkit.errors import ParseError

    monkeypatch.setattr(fake_builder, "UNSUPPORTED_OPS", fake_builder.UNSUPPORTED_OPS | {"Hardmax"})
    trt = make_fake_trt("8.6.0")
    graph = helper.make_graph(
        [helper.make_node("Hardmax", ["x"], ["h"], name="hardmax", axis=1),
         helper.make_node("Expand", ["h", "shape"], ["y"], name="expand")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 1]),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert shape_tensor_inputs(model, trt=trt) == ["shape"]
    with pytest.raises(ParseError, match=r"node 'hardmax' \(Hardmax\)"):
        shape_tensor_inputs(model, trt=trt, sanitize=False)  # the model as it is: what the raw parse said
