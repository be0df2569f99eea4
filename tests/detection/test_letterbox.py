"""Letterbox geometry, the batch it makes, mapping boxes back, and unreadable images."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from calibrators.preprocess import Preprocess, load_image
from trtkit.detection import ImageReadError, Letterbox, letterbox_meta, list_images, open_image
from trtkit.errors import InputError


def test_geometry_of_a_wide_image():
    meta = letterbox_meta(640, 480, (320, 320))
    assert (meta.scale, meta.pad_x, meta.pad_y) == (0.5, 0, 40)


def test_geometry_of_a_tall_image_in_a_non_square_input():
    meta = letterbox_meta(100, 400, (256, 320))  # (H, W)
    assert meta.scale == pytest.approx(0.64)
    assert (meta.pad_x, meta.pad_y) == ((320 - 64) // 2, 0)


def test_batch_pads_with_114_and_scales_to_0_1():
    image = Image.new("RGB", (64, 32), (255, 0, 10))
    batch, (meta,) = Letterbox((32, 32))([image])
    assert batch.shape == (1, 3, 32, 32) and batch.dtype == np.float32
    assert (meta.pad_x, meta.pad_y, meta.scale) == (0, 8, 0.5)
    np.testing.assert_allclose(batch[0, :, :8, :], 114 / 255, rtol=1e-6)
    np.testing.assert_allclose(batch[0, :, 24:, :], 114 / 255, rtol=1e-6)
    np.testing.assert_allclose(batch[0, :, 8:24, :].reshape(3, -1).mean(1), [1.0, 0.0, 10 / 255], atol=1e-6)


def test_same_pixels_as_calibration_letterbox(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "a.png"
    Image.fromarray(rng.integers(0, 256, (37, 61, 3), dtype=np.uint8)).save(path)
    batch, _ = Letterbox((48, 40))([path])
    calib = load_image(path, Preprocess(size=(48, 40), resize="letterbox"))
    np.testing.assert_array_equal(batch[0], calib)


def test_arrays_and_gray_arrays_are_accepted():
    gray = np.full((10, 20), 200, np.uint8)
    batch, metas = Letterbox((20, 20), scale=1.0)([gray, np.zeros((20, 20, 3), np.uint8)])
    assert batch.shape == (2, 3, 20, 20)
    assert batch[0, :, 10, 10].tolist() == [200.0, 200.0, 200.0]
    assert metas[1].scale == 1.0


def test_bad_array_is_refused_with_its_shape():
    with pytest.raises(InputError, match=r"shape \(4, 4, 2\) of float32"):
        Letterbox((8, 8))([np.zeros((4, 4, 2), np.float32)])


def test_boxes_map_back_and_are_clipped():
    meta = letterbox_meta(640, 480, (320, 320))
    original = np.array([[100, 50, 300, 400]], np.float32)
    np.testing.assert_allclose(meta.to_original(meta.to_input(original)), original)
    np.testing.assert_allclose(meta.to_input(original), [[50, 65, 150, 240]])
    # outside the image content (in the padding, beyond the right edge): clipped to the original image
    np.testing.assert_allclose(meta.to_original([[-10, 0, 330, 300]]), [[0, 0, 640, 480]])


def test_unreadable_image_is_named(tmp_path):
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"not a jpeg")
    with pytest.raises(ImageReadError, match="broken.jpg"):
        open_image(bad)


def test_list_images_sorted_and_errors(tmp_path):
    for name in ("b.jpg", "a.PNG", "notes.txt"):
        (tmp_path / name).write_bytes(b"x")
    assert [p.name for p in list_images(tmp_path)] == ["a.PNG", "b.jpg"]
    with pytest.raises(InputError, match="does not exist"):
        list_images(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="holds no image file"):
        list_images(tmp_path / "empty")


def test_reuse_fills_the_same_array_and_repads_it():
    letterbox = Letterbox((16, 16), reuse=True)
    first, _ = letterbox([Image.new("RGB", (16, 16), (255, 255, 255))])
    second, _ = letterbox([Image.new("RGB", (16, 8), (0, 0, 0))])
    assert second is first
    np.testing.assert_allclose(second[0, :, :4], 114 / 255, rtol=1e-6)  # padding written again, not left white
    assert second[0, :, 8].max() == 0.0
    other, _ = letterbox([Image.new("RGB", (4, 4))] * 2)
    assert other is not first and other.shape[0] == 2
    assert Letterbox((16, 16))([Image.new("RGB", (4, 4))])[0] is not Letterbox((16, 16))([Image.new("RGB", (4, 4))])[0]


def _photos(n=12, seed=1):
    """Arrays of the sizes a letterbox meets: smaller, larger, wider and taller than the input, and equal to it."""
    rng = np.random.default_rng(seed)
    sizes = [(40, 48), (48, 40), (17, 90), (90, 17), (64, 64), (33, 31), (120, 80), (48, 48), (5, 7), (200, 199)]
    return [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in (sizes * 2)[:n]]


def test_uint8_nhwc_batch_is_the_padded_pixels_the_float_batch_is_made_of():
    photos = _photos()
    float_batch, float_metas = Letterbox((48, 48))(photos)
    pixels, metas = Letterbox((48, 48), dtype=np.uint8, layout="NHWC")(photos)
    assert pixels.shape == (len(photos), 48, 48, 3) and pixels.dtype == np.uint8 and metas == float_metas
    # the same resampled pixels exactly: the float batch is x / 255 of them, transposed
    np.testing.assert_array_equal(np.multiply(pixels.transpose(0, 3, 1, 2), np.float32(1 / 255)), float_batch)


def test_reused_uint8_batch_is_one_array_repadded():
    letterbox = Letterbox((16, 16), dtype=np.uint8, layout="NHWC", reuse=True)
    first, _ = letterbox([Image.new("RGB", (16, 16), (255, 255, 255))])
    second, _ = letterbox([Image.new("RGB", (16, 8), (0, 0, 0))])
    assert second is first and (second[0, :4] == 114).all() and second[0, 8].max() == 0


def test_other_layouts_and_dtypes():
    photos = _photos(3)
    nchw, _ = Letterbox((24, 32))(photos)
    nhwc, _ = Letterbox((24, 32), layout="NHWC")(photos)
    np.testing.assert_array_equal(nhwc, nchw.transpose(0, 2, 3, 1))
    raw_nchw, _ = Letterbox((24, 32), dtype=np.uint8)(photos)
    np.testing.assert_array_equal(raw_nchw, Letterbox((24, 32), dtype=np.uint8, layout="NHWC")(photos)[0]
                                  .transpose(0, 3, 1, 2))
    with pytest.raises(InputError, match="layout 'CHW' is not known"):
        Letterbox((8, 8), layout="CHW")


def test_for_input_reads_the_layout_from_the_dtype():
    uint8 = Letterbox.for_input((4, 320, 256, 3), np.uint8)
    assert (uint8.size, uint8.layout, uint8.dtype, uint8.raw) == ((320, 256), "NHWC", np.uint8, True)
    floats = Letterbox.for_input((4, 3, 320, 256), np.float32, reuse=True)
    assert (floats.size, floats.layout, floats.dtype, floats.reuse) == ((320, 256), "NCHW", np.float32, True)
    with pytest.raises(InputError, match=r"uint8 image input of shape \(4, 3, 320, 320\) is not \(N, H, W, 3\)"):
        Letterbox.for_input((4, 3, 320, 320), np.uint8)
    with pytest.raises(InputError, match=r"is not \(N, 3, H, W\) with a fixed height and width"):
        Letterbox.for_input((4, 3, "h", 320), np.float32)
