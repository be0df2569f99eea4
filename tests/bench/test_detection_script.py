"""``benchmarks/detection_h200.py`` end to end on the fake backend with a tiny convolutional detector: the GPU host
gets one call for the table, so the script must not fail on anything but the GPU itself."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from tests import models
from tests.bench.test_anchor_script import WRAPPER

pytestmark = pytest.mark.bench  # a benchmark harness's test: pytest -m bench

ROOT = Path(__file__).resolve().parents[2]
ROW_KEYS = {"map", "map50", "engine_mb", "b1_ms", "b8_ms", "b8_graph_ms", "b8_images_per_s", "build_s"}


def _run(tmp_path, *extra):
    wrapper = tmp_path / "wrapper.py"
    wrapper.write_text(WRAPPER.format(root=str(ROOT), script=str(ROOT / "benchmarks" / "detection_h200.py")))
    return subprocess.run(
        [sys.executable, str(wrapper), "--model", str(tmp_path / "det.onnx"), "--val-images", "6", "--calib", "8",
         "--bench-seconds", "0.05", "--out", str(tmp_path / "out"), "--cache", str(tmp_path / "cache"), "--work",
         str(tmp_path / "work"), "--results", str(tmp_path / "results"), *extra],
        capture_output=True, text=True, timeout=280, cwd=ROOT)


def test_the_sample_fast_path_is_timed_and_compared_with_the_plain_engine(tmp_path):
    onnx.save(models.conv_detector(size=32, classes=8, seed=2), tmp_path / "det.onnx")
    proc = _run(tmp_path, "--rows", "fp16", "--no-fast-nms")  # the fake engine cannot run EfficientNMS_TRT
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((tmp_path / "out" / "detection-h200.json").read_text())
    assert not data["errors"], data["errors"]
    fast, plain = data["sample_latency"], data["sample_latency_plain"]
    numpy_fast, gpu_plain = data["sample_latency_cpu_letterbox"], data["sample_latency_plain_gpu_letterbox"]
    assert fast["input"] == "NHWC uint8" and plain["input"] == "NCHW float32"
    # the new path (the fake GPU's letterbox kernels) and the old numpy one, both recorded with which ran and why
    assert fast["letterbox"] == gpu_plain["letterbox"] == "gpu" and fast["letterbox_reason"] is None
    assert plain["letterbox"] == numpy_fast["letterbox"] == "cpu"
    assert plain["letterbox_reason"] == "asked for the numpy letterbox"
    # the fast engine against its own e2e latency, the plain engine's runs against the plain FP16 engine's
    assert fast["engine_e2e_ms"] == numpy_fast["engine_e2e_ms"] == data["fast_engine"]["b1_e2e_ms"]
    assert plain["engine_e2e_ms"] == gpu_plain["engine_e2e_ms"] == data["rows"]["fp16"]["b1_e2e_ms"]
    assert fast["ratio_vs_fp16_e2e"] == pytest.approx(fast["total_ms"] / plain["engine_e2e_ms"], abs=2e-3)
    # total_ms is stored rounded to 4 places and the ratio from the unrounded total: equal to within that rounding
    assert fast["ratio"] == pytest.approx(fast["total_ms"] / fast["engine_e2e_ms"], abs=2e-3)
    assert data["fast_engine"]["input_uint8_nhwc"] and data["fast_engine"]["b1_e2e_ms"] > 0
    agree = data["sample_fast_vs_plain"]  # the fake runs both in the reference evaluator: the same detections
    assert agree["boxes_compared"] > 0 and agree["only_fast"] == agree["only_plain"] == 0 and agree["min_iou"] == 1
    assert data["targets"]["sample_latency_1.5x"]["ratio"] == fast["ratio"]
    same = data["sample_gpu_vs_numpy_letterbox"]
    assert same["boxes_compared"] > 0 and same["only_gpu"] == same["only_numpy"] == 0 and same["min_iou"] == 1


def test_detection_table_script_writes_every_row(tmp_path):
    # opset 19: onnx's reference evaluator (the fake engine's) runs DequantizeLinear from 19 on
    onnx.save(models.conv_detector(size=32, classes=8, opset=19), tmp_path / "det.onnx")
    out = tmp_path / "out"
    proc = _run(tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((out / "detection-h200.json").read_text())
    assert json.loads((tmp_path / "results" / "detection-h200.json").read_text()) == data
    assert set(data["rows"]) == {"onnx", "fp32", "fp16", "int8_calibrator", "int8_qdq", "int8_qdq_heads"}
    for key, row in data["rows"].items():
        assert ROW_KEYS <= set(row), key
        if key != "onnx":
            assert row["engine_mb"] > 0 and row["b8_images_per_s"] > 0 and row["b1_ms"] > 0, key
    rows = data["rows"]
    assert rows["fp16"]["precision_constraints"] == "prefer" == rows["int8_calibrator"]["precision_constraints"]
    assert data["rows"]["fp32"]["precision_constraints"] == "none"
    assert data["rows"]["fp32"]["map"] == data["rows"]["onnx"]["map"]  # the fake engine runs the ONNX model
    plain = data["sample_latency_plain"]
    assert plain["total_ms"] > 0 and plain["engine_e2e_ms"] == rows["fp16"]["b1_e2e_ms"] > 0
    assert plain["input"] == "NCHW float32" and plain["images"] == 6
    assert "fp16_within_0.3pt" in data["targets"] and "best_int8" in data["targets"]
    # the fake runtime runs the graph with onnx's reference evaluator, which has no EfficientNMS_TRT: the NMS
    # comparison and the sample on the fast (uint8 + NMS) engine stop there, recorded
    assert set(data["errors"]) <= {"nms_match", "sample_latency"}, data["errors"]
    assert data["nms_engine"]["engine_mb"] > 0 and data["fast_engine"]["engine_mb"] > 0


def test_missing_rows_are_measured_alone_and_merged_into_the_committed_table(tmp_path):
    onnx.save(models.conv_detector(size=32, classes=8, opset=19), tmp_path / "det.onnx")
    committed = json.loads((ROOT / "benchmarks" / "results" / "detection-h200.json").read_text())
    # as a single call that ran out of budget leaves it: two rows' errors, no call list yet
    committed["errors"] = {"int8_qdq/bench": "skipped: 10 s left of the 490 s budget",
                           "int8_qdq_heads/build": "skipped: 10 s left of the 490 s budget"}
    committed.pop("calls", None)
    committed.setdefault("notes", {}).pop("errors_resolved_by_later_calls", None)
    merge = tmp_path / "committed.json"
    merge.write_text(json.dumps(committed))
    proc = _run(tmp_path, "--rows", "int8_qdq,int8_qdq_heads", "--merge", str(merge))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "onnx/eval" not in proc.stdout and "built fp32" not in proc.stdout  # only the two rows were measured
    data = json.loads((tmp_path / "out" / "detection-h200.json").read_text())
    rows = data["rows"]
    assert set(rows) == {"onnx", "fp32", "fp16", "int8_calibrator", "int8_qdq", "int8_qdq_heads"}
    for key in ("onnx", "fp32", "fp16", "int8_calibrator"):
        assert rows[key] == committed["rows"][key], key
    for key in ("int8_qdq", "int8_qdq_heads"):
        assert ROW_KEYS <= set(rows[key]) and rows[key]["b8_images_per_s"] > 0, key
        assert rows[key] != committed["rows"].get(key)
    assert "(mse, " in rows["int8_qdq"]["precision_notes"][0]  # the Q/DQ rows use the Q/DQ path's default
    # the errors the committed call left under these rows were re-decided by this call
    assert not {"int8_qdq/bench", "int8_qdq_heads/build"} & set(data["errors"]), data["errors"]
    assert set(data["notes"]["errors_resolved_by_later_calls"]) == {"int8_qdq/bench", "int8_qdq_heads/build"}
    assert data["nms_match"] == committed["nms_match"] and data["sample_latency"] == committed["sample_latency"]
    first, this = data["calls"]  # the committed call, as its keys describe it, then this one
    assert first["calib_images"] == committed["calib_images"] and first["started"] == committed["started"]
    assert this["rows"] == ["int8_qdq", "int8_qdq_heads"] and this["calib_images"] == 8
    best = data["targets"]["best_int8"]
    int8 = {k: rows[k]["map"] for k in ("int8_calibrator", "int8_qdq", "int8_qdq_heads")}
    assert best["row"] == max(int8, key=int8.get)
    assert best["delta"] == round(rows[best["row"]]["map"] - rows["fp32"]["map"], 3)
    assert best["b8_images_per_s_vs_fp16"] == round(rows[best["row"]]["b8_images_per_s"] /
                                                    rows["fp16"]["b8_images_per_s"], 3)
    assert data["targets"]["fp16_within_0.3pt"] == committed["targets"]["fp16_within_0.3pt"]
