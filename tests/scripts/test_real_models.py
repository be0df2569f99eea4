"""scripts/real_models.py on the fake backend: the scoreboard end to end, resume, a crashing child, the case table
(the exports and the real builds run on the GPU host)."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.bench  # a benchmark harness's test: pytest -m bench

NAMES = "timm_convnext_tiny,tv_resnet18,hf_segformer"


def _run(real_models, tmp_path, *extra):
    out = tmp_path / "r.json"
    assert real_models.main(["--fake", "--out", str(out), "--work-dir", str(tmp_path / "work"), *extra]) == 0
    return json.loads(out.read_text())


def test_three_cases_end_to_end_write_every_key(real_models, tmp_path):
    report = _run(real_models, tmp_path, "--only", NAMES)
    assert {"date", "command", "summary", "models", "reference", "opt_level"} <= set(report)
    assert report["summary"] == {"models": 3, "ort_runs": 3, "trtkit_pass": 3, "trtkit_fp16_pass": 3, "raw_pass": 3,
                                 "crash": 0, "export_skip": 0, "export_fail": 0}
    assert set(report["models"]) == set(NAMES.split(","))
    for record in report["models"].values():
        assert set(record) == {"library", "ctor", "shape", "exporter", "opset", "dynamic", "export", "ort_runs",
                               "ort_error", "raw", "trtkit_fp32", "trtkit_fp16", "crash", "seconds"}
        for stage in ("raw", "trtkit_fp32", "trtkit_fp16"):
            assert record[stage] == {"status": "pass", "error": None}
    assert report["models"]["tv_resnet18"]["ctor"] == "torchvision.models.resnet18(weights=None)"


def test_a_second_run_skips_the_done_cases_unless_redone(real_models, tmp_path, capsys):
    first = _run(real_models, tmp_path, "--only", NAMES, "--limit", "2")
    assert len(first["models"]) == 2
    second = _run(real_models, tmp_path, "--only", NAMES)
    assert "1 cases to run" in capsys.readouterr().out
    assert set(second["models"]) == set(NAMES.split(","))
    assert second["models"]["timm_convnext_tiny"] == first["models"]["timm_convnext_tiny"]
    _run(real_models, tmp_path, "--only", NAMES, "--redo", "tv_resnet18")
    assert "1 cases to run" in capsys.readouterr().out


def test_a_child_that_dies_is_recorded_as_a_crash(real_models, tmp_path, monkeypatch):
    monkeypatch.setenv(real_models.FAKE_CRASH, "tv_resnet18:raw")
    report = _run(real_models, tmp_path, "--only", NAMES)
    crashed = report["models"]["tv_resnet18"]
    assert crashed["crash"] is True and crashed["raw"]["status"] == "crash"
    assert crashed["raw"]["error"].startswith("child exit code 11")
    assert crashed["trtkit_fp32"]["status"] == "pass"  # the stages after it still ran
    assert report["summary"]["crash"] == 1 and report["summary"]["raw_pass"] == 2


def test_an_unknown_case_name_is_a_usage_error(real_models, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        real_models.main(["--fake", "--only", "no_such_model", "--out", str(tmp_path / "r.json")])
    assert exc.value.code == 2 and "no case named no_such_model" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


def test_the_table_covers_every_library_exporter_and_opset_range(real_models):
    cases = real_models.CASES
    assert len(cases) >= 40 and len({c["name"] for c in cases}) == len(cases)
    assert {c["library"] for c in cases} == set(real_models.LIBRARIES)
    assert {c["exporter"] for c in cases} == {"torchscript", "dynamo"}
    assert min(c["opset"] for c in cases) == 11 and max(c["opset"] for c in cases) == 20
    assert {c["dynamic"] for c in cases} == {True, False}
    for c in cases:  # every case's export script is valid Python
        compile(real_models.export_script(c, "m.onnx"), c["name"], "exec")


def test_the_prepare_stage_runs_on_a_cpu_and_a_later_run_adds_the_gpu_stages(real_models, tmp_path, capsys):
    report = _run(real_models, tmp_path, "--only", NAMES, "--stages", "ort,prepare")
    assert report["summary"] == {"models": 3, "ort_runs": 3, "prepare_pass": 3, "prepare_fp16_pass": 3, "crash": 0,
                                 "export_skip": 0, "export_fail": 0}
    record = report["models"]["tv_resnet18"]
    assert "raw" not in record and record["prepare"]["status"] == "pass"
    assert record["prepare"]["fp16"] == {"status": "pass", "error": None}
    assert {"summary", "not_applied", "hazards"} <= set(record["prepare"])
    both = _run(real_models, tmp_path, "--only", NAMES)  # the default stages: each case lacks them, so runs again
    assert "3 cases to run" in capsys.readouterr().out
    assert both["summary"]["prepare_pass"] == 3 and both["summary"]["trtkit_pass"] == 3
    assert both["models"]["tv_resnet18"]["prepare"] == record["prepare"]


def test_an_unknown_stage_is_a_usage_error(real_models, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        real_models.main(["--fake", "--stages", "ort,gpu", "--out", str(tmp_path / "r.json")])
    assert exc.value.code == 2 and "the stages are ort, prepare, raw, trtkit" in capsys.readouterr().err
