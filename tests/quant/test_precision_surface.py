"""The ``surface`` tier for precision: planning and TensorRT's calibrator base classes against real bindings of
8.6, 10.x and 11.x (prepared by ``python scripts/trt_surfaces.py``; skipped when a version is not prepared)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.surface

REPO = Path(__file__).resolve().parents[2]
ROOT = Path(os.environ.get("TRTKIT_SURFACES", REPO / ".trt-surfaces"))


def facts(version: str) -> dict:
    folder = ROOT / version
    if not (folder / "tensorrt").exists():
        pytest.skip(f"TensorRT {version}'s surface is not prepared: run `python scripts/trt_surfaces.py {version}`")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(folder), str(REPO)]))
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("surface_precision_driver.py"))], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_86_uses_flags_and_calibrators_and_builds_cast_models_with_the_flag():
    f = facts("8.6.1")
    assert f["modes"]["fp16/auto"] == "flag" and f["modes"]["fp16/cast"] == "cast+flag"
    assert f["modes"]["bf16/auto"].startswith("UnsupportedError: BF16 needs BuilderFlag.BF16")
    assert f["modes"]["int8/auto"] == "calibrator"
    entropy = f["calibrators"]["entropy"]
    assert entropy == {"is_calibrator": True, "algorithm": "CalibrationAlgoType.ENTROPY_CALIBRATION_2",
                       "batch_size": 2, "first": 1, "second": None}
    assert f["calibrators"]["minmax"]["algorithm"] == "CalibrationAlgoType.MINMAX_CALIBRATION"


def test_10_has_both_paths():
    f = facts("10.8.0.43")
    assert f["modes"]["fp16/cast"] == "cast" and f["modes"]["bf16/auto"] == "flag"
    assert f["calibrators"]["entropy"]["is_calibrator"] is True


def test_11_has_only_strongly_typed_models_and_qdq():
    f = facts("11.4.0.106")
    assert f["modes"]["fp16/auto"] == "cast" and f["modes"]["int8/auto"] == "qdq"
    assert f["modes"]["fp16/flag"].startswith(
        "UnsupportedError: fp16_mode 'flag' with FP16 needs BuilderFlag.FP16")
    assert "Use int8_mode 'qdq'" in f["modes"]["int8/calibrator"]
    assert f["calibrators"] is None
