"""The precision benchmark script runs its digits part end to end on the fake backend, recording what fails."""

import importlib.util
import json
from pathlib import Path

import pytest

from tests.runtime.fakes import fake_gpu  # noqa: F401 - fixture

pytestmark = pytest.mark.bench  # a benchmark harness's test: pytest -m bench

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
    written = (tmp_path / "res" / "precision-h200.json").read_text()
    assert written == (tmp_path / "out" / "precision-h200.json").read_text()
    assert data["tensorrt"] == "8.6.0"
    assert set(data["digits_top1"]) >= {"fp32", "fp16_flag", "fp16_cast"}
    assert data["digits_top1"]["fp32"] > 95
    # the fake 8.6 has calibrator classes: the native INT8 path runs end to end on fake CUDA
    assert data["digits_top1"]["int8_calibrator_entropy"] > 90
    assert data["digits_precision_share"]["fp16_cast"] == {"FP16": 1.0}
    # --qdq-quantize-heads is a variant of its own (the fake cannot run Q/DQ at opset 17: recorded, not raised)
    assert "int8_qdq_heads" in data["digits_top1"] or "digits/int8_qdq_heads" in data["errors"]


def test_budget_skips_and_records():
    bench = _load()
    run = bench.Run(budget=0.0)
    assert run.guard("x", lambda: 1, cost=10) is None
    assert run.result["errors"]["x"].startswith("skipped:")


def test_a_second_call_merges_into_the_first(tmp_path, fake_gpu):  # noqa: F811
    bench = _load()
    out, res = tmp_path / "out", tmp_path / "res"
    bench.main(["--out", str(out), "--parts", "digits", "--results", str(res)])
    first = json.loads((out / "precision-h200.json").read_text())
    assert (out / "inspector" / "digits-fp16_cast.json").exists()
    bench.main(["--out", str(tmp_path / "out2"), "--parts", "", "--results", str(res),
                "--merge", str(out / "precision-h200.json")])
    merged = json.loads((tmp_path / "out2" / "precision-h200.json").read_text())
    assert merged["digits_top1"] == first["digits_top1"]
    assert [call["parts"] for call in merged["calls"]] == ["digits", ""]


def test_targets_are_computed_from_what_was_measured():
    bench = _load()
    result = {
        "digits_top1": {"fp32": 98.0, "fp16_flag": 97.9, "int8_qdq": 96.5},
        "resnet50_images_per_s": {"fp16": {"32": 1000.0, "1": 500.0}, "int8_qdq": {"32": 1200.0, "1": 450.0},
                                  "int8_calibrator": {"32": 1190.0, "1": 470.0}, "int8_qdq_heads": {"1": 460.0}},
        "raw_api_images_per_s": {"fp16": {"32": 1020.0, "1": 520.0}},
    }
    targets = bench.targets_of(result)
    assert targets["digits_fp16_flag_drop_points"] == {"value": 0.1, "target": "<= 0.2", "met": True}
    assert targets["digits_int8_qdq_drop_points"]["met"] is False
    assert targets["digits_fp16_cast_drop_points"] == {"value": None, "target": "<= 0.2", "met": None}
    assert targets["resnet50_fp16_b32_over_raw"]["value"] == round(1000 / 1020, 4)
    assert targets["resnet50_fp16_b1_over_raw"]["met"] is False  # 500/520 < 0.97
    assert targets["resnet50_best_int8_over_fp16_b32"] == {"value": 1.2, "target": ">= 1.15", "met": True}
    assert targets["resnet50_best_int8_over_fp16_b1"]["met"] is False
    assert targets["resnet50_qdq_over_calibrator_b32"]["value"] == round(1200 / 1190, 4)
    assert targets["resnet50_qdq_heads_over_calibrator_b1"] == {"value": round(460 / 470, 4), "target": ">= 0.95",
                                                                "met": True}


def test_unknown_raw_keys_are_refused_before_anything_runs(tmp_path, capsys):
    bench = _load()
    import pytest

    with pytest.raises(SystemExit):
        bench.main(["--out", str(tmp_path / "out"), "--raw-keys", "int8_qdq,int9"])
    assert "--raw-keys: unknown int9" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_unprepared_fp16_build_is_asked_for_by_name_only(tmp_path, capsys):
    bench = _load()
    import pytest

    assert "fp16_unprepared" not in bench.RESNET_KEYS  # not in a default run
    with pytest.raises(SystemExit):
        bench.main(["--out", str(tmp_path / "out"), "--resnet-keys", "fp16_unprepared,fp17"])
    err = capsys.readouterr().err
    assert "--resnet-keys: unknown fp17;" in err and "fp16_unprepared" in err.split("expected some of")[1]
