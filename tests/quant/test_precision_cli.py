"""`trtkit build --int8 / --fp16` end to end on the fake backend: flags, caches, Q/DQ model, one-line errors."""

import json
from pathlib import Path

import numpy as np
import onnx

from tests.runtime.fakes import fake_gpu  # noqa: F401 - fixture
from trtkit.cli import main as cli_main

DATA = Path(__file__).resolve().parents[1] / "data"
SHAPES = "images:1x1x8x8,32x1x8x8,64x1x8x8"


def run_cli(argv, capsys):
    code = cli_main.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def _calib_dir(tmp_path):
    folder = tmp_path / "calib"
    folder.mkdir()
    np.save(folder / "a.npy", np.load(DATA / "digits_calib.npz")["x"][:64])
    return folder


def _build(tmp_path, capsys, *extra):
    argv = ["build", str(DATA / "digits_cnn.onnx"), "-o", str(tmp_path / "d.engine"), "--shapes", SHAPES,
            "--no-isolate", "--json", str(tmp_path / "m.json"), *extra]
    code, out, err = run_cli(argv, capsys)
    manifest = json.loads((tmp_path / "m.json").read_text()) if code == 0 else None
    return code, out, err, manifest


def test_int8_qdq_from_a_folder_writes_cache_and_model(tmp_path, capsys, fake_gpu):  # noqa: F811
    calib, cache, qdq = _calib_dir(tmp_path), tmp_path / "d.cache", tmp_path / "d.qdq.onnx"
    code, out, err, manifest = _build(tmp_path, capsys, "--int8", "--int8-mode", "qdq", "--calib", str(calib),
                                      "--calib-cache", str(cache), "--calib-algo", "mse",
                                      "--save-qdq-onnx", str(qdq))
    assert code == 0, err
    plan = manifest["build"]["precision_plan"]
    assert plan["flags"] == ["INT8", "FP16"]
    assert "explicit Q/DQ made by trtkit from 64 samples (mse, " in plan["notes"][0]
    assert cache.read_text().startswith("TRT-8600-EntropyCalibration2\n")
    provenance = json.loads(Path(f"{cache}.trtkit.json").read_text())
    assert provenance["algorithm"] == "mse"
    assert sum(n.op_type == "QuantizeLinear" for n in onnx.load(str(qdq)).graph.node) == 4
    assert "explicit Q/DQ" in out


def test_a_cache_for_another_algorithm_is_refused_in_one_line(tmp_path, capsys, fake_gpu):  # noqa: F811
    calib, cache = _calib_dir(tmp_path), tmp_path / "d.cache"
    assert _build(tmp_path, capsys, "--int8", "--int8-mode", "qdq", "--calib", str(calib), "--calib-cache",
                  str(cache))[0] == 0
    code, _, err, _ = _build(tmp_path, capsys, "--int8", "--int8-mode", "qdq", "--calib", str(calib),
                             "--calib-cache", str(cache), "--calib-algo", "minmax")
    assert code == 1 and err.count("\n") == 1
    assert "does not match this build: algorithm: cache has 'mse', this build has 'minmax'" in err
    code, _, err, manifest = _build(tmp_path, capsys, "--int8", "--int8-mode", "qdq", "--calib", str(calib),
                                    "--calib-cache", str(cache), "--calib-algo", "minmax", "--calib-cache-force")
    assert code == 0, err
    assert "from calibration cache" in manifest["build"]["precision_plan"]["notes"][0]


def test_int8_without_calibration_data_is_one_line(tmp_path, capsys, fake_gpu):  # noqa: F811
    code, _, err, _ = _build(tmp_path, capsys, "--int8", "--int8-mode", "qdq")
    assert code == 1 and "error: --calib: INT8 needs calibration data: give an image folder or .npy/.npz files" in err


def test_fp16_cast_on_86_notes_the_flag(tmp_path, capsys, fake_gpu):  # noqa: F811
    code, _, err, manifest = _build(tmp_path, capsys, "--fp16", "--fp16-mode", "cast")
    assert code == 0, err
    assert manifest["build"]["precision_plan"]["flags"] == ["FP16"]
    assert manifest["precision_report"]["flops_share"]


def test_int8_from_an_image_folder_with_preprocessing(tmp_path, capsys, fake_gpu):  # noqa: F811
    from PIL import Image

    folder = tmp_path / "imgs"
    folder.mkdir()
    x = np.load(DATA / "digits_calib.npz")["x"][:40]
    for i, img in enumerate(x):
        Image.fromarray((img[0] * 255).astype(np.uint8)).resize((16, 16)).save(folder / f"{i:03d}.png")
    cache = tmp_path / "img.cache"
    code, _, err, manifest = _build(tmp_path, capsys, "--int8", "--int8-mode", "qdq", "--calib", str(folder),
                                    "--calib-cache", str(cache), "--calib-batch", "8",
                                    "--calib-preprocess", "resize=letterbox,scale=0.0039216")
    assert code == 0, err
    assert "from 40 samples (mse, " in manifest["build"]["precision_plan"]["notes"][0]
    provenance = json.loads(Path(f"{cache}.trtkit.json").read_text())
    assert provenance["preprocess"]["color"] == "GRAY" and provenance["preprocess"]["size"] == [8, 8]
    assert provenance["preprocess"]["resize"] == "letterbox" and provenance["batch_size"] == 8
    code, _, err, _ = _build(tmp_path, capsys, "--int8", "--int8-mode", "qdq", "--calib", str(folder),
                             "--calib-cache", str(cache), "--calib-batch", "8", "--calib-preprocess", "scale=1")
    assert code == 1 and "preprocess: cache has" in err
