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
    assert info.value.field == "batch" and "give the sizes of that axis, e.g. batch 1,8,8" in str(info.value)
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
