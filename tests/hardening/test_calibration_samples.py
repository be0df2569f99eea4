"""Issue 14, item 5: calibration samples are checked against the model's inputs before calibrating, naming the file."""

from pathlib import Path

import numpy as np
import pytest

from calibrators.sources import IterableSource, SampleSpec, batches, checked
from tests.runtime.fakes import fake_gpu  # noqa: F401 - fixture
from trtkit.cli import main as cli_main
from trtkit.errors import CalibrationError

DATA = Path(__file__).resolve().parents[1] / "data"
SHAPES = "images:1x1x8x8,32x1x8x8,64x1x8x8"


def _build_int8(tmp_path, capsys, calib, mode="qdq"):
    argv = ["build", str(DATA / "digits_cnn.onnx"), "-o", str(tmp_path / "d.engine"), "--shapes", SHAPES,
            "--no-isolate", "--int8", "--int8-mode", mode, "--calib", str(calib)]
    code = cli_main.main(argv)
    return code, capsys.readouterr().err


def _folder(tmp_path, **arrays):
    folder = tmp_path / "calib"
    folder.mkdir()
    for name, arr in arrays.items():
        np.save(folder / f"{name}.npy", arr)
    return folder


GOOD = np.load(DATA / "digits_calib.npz")["x"][:64]


@pytest.mark.parametrize("mode", ["qdq", "calibrator"])
@pytest.mark.parametrize("bad, expected", [
    (np.zeros((4, 1, 9, 8), np.float32), "axis 2 must be 8"),
    (np.zeros((4, 3, 8, 8), np.float32), "axis 1 must be 1"),
    (np.zeros((4, 8, 8), np.float32), "samples of shape (4, 8, 8)"),
    (np.zeros((4, 64), np.float32), "has 4 dims"),
    (np.zeros((4, 1, 8, 8), np.int32), "takes float32"),
    (np.zeros((0, 1, 8, 8), np.float32), "holds no samples"),
])
def test_a_sample_that_does_not_fit_the_model_is_named(tmp_path, capsys, fake_gpu, bad, expected, mode):  # noqa: F811
    calib = _folder(tmp_path, a=GOOD, z_bad=bad)
    code, err = _build_int8(tmp_path, capsys, calib, mode)
    assert code == 1 and expected in err and "z_bad.npy" in err and "Traceback" not in err, err
    assert not (tmp_path / "d.engine").exists()


def test_good_samples_still_calibrate(tmp_path, capsys, fake_gpu):  # noqa: F811
    code, err = _build_int8(tmp_path, capsys, _folder(tmp_path, a=GOOD, b=GOOD[0]))
    assert code == 0, err


def test_an_object_array_is_a_calibration_error_without_pickle_advice(tmp_path, capsys, fake_gpu):  # noqa: F811
    calib = _folder(tmp_path, a=GOOD, b=np.array([GOOD[0], "x"], dtype=object))
    code, err = _build_int8(tmp_path, capsys, calib)
    assert code == 1 and "Python objects" in err and "allow_pickle" not in err, err


def test_ragged_and_mixed_items_raise_calibration_error():
    ragged = IterableSource([{"x": [[1.0, 2.0], [3.0]]}])
    with pytest.raises(CalibrationError, match="item #0.*not a rectangular array"):
        list(ragged)
    spec = SampleSpec({"x": [-1, 2]}, {"x": np.float32}, {"x": ((1, 2), (8, 2))})
    mixed = IterableSource([{"x": np.zeros((2, 2), np.float32)}, {"x": np.array([["a", "b"]])}])
    with pytest.raises(CalibrationError, match="item #1.*<U1 values"):
        list(batches(checked(mixed, spec), 2))


def test_samples_of_two_shapes_in_a_dynamic_dim_are_named():
    spec = SampleSpec({"x": [-1, -1]}, {"x": np.float32}, {"x": ((1, 1), (8, 8))})
    source = IterableSource([{"x": np.zeros((2, 3), np.float32)}, {"x": np.zeros((2, 4), np.float32)}])
    with pytest.raises(CalibrationError, match=r"item #1.*shape \(4,\), but item #0 has \(3,\)"):
        list(batches(checked(source, spec), 2))
    outside = IterableSource([{"x": np.zeros((2, 9), np.float32)}])
    with pytest.raises(CalibrationError, match="axis 1 must be 1..8"):
        list(checked(outside, spec))
