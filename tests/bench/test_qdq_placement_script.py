"""``benchmarks/qdq_placement_h200.py --fake``: the placement table end to end on the fake backend (the GPU host gets
one call for it, so the script must not fail on anything but the GPU itself)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from tests import models

pytestmark = pytest.mark.bench  # a benchmark harness's test: pytest -m bench

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "qdq_placement_h200.py"
ROW_KEYS = {"map", "map50", "engine_mb", "b1_ms", "b8_ms", "b8_graph_ms", "b8_images_per_s", "build_s",
            "layers_by_precision", "layers_b8"}


def _run(tmp_path, *extra):
    # opset 19: onnx's reference evaluator (the fake engine's) runs DequantizeLinear from 19 on
    onnx.save(models.conv_detector(size=32, classes=8, opset=19), tmp_path / "det.onnx")
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--fake", "--model", str(tmp_path / "det.onnx"), "--val-images", "6",
         "--calib", "8", "--bench-seconds", "0.05", "--layer-runs", "2", "--out", str(tmp_path / "out"),
         "--cache", str(tmp_path / "cache"), "--work", str(tmp_path / "work"), "--results",
         str(tmp_path / "results"), *extra],
        capture_output=True, text=True, timeout=280, cwd=ROOT)


def test_every_variant_is_built_timed_profiled_and_scored_from_one_calibration(tmp_path):
    proc = _run(tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((tmp_path / "out" / "qdq-placement-h200.json").read_text())
    assert json.loads((tmp_path / "results" / "qdq-placement-h200.json").read_text()) == data
    assert not data["errors"], data["errors"]
    rows = data["rows"]
    assert set(rows) == {"fp16", "int8_qdq_union_add", "int8_qdq_add", "int8_qdq",
                         "int8_qdq_residual", "int8_qdq_concat"}
    for key, row in rows.items():
        assert ROW_KEYS <= set(row), key
        assert row["b8_images_per_s"] > 0 and row["layers_b8"]["layers"], key
        assert len(row["layers_b8"]["layers"]) <= 15 and row["layers_b8"]["shapes"] == {"images": [8, 3, 32, 32]}
    notes = {key: " ".join(row["precision_notes"]) for key, row in rows.items()}
    # one calibration: the first union row runs it, every other Q/DQ row reads its cache
    assert "from 8 samples" in notes["int8_qdq_union_add"]
    assert all("from calibration cache" in notes[k] for k in rows if k not in ("fp16", "int8_qdq_union_add"))
    assert rows["int8_qdq_residual"]["settings"] == {"qdq_residual_activations": True, "qdq_concat_shared_scale": False}
    assert set(data["vs_fp16"]) == set(rows) - {"fp16"}
    assert data["vs_fp16"]["int8_qdq"]["b8_images_per_s_vs_fp16"] > 0


def test_the_budget_skips_and_records_what_would_not_fit(tmp_path):
    proc = _run(tmp_path, "--budget", "20", "--rows", "fp16,int8_qdq")  # a build asks for 30 s
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((tmp_path / "out" / "qdq-placement-h200.json").read_text())
    assert data["errors"]["fp16/build"].startswith("skipped: ") and "of the 20 s budget" in data["errors"]["fp16/build"]
    assert "int8_qdq/build" in data["errors"] and data["rows"] == {}


def test_merge_keeps_the_earlier_rows_and_measures_the_asked_ones_again(tmp_path):
    first = _run(tmp_path, "--rows", "fp16,int8_qdq_union_add")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    earlier = tmp_path / "earlier.json"
    earlier.write_text((tmp_path / "out" / "qdq-placement-h200.json").read_text())
    second = _run(tmp_path, "--rows", "int8_qdq_union_add,int8_qdq", "--merge", str(earlier))
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    data = json.loads((tmp_path / "out" / "qdq-placement-h200.json").read_text())
    assert set(data["rows"]) == {"fp16", "int8_qdq_union_add", "int8_qdq"}
    assert data["rows"]["fp16"] == json.loads(earlier.read_text())["rows"]["fp16"]
    # the second call's union row read the first call's calibration cache
    assert "from calibration cache" in " ".join(data["rows"]["int8_qdq_union_add"]["precision_notes"])
    assert [c["rows"] for c in data["calls"]] == [["fp16", "int8_qdq_union_add"], ["int8_qdq_union_add", "int8_qdq"]]
    assert data["vs_fp16"]["int8_qdq"]["b8_images_per_s_vs_fp16"] > 0
