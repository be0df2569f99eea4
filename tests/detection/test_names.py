"""Class names from a file in each form it may take, from a model's metadata, and the check against its classes."""

from __future__ import annotations

import pytest

from trtkit.detection import check_names, metadata_names, read_names
from trtkit.detection.names import parse_names
from trtkit.errors import UsageError

ULTRALYTICS_DATA = """# a dataset file as ultralytics writes them
path: ../datasets/shapes
train: images/train
names:
  0: ellipse
  1: rectangle
  2: 'triangle'
"""


@pytest.mark.parametrize("text, names", [
    ("person\nbicycle\n\n car \n", ["person", "bicycle", "car"]),
    ('["person", "bicycle"]', ["person", "bicycle"]),
    ('{"0": "person", "2": "car"}', ["person", "1", "car"]),   # a missing index is named by its number
    ("{0: 'person', 1: 'bicycle'}", ["person", "bicycle"]),   # Python's repr, as in ultralytics' ONNX metadata
])
def test_every_form_of_names(text, names):
    assert parse_names(text) == names


def test_a_yaml_file_gives_its_names(tmp_path):
    (tmp_path / "data.yaml").write_text(ULTRALYTICS_DATA)
    assert read_names(tmp_path / "data.yaml") == ["ellipse", "rectangle", "triangle"]
    (tmp_path / "list.yml").write_text("- cat\n- dog\n")
    assert read_names(tmp_path / "list.yml") == ["cat", "dog"]
    (tmp_path / "bad.yaml").write_text("names: [a, b\n")
    with pytest.raises(UsageError, match="is not one name a line, a JSON list or dict, or a YAML file's names"):
        read_names(tmp_path / "bad.yaml")


def test_a_names_file_is_read_and_bad_ones_are_refused_in_one_line(tmp_path):
    good = tmp_path / "names.txt"
    good.write_text("a\nb\n")
    assert read_names(good) == ["a", "b"]
    for text, message in (("[1, 2", r"is not one name a line, a JSON list or dict, or a YAML file's names"),
                          ("{'a'}", r"is not one name a line, .* \(a list or dict of names, not set\)"),
                          ("\n\n", "names no class")):
        good.write_text(text)
        with pytest.raises(UsageError, match=f"class_names file '{good}' {message}") as raised:
            read_names(good)
        assert raised.value.field == "class_names" and "\n" not in str(raised.value)
    with pytest.raises(UsageError, match=r"class_names file '.*missing.txt' cannot be read: No such file"):
        read_names(tmp_path / "missing.txt")


def test_names_from_metadata():
    assert metadata_names({"names": "{0: 'person', 1: 'bicycle'}", "stride": "32"}) == ["person", "bicycle"]
    assert metadata_names({"stride": "32"}) is None and metadata_names(None) is None
    assert metadata_names({"names": "{0: 'broken'"}) is None


def test_fewer_names_than_classes_are_refused():
    check_names(["a", "b"], 2)
    check_names(["a", "b", "c"], 2)
    check_names(None, 80)
    check_names(["a"], None)
    with pytest.raises(UsageError, match=r"^class_names names 2 of the model's 3 classes: give one name per class, "
                                         r"in the order of the class indices$"):
        check_names(["a", "b"], 3)
