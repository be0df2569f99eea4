"""``--normalize``: the mean/std of DETR-family and Lightning Pose models, one spelling (calibrators' ``mean``/``std``
and the ``imagenet`` name) for calibration, ``trtkit eval`` and ``trtkit run``, the same values on every path."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from calibrators.preprocess import NORMALIZE, Preprocess, parse_normalize, parse_preprocess, preprocess_image
from tests.pipeline.media import make_image_folder
from trtkit.cli import main as cli_main
from trtkit.detection import Letterbox
from trtkit.errors import InputError, UsageError
from trtkit.pipeline.preprocess import ImageInput, ImagePreprocess

IMAGENET = NORMALIZE["imagenet"]
# one row of two pixels: (255, 0, 128) and (0, 255, 64)
PIXELS = np.array([[[255, 0, 128], [0, 255, 64]]], np.uint8)
# (x / 255 - mean) / std by hand, channel by channel: R, G, B of the two pixels
EXPECTED = np.array([[[(1 - 0.485) / 0.229, (0 - 0.485) / 0.229]],
                     [[(0 - 0.456) / 0.224, (1 - 0.456) / 0.224]],
                     [[(128 / 255 - 0.406) / 0.225, (64 / 255 - 0.406) / 0.225]]])


def test_the_names_and_the_spec_give_mean_and_std():
    assert parse_normalize("imagenet") == IMAGENET == parse_normalize("mean=0.485/0.456/0.406,std=0.229/0.224/0.225")
    assert parse_normalize("none") == {"mean": (0.0, 0.0, 0.0), "std": (1.0, 1.0, 1.0)}
    assert parse_normalize("mean=0.5/0.5/0.5") == {"mean": (0.5, 0.5, 0.5), "std": (1.0, 1.0, 1.0)}
    assert parse_normalize(None) == {}
    # the calibration spec takes the name too, so calibration sees what eval and run see
    assert parse_preprocess("resize=letterbox,normalize=imagenet") == {"resize": "letterbox", **IMAGENET}


@pytest.mark.parametrize("text, message", [
    ("coco", "--normalize takes none, imagenet or mean=R/G/B,std=R/G/B; not 'coco'"),
    ("resize=stretch", "--normalize takes none, imagenet or mean=R/G/B,std=R/G/B; not 'resize=stretch'"),
    ("mean=0.5/0.5", "not 'mean=0.5/0.5'"),
    ("std=0/1/1", "std .* contains 0"),
])
def test_bad_normalizations_are_usage_errors(text, message):
    with pytest.raises(UsageError, match=message):
        parse_normalize(text)


def test_the_cpu_letterbox_normalizes_a_known_image_channel_by_channel():
    batch, _ = Letterbox((1, 2), **IMAGENET)([PIXELS])
    np.testing.assert_allclose(batch[0], EXPECTED, rtol=1e-6)
    np.testing.assert_allclose(Letterbox((1, 2), layout="NHWC", **IMAGENET)([PIXELS])[0][0],
                               EXPECTED.transpose(1, 2, 0), rtol=1e-6)


def test_the_pipelines_preprocessing_normalizes_the_known_image_the_same():
    pre = ImagePreprocess(ImageInput("images", 3, 1, 2, "float32", 1, 4), **IMAGENET)
    sample, _ = pre(PIXELS)
    np.testing.assert_allclose(sample, EXPECTED, rtol=1e-6)
    assert pre.settings.mean == IMAGENET["mean"] and pre.settings.std == IMAGENET["std"]


def test_every_cpu_path_gives_the_calibrators_values_bit_for_bit():
    """Calibration (calibrators.preprocess), eval (trtkit.detection.Letterbox) and run (ImagePreprocess)."""
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (37, 53, 3), dtype=np.uint8)
    settings = Preprocess(size=(32, 32), resize="letterbox", **IMAGENET)
    calibration = preprocess_image(Image.fromarray(image), settings)
    evaluation = Letterbox((32, 32), **IMAGENET)([image])[0][0]
    pipeline, _ = ImagePreprocess(ImageInput("images", 3, 32, 32, "float32", 1, 4), reducing_gap=None,
                                  **IMAGENET)(image)
    np.testing.assert_array_equal(calibration, evaluation)
    np.testing.assert_array_equal(calibration, pipeline)


def test_a_uint8_input_refuses_a_normalization_it_cannot_apply():
    with pytest.raises(InputError, match="uint8 input takes the pixels as they are .* without input_uint8_nhwc"):
        Letterbox((8, 8), dtype=np.uint8, layout="NHWC", **IMAGENET)
    with pytest.raises(InputError, match="uint8 input"):
        ImagePreprocess(ImageInput("images", 3, 8, 8, "uint8", 1, 4, "NHWC"), **IMAGENET)
    Letterbox((8, 8), dtype=np.uint8, layout="NHWC", **NORMALIZE["none"])  # nothing to apply: fine


@pytest.mark.parametrize("where", ["gpu", "cpu"], ids=["letterbox-kernels", "host"])
def test_run_normalizes_on_either_path_and_the_report_records_it(fake_gpu, engine_file, tmp_path, capsys, where):
    make_image_folder(tmp_path / "imgs", count=3)
    code = cli_main.main(["run", str(engine_file), "--images", str(tmp_path / "imgs"), "--normalize", "imagenet",
                          "--preprocess", where, "--json", str(tmp_path / "r.json")])
    out = capsys.readouterr()
    assert code == 0, out.err
    source = json.loads((tmp_path / "r.json").read_text())["source"]
    assert source["normalize"] == {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
    assert source["preprocess"]["on"] == where


def test_run_refuses_an_unknown_normalization_as_a_usage_error(fake_gpu, engine_file, tmp_path, capsys):
    make_image_folder(tmp_path / "imgs", count=1)
    code = cli_main.main(["run", str(engine_file), "--images", str(tmp_path / "imgs"), "--normalize", "coco"])
    err = capsys.readouterr().err
    assert code == 2 and "--normalize takes none, imagenet or mean=R/G/B,std=R/G/B; not 'coco'" in err


def test_help_says_which_models_want_which_normalization(capsys):
    for argv in (["run", "--help"], ["eval", "detection", "--help"], ["eval", "keypoints", "--help"]):
        assert cli_main.main(argv) == 0
        out = " ".join(capsys.readouterr().out.split())
        assert "--normalize" in out and "none (YOLO, RT-DETR), imagenet (RF-DETR, DETR, Lightning Pose," in out
    cli_main.main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "heatmap pose models (Lightning Pose) usually want --normalize imagenet; YOLO and" in out


def test_the_eval_models_letterbox_takes_the_normalization():
    from trtkit.eval.models import Model

    model = Model(lambda feed: feed, "images", (1, 3, 1, 2), 1, "onnx", "det.onnx")
    batch, _ = model.letterbox(**IMAGENET)([PIXELS])
    np.testing.assert_allclose(batch[0], EXPECTED, rtol=1e-6)
