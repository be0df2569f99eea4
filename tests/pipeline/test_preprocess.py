"""The pipeline's image preprocessing: uint8 resize, then scaled straight into the sample (or a batch row), against
the calibrators' reference preprocessing it replaced (same values where no box reduction happens)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from calibrators.preprocess import preprocess_image
from tests.pipeline.media import frame_picture
from trtkit.errors import InputError
from trtkit.pipeline.preprocess import ImageInput, ImagePreprocess


def target(channels: int = 3, dtype: str = "float32", side: int = 224) -> ImageInput:
    return ImageInput("images", channels, side, side, dtype, 1, 8)


def photo(width: int, height: int, seed: int = 0) -> np.ndarray:
    """Smooth gradients, fine texture and a few hard-edged blocks: what camera frames hold."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    image = np.stack([128 + 100 * np.sin(x / 97 + y / 61), 128 + 90 * np.cos(y / 43), 255 * x / width], -1)
    image += rng.normal(0, 6, image.shape)
    for _ in range(6):
        x0, y0 = rng.integers(0, width - width // 5), rng.integers(0, height - height // 5)
        image[y0 : y0 + height // 6, x0 : x0 + width // 7] = rng.integers(0, 256, 3)
    return np.clip(image, 0, 255).astype(np.uint8)


def reference(pre: ImagePreprocess, image: np.ndarray) -> np.ndarray:
    return preprocess_image(Image.fromarray(image), pre.settings)


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"resize": "stretch"},
        {"mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)},
        {"scale": 1.0, "mean": (10.0, 20.0, 30.0)},
    ],
)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_same_values_as_the_reference_where_no_box_reduction_happens(settings, dtype):
    pre = ImagePreprocess(target(dtype=dtype), **settings)
    for image in (photo(640, 480), frame_picture(37, 640, 480), photo(300, 500, seed=1)):
        sample = pre(image)[0]
        expected = reference(pre, image)
        assert sample.dtype == expected.dtype and sample.shape == expected.shape
        assert np.array_equal(sample, expected)


def test_gray_inputs_and_the_exact_filter_on_1080p_match_the_reference():
    gray = ImagePreprocess(target(channels=1))
    assert np.array_equal(gray(photo(640, 480))[0], reference(gray, photo(640, 480)))
    exact = ImagePreprocess(target(), reducing_gap=None)
    frame = photo(1920, 1080)
    assert np.array_equal(exact(frame)[0], reference(exact, frame))


def test_1080p_with_box_reduction_stays_within_a_level_of_the_reference():
    pre = ImagePreprocess(target())
    frames = [photo(1920, 1080, seed) for seed in range(2)] + [frame_picture(i, 1920, 1080) for i in (3, 10, 25)]
    levels = np.concatenate([np.abs(pre(f)[0] - reference(pre, f)).ravel() * 255 for f in frames])
    assert levels.max() > 0  # the reduction is in use: the values are not the exact filter's
    assert np.mean(levels <= 1.001) >= 0.999 and levels.max() <= 2.001


def test_into_fills_one_row_of_a_batch_and_leaves_the_others():
    pre = ImagePreprocess(target(side=32))
    batch = np.full((3, 3, 32, 32), -1.0, np.float32)
    meta = pre.into(frame_picture(5, 64, 32), batch[1])
    assert meta == {"scale": 0.5, "pad": (0, 8), "source_size": (64, 32)}
    assert np.array_equal(batch[1], pre(frame_picture(5, 64, 32))[0])
    assert np.all(batch[0] == -1.0) and np.all(batch[2] == -1.0)
    assert np.allclose(batch[1][:, :8], 114 / 255) and np.allclose(batch[1][:, 24:], 114 / 255)


def test_a_sample_buffer_of_the_wrong_shape_or_dtype_is_refused():
    pre = ImagePreprocess(target(side=32))
    with pytest.raises(InputError, match=r"sample buffer is \(3, 16, 16\) float32; input 'images' takes \(3, 32, 32\)"):
        pre.into(frame_picture(0), np.empty((3, 16, 16), np.float32))
    with pytest.raises(InputError, match="float16"):
        pre.into(frame_picture(0), np.empty((3, 32, 32), np.float16))


def test_a_uint8_nhwc_input_takes_the_letterboxed_pixels_as_the_detection_letterbox_makes_them():
    """An engine built with ``input_uint8_nhwc``: (N, H, W, 3) uint8, found from its spec, the pixels unscaled."""
    from trtkit.detection import Letterbox
    from trtkit.pipeline.preprocess import image_input
    from trtkit.runtime.engine import TensorSpec

    spec = TensorSpec("images", True, np.dtype(np.uint8), (-1, 64, 96, 3), profiles=(((1, 64, 96, 3),) * 3,))
    nhwc = image_input([spec])
    assert (nhwc.layout, nhwc.channels, nhwc.height, nhwc.width, nhwc.sample_shape) == ("NHWC", 3, 64, 96, (64, 96, 3))
    pre = ImagePreprocess(nhwc, reducing_gap=None)
    image = photo(300, 500)
    sample, meta = pre(image)
    expected = Letterbox((64, 96), dtype=np.uint8, layout="NHWC")([image])[0][0]
    assert sample.dtype == np.uint8 and np.array_equal(sample, expected) and meta["pad"] == (29, 0)
