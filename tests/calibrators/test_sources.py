"""Calibration data sources: images, arrays, iterables, batching, caps and error messages."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from PIL import Image

from calibrators.preprocess import Preprocess, normalize, with_model_size
from calibrators.sources import (
    ArrayFolderSource,
    ImageFolderSource,
    IterableSource,
    batches,
    open_source,
)
from trtkit.errors import CalibrationError, UsageError
from trtkit.model import model_inputs


def _model(shape=("N", 3, 8, 8), inputs=("images",)):
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(shape)) for n in inputs]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))
    node = helper.make_node("Identity", [inputs[0]], ["y"])
    return helper.make_model(helper.make_graph([node], "g", ins, [out]))


def _images(folder, count=3, size=(10, 6)):
    folder.mkdir(exist_ok=True)
    for i in range(count):
        arr = np.full((size[1], size[0], 3), 40 * i, dtype=np.uint8)
        arr[..., 0] = 200
        Image.fromarray(arr).save(folder / f"img{i}.png")
    return folder


def test_model_inputs_marks_dynamic_dims():
    assert model_inputs(_model()) == {"images": ["N", 3, 8, 8]}
    assert model_inputs(_model(shape=(None, 3, 8, 8))) == {"images": [None, 3, 8, 8]}


def test_image_folder_takes_size_from_model_and_preprocesses(tmp_path):
    src = open_source(_images(tmp_path / "imgs"), _model(), Preprocess(scale=1.0, color="BGR"))
    assert isinstance(src, ImageFolderSource) and len(src) == 3
    feeds = list(src)
    assert feeds[0]["images"].shape == (1, 3, 8, 8)
    assert feeds[0]["images"].dtype == np.float32
    assert feeds[0]["images"][0, 2].max() == pytest.approx(200.0)  # R moved to the last channel (BGR)


def test_letterbox_pads_and_nhwc_layout(tmp_path):
    settings = with_model_size(Preprocess(resize="letterbox", layout="NHWC", scale=1.0, pad_value=0), (1, 8, 8, 3))
    src = ImageFolderSource(_images(tmp_path / "imgs", 1, size=(16, 8)), "images", settings)
    sample = next(iter(src))["images"][0]
    assert sample.shape == (8, 8, 3)
    assert sample[0, :, 0].max() == 0.0  # top rows are padding
    assert sample[4, :, 0].min() == pytest.approx(200.0)


def test_mean_std_normalization():
    pixels = np.full((2, 2, 3), 255, dtype=np.uint8)
    out = normalize(pixels, Preprocess(size=(2, 2), mean=(0.5, 0.5, 0.5), std=(0.25, 0.5, 1.0)))
    assert out[:, 0, 0].tolist() == pytest.approx([2.0, 1.0, 0.5])


def test_dynamic_height_needs_an_explicit_size():
    with pytest.raises(CalibrationError, match="height and width are dynamic"):
        with_model_size(Preprocess(), (-1, 3, -1, -1))


def test_empty_folder_names_what_it_holds(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(CalibrationError, match=r"has no image files .* holds 1 other file\(s\): notes.txt"):
        ImageFolderSource(tmp_path, "images", Preprocess(size=(8, 8)))
    with pytest.raises(CalibrationError, match="does not exist or is not a folder"):
        ImageFolderSource(tmp_path / "missing", "images", Preprocess(size=(8, 8)))


def test_unreadable_images_are_all_named_with_the_reason(tmp_path):
    folder = _images(tmp_path / "imgs", 2)
    (folder / "broken.jpg").write_bytes(b"not a jpeg")
    (folder / "empty.png").write_bytes(b"")
    src = ImageFolderSource(folder, "images", Preprocess(size=(8, 8)))
    with pytest.raises(CalibrationError) as err:
        list(src)
    assert "2 calibration file(s)" in str(err.value)
    assert "broken.jpg: UnidentifiedImageError" in str(err.value)
    assert "empty.png" in str(err.value)


def test_array_folder_npy_and_npz(tmp_path):
    np.save(tmp_path / "a.npy", np.ones((3, 8, 8), np.float32))  # one sample: gets a batch axis
    np.save(tmp_path / "b.npy", np.zeros((2, 3, 8, 8), np.float32))  # a batch of two
    src = open_source(tmp_path, _model())
    assert isinstance(src, ArrayFolderSource)
    assert [f["images"].shape[0] for f in src] == [1, 2]
    np.savez(tmp_path / "c.npz", other=np.ones((1, 3, 8, 8)))
    with pytest.raises(CalibrationError, match=r"arrays \['other'\] that are not model inputs"):
        list(src.__class__(tmp_path, model_inputs(_model())))


def test_npy_needs_a_single_input_model(tmp_path):
    np.save(tmp_path / "a.npy", np.ones((1, 3, 8, 8), np.float32))
    src = ArrayFolderSource(tmp_path, model_inputs(_model(inputs=("a", "b"))))
    with pytest.raises(CalibrationError, match="the model has 2 inputs \\(a, b\\); use .npz"):
        list(src)


def test_batches_rechunk_cap_and_drop_the_remainder():
    feeds = [{"x": np.full((n, 2), i, np.float32)} for i, n in enumerate([3, 1, 4, 2])]
    out = list(batches(IterableSource(feeds), 4))
    assert [b["x"].shape for b in out] == [(4, 2), (4, 2)]
    assert out[0]["x"][:, 0].tolist() == [0, 0, 0, 1]
    capped = list(batches(IterableSource(feeds), 2, max_samples=5))
    assert [b["x"].shape[0] for b in capped] == [2, 2]


def test_too_little_data_and_bad_items_are_explained():
    with pytest.raises(CalibrationError, match="gave 2 sample\\(s\\), fewer than one batch of 8"):
        list(batches(IterableSource([{"x": np.ones((2, 1))}]), 8))
    with pytest.raises(CalibrationError, match="item #0 is a list"):
        list(batches(IterableSource([[1, 2]]), 1))
    with pytest.raises(CalibrationError, match="different batch sizes"):
        list(batches(IterableSource([{"a": np.ones((2, 1)), "b": np.ones((3, 1))}]), 1))


def test_identity_changes_with_the_file_list(tmp_path):
    folder = _images(tmp_path / "imgs", 2)
    first = ImageFolderSource(folder, "images", Preprocess(size=(8, 8))).identity()
    _images(folder, 3)
    assert ImageFolderSource(folder, "images", Preprocess(size=(8, 8))).identity() != first
    assert IterableSource([], identity="set-a").identity() != IterableSource([], identity="set-b").identity()
    assert IterableSource([]).identity() is None


def test_parse_preprocess_spec():
    from calibrators.preprocess import parse_preprocess

    spec = parse_preprocess("resize=letterbox, color=bgr, scale=0.5, mean=1/2/3, std=4/5/6, layout=nhwc, size=640x480")
    assert spec == {"resize": "letterbox", "color": "BGR", "scale": 0.5, "mean": (1.0, 2.0, 3.0),
                    "std": (4.0, 5.0, 6.0), "layout": "NHWC", "size": (640, 480)}
    assert parse_preprocess(None) == {}
    with pytest.raises(UsageError, match="calibration.preprocess item 'gamma=2' is not KEY=VALUE with a key of: size="):
        parse_preprocess("gamma=2")
    with pytest.raises(UsageError, match="size='640' is malformed; expected size=HxW"):
        parse_preprocess("size=640")
    with pytest.raises(UsageError, match="Resize mode 'crop' is not known"):
        parse_preprocess("resize=crop")
