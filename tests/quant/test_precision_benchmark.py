"""The precision benchmark script runs its digits part end to end on the fake backend, recording what fails."""

import importlib.util
import json
from pathlib import Path

from tests.runtime.fakes import fake_gpu  # noqa: F401 - fixture

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "precision_h200.py"


def _load():
    spec = importlib.util.spec_from_file_location("precision_h200", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_digits_part_writes_json_with_errors_recorded(tmp_path, fake_gpu):  # noqa: F811
    bench = _load()
    code = bench.main(["--out", str(tmp_path / "out"), "--parts", "digits", "--results", str(tmp_path / "res")])
    assert code == 0
    data = json.loads((tmp_path / "out" / "precision-h200.json").read_text())
    assert (tmp_path / "res" / "precision-h200.json").read_text() == (tmp_path / "out" / "precision-h200.json").read_text()
    assert data["tensorrt"] == "8.6.0"
    assert set(data["digits_top1"]) >= {"fp32", "fp16_flag", "fp16_cast"}
    assert data["digits_top1"]["fp32"] > 95
    # the fake 8.6 has calibrator classes: the native INT8 path runs end to end on fake CUDA
    assert data["digits_top1"]["int8_calibrator_entropy"] > 90
    assert data["digits_precision_share"]["fp16_cast"] == {"FP16": 1.0}


def test_budget_skips_and_records():
    bench = _load()
    run = bench.Run(budget=0.0)
    assert run.guard("x", lambda: 1, cost=10) is None
    assert run.result["errors"]["x"].startswith("skipped:")
