import copy
import pickle

import pytest

from trtkit.builder.profiles import InputShape, Profile, parse_shapes, resolve_profiles
from trtkit.errors import ProfileError


def test_parse_three_shapes():
    p = parse_shapes("images:1x3x640x640,8x3x640x640,32x3x640x640")
    assert p.shapes["images"] == InputShape((1, 3, 640, 640), (8, 3, 640, 640), (32, 3, 640, 640))


def test_parse_one_and_two_shapes_and_several_inputs():
    p = parse_shapes("a:2x4 b:1x4,8x4")
    assert p.shapes["a"] == InputShape((2, 4), (2, 4), (2, 4))
    assert p.shapes["b"] == InputShape((1, 4), (8, 4), (8, 4))


@pytest.mark.parametrize("spec, match", [
    ("images1x3x640x640", "must be NAME:MIN,OPT,MAX"),
    ("images:1x3xAx640", "is not a shape"),
    ("images:8x3,1x3,4x3", r"dimension 0 needs min <= opt <= max, got 8, 1, 4"),
    ("images:1x3,2x3x4,4x3", "same rank"),
    ("images:0x3", "below 1"),
    ("a:1x2,2x2,3x2,4x2", "give 1, 2 or 3 shapes"),
    ("a:1x2 a:1x2", "appears twice"),
])
def test_bad_specs_are_named(spec, match):
    with pytest.raises(ProfileError, match=match):
        parse_shapes(spec)


def test_dynamic_model_without_profile_names_dims_and_example():
    with pytest.raises(ProfileError,
                       match=r"'images' dims \['batch', 3, 64, 64\].*e.g. 'images:1x3x64x64,8x3x64x64") as info:
        resolve_profiles({"images": ["batch", 3, 64, 64]}, [])
    assert info.value.field == "batch" and "give the sizes of the first axis, e.g. batch 1,8,8" in str(info.value)
    with pytest.raises(ProfileError, match=r"Give one, e.g. 'images:1x3x1x1,8x3x8x8,8x3x8x8'") as info:
        resolve_profiles({"images": ["batch", 3, "h", "w"]}, [])
    assert info.value.field == "profiles"


def test_static_model_needs_no_profile():
    assert resolve_profiles({"x": [1, 3]}, []) == []


def test_fixed_dims_cannot_change():
    with pytest.raises(ProfileError, match="dimension 1 is fixed to 3"):
        resolve_profiles({"x": ["N", 3]}, [parse_shapes("x:1x4,2x4,4x4")])


def test_unknown_and_missing_inputs():
    with pytest.raises(ProfileError, match=r"names input\(s\) \['z'\]"):
        resolve_profiles({"x": ["N", 3]}, [parse_shapes("z:1x3")])
    with pytest.raises(ProfileError, match=r"no shapes for dynamic input\(s\) \['y'\]"):
        resolve_profiles({"x": ["N", 3], "y": ["N", 3]}, [parse_shapes("x:1x3")])


def test_static_inputs_are_filled_in():
    (p,) = resolve_profiles({"x": ["N", 3], "s": [2]}, [parse_shapes("x:1x3,2x3,4x3")])
    assert p.shapes["s"] == InputShape((2,), (2,), (2,))
    assert Profile.from_json(p.to_json()) == p


def _ultralytics_like(imgsz="[64, 48]"):
    """An input as ultralytics' dynamic exports declare it (batch, height and width dynamic) with its imgsz metadata."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["images"], ["y"])], "g",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, "height", "width"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph)
    helper.set_model_props(model, {"imgsz": imgsz})
    return model


def test_a_batch_alone_takes_height_and_width_from_the_imgsz_metadata():
    from trtkit.model import model_inputs

    (p,) = resolve_profiles(model_inputs(_ultralytics_like()), [Profile(batch=(1, 4, 8))])
    assert p.shapes["images"] == InputShape((1, 3, 64, 48), (4, 3, 64, 48), (8, 3, 64, 48))
    (p,) = resolve_profiles(model_inputs(_ultralytics_like("320")), [Profile(batch=(1, 1, 2))])
    assert p.shapes["images"].max == (2, 3, 320, 320)
    # the metadata's size is a default, not a fixed size: full shapes may give others
    (p,) = resolve_profiles(model_inputs(_ultralytics_like()), [parse_shapes("images:1x3x32x32,2x3x96x96")])
    assert p.shapes["images"].max == (2, 3, 96, 96)
    with pytest.raises(ProfileError, match="take its imgsz metadata: give the sizes of the first axis, e.g. batch "
                       r"1,8,8 .*'images:1x3x64x48,8x3x64x48,8x3x64x48'"):
        resolve_profiles(model_inputs(_ultralytics_like()), [])
    # the dims travel to isolated build children (pickle) and are copied
    dims = model_inputs(_ultralytics_like())["images"]
    assert [getattr(d, "size", None) for d in pickle.loads(pickle.dumps(dims))] == [None, None, 64, 48]
    assert copy.deepcopy(dims)[3].size == 48
    with pytest.raises(ProfileError, match="has dynamic axis 2"):  # metadata that is no image size is not used
        resolve_profiles(model_inputs(_ultralytics_like("[64, 'x']")), [Profile(batch=(1, 4, 8))])
