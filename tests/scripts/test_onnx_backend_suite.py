"""scripts/onnx_backend_suite.py on the fake backend: case discovery and export, the worker pool, the JSON and the
per-op markdown (the real run is on the GPU host)."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.bench  # a benchmark harness's test: pytest -m bench


def test_three_cases_end_to_end_on_the_fake_backend(suite, tmp_path, capsys):
    out, doc = tmp_path / "r.json", tmp_path / "s.md"
    code = suite.main(["--fake", "--kinds", "simple,pytorch-operator,node", "--cases",
                       "test_expand_shape_model2,test_operator_exp,test_strnorm_model_nostopwords_nochangecase,"
                       "test_gather_0",
                       "--jobs", "2", "--work-dir", str(tmp_path / "work"), "--out", str(out), "--doc", str(doc)])
    assert code == 0
    report = json.loads(out.read_text())
    for adapter in ("raw", "trtkit"):
        assert set(report["summary"][adapter]) == {"pass", "error", "mismatch", "crash", "timeout", "not_run",
                                                   "median_s", "median_s_both_pass", "median_phases_s"}
    assert report["settings"]["order"] == "shuffle" and report["settings"]["seed"] == 0
    cases = report["cases"]
    assert cases["test_operator_exp"]["raw"]["status"] == cases["test_operator_exp"]["trtkit"]["status"] == "pass"
    # a shape-tensor input: the raw API builds without its values and TensorRT refuses; trtkit gives the case's values
    assert "build_serialized_network returned None" in cases["test_expand_shape_model2"]["raw"]["error"]
    assert cases["test_expand_shape_model2"]["trtkit"]["status"] == "pass", cases["test_expand_shape_model2"]
    # INT64 I/O: the raw API's 8.6 engine takes INT32 where the model gives INT64; trtkit converts
    assert "int64 in the model, int32 in the engine" in cases["test_gather_0"]["raw"]["error"]
    assert cases["test_gather_0"]["trtkit"]["status"] == "pass"
    assert cases["test_strnorm_model_nostopwords_nochangecase"]["trtkit"]["status"] == "not_run"
    assert report["summary"]["raw"]["pass"] == 1 and report["summary"]["raw"]["not_run"] == 1
    text = doc.read_text()
    assert "| Exp | 1 | 1 | 1 |" in text and "| raw | 1 |" in text


def test_the_budget_leaves_cases_not_run(suite, tmp_path):
    cases = suite.export(suite.discover(["pytorch-operator"], max_cases=2), tmp_path)
    results = suite.run_pool(cases, ("raw",), jobs=1, case_timeout_s=60, budget_s=0, fake=True, log=lambda _: None)
    report = suite.assemble(cases, results, ("raw",), {"tensorrt": "fake", "onnx": "x"})
    assert report["summary"]["raw"]["not_run"] == 2
    assert all("time budget" in c["raw"]["error"] for c in report["cases"].values())


def test_the_like_for_like_median_is_over_the_cases_both_adapters_pass(suite):
    # raw fails one case fast, trtkit builds it: over every reached case raw looks faster, on the same cases not
    cases = [{"name": n, "kind": "node", "ops": []} for n in ("a", "b", "c")]
    results = {(0, "raw"): {"status": "pass", "error": None, "seconds": 2.0},
               (0, "trtkit"): {"status": "pass", "error": None, "seconds": 2.2},
               (1, "raw"): {"status": "error", "error": "parse", "seconds": 0.01},
               (1, "trtkit"): {"status": "pass", "error": None, "seconds": 3.0},
               (2, "raw"): {"status": "error", "error": "parse", "seconds": 0.01},
               (2, "trtkit"): {"status": "error", "error": "x", "seconds": 0.5}}
    summary = suite.assemble(cases, results, ("raw", "trtkit"), {"tensorrt": "fake", "onnx": "x"})["summary"]
    assert summary["raw"]["median_s"] == 0.01 and summary["trtkit"]["median_s"] == 2.2
    assert summary["raw"]["median_s_both_pass"] == 2.0 and summary["trtkit"]["median_s_both_pass"] == 2.2
    assert summary["both_pass"] == 1


def test_mismatch_uses_the_cases_tolerances(suite):
    import numpy as np

    expected = {"y": np.array([1.0, 2.0], dtype=np.float32)}
    assert suite.compare({"y": np.array([1.0, 2.0001], dtype=np.float32)}, expected, 1e-3, 1e-7) is None
    assert "output 'y'" in suite.compare({"y": np.array([1.0, 2.1], dtype=np.float32)}, expected, 1e-3, 1e-7)
    assert "shape" in suite.compare({"y": np.zeros(3, dtype=np.float32)}, expected, 1e-3, 1e-7)


def test_each_case_records_seconds_per_phase_and_the_summary_their_medians(suite, tmp_path):
    out = tmp_path / "r.json"
    assert suite.main(["--fake", "--kinds", "pytorch-operator", "--cases", "test_operator_exp,test_operator_sqrt",
                       "--jobs", "1", "--work-dir", str(tmp_path / "work"), "--out", str(out),
                       "--doc", str(tmp_path / "s.md")]) == 0
    report = json.loads(out.read_text())
    case = report["cases"]["test_operator_exp"]
    # (the JSON's keys are sorted)
    assert set(case["raw"]["phases_s"]) == {"parse", "build", "deserialize", "run"}
    assert set(case["trtkit"]["phases_s"]) == {"setup", "load", "prepare", "parse", "configure", "build",
                                               "inspect", "write", "open", "infer"}
    for adapter in ("raw", "trtkit"):
        phases = case[adapter]["phases_s"]
        assert all(s >= 0 for s in phases.values()) and sum(phases.values()) <= case[adapter]["seconds"]
        medians = report["summary"][adapter]["median_phases_s"]
        assert set(medians) == set(phases) and report["summary"][adapter]["pass"] == 2


def test_the_shuffle_is_seeded_and_reaches_every_suite_early(suite):
    cases = [{"kind": kind, "name": f"{kind}{i}"} for kind in suite.KINDS for i in range(40)]
    first = suite.case_order(cases, "shuffle", 0)
    assert first == suite.case_order(cases, "shuffle", 0) != suite.case_order(cases, "shuffle", 1)
    assert sorted(first) == list(range(len(cases)))
    assert {cases[i]["kind"] for i in first[:20]} == set(suite.KINDS)
    assert [cases[i]["kind"] for i in suite.case_order(cases, "kind")[:5]] == list(suite.KINDS)


def test_median_phases_count_only_passing_cases(suite):
    results = [{"status": "pass", "phases_s": {"parse": 1.0, "build": 4.0}},
               {"status": "pass", "phases_s": {"parse": 3.0, "build": 2.0}},
               {"status": "error", "phases_s": {"parse": 100.0}},
               {"status": "timeout", "phases_s": {}}]
    assert suite.median_phases(results) == {"parse": 2.0, "build": 3.0}


def test_arrays_of_ml_dtypes_types_come_back_as_they_were_saved(suite, tmp_path):
    # FLOAT8 cases: npz alone reads them back as an invalid '<f1' descriptor, so the case failed in the harness
    # before either adapter saw it
    import ml_dtypes
    import numpy as np

    f8 = np.array([0.5, -2.0, 448.0], ml_dtypes.float8_e4m3fn)
    plain = np.arange(4, dtype=np.int64)
    suite._save_arrays(tmp_path / "data.npz", {"x": f8, "n": plain}, {"y": f8.astype(np.float32)})
    inputs, outputs = suite.load_arrays(tmp_path)
    assert inputs["x"].dtype == f8.dtype and np.array_equal(inputs["x"].view(np.uint8), f8.view(np.uint8))
    assert inputs["n"].dtype == np.int64 and np.array_equal(inputs["n"], plain)
    assert outputs["y"].dtype == np.float32
