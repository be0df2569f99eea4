"""scripts/compare_results.py: a new benchmark run against the committed JSON, figure by figure."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.bench  # a benchmark harness's test: pytest -m bench

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "compare_results.py"
RESULTS = ROOT / "benchmarks" / "results"


def run(before: Path, after: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(before), str(after)], capture_output=True, text=True,
                          timeout=60)


def test_the_committed_runs_equal_themselves():
    for name in ("runner-h200.json", "precision-h200.json"):
        proc = run(RESULTS / name, RESULTS / name)
        assert proc.returncode == 0, proc.stdout
        assert "within 2%" in proc.stdout and "(+0.0%)" in proc.stdout


def test_a_figure_moved_past_the_tolerance_fails(tmp_path):
    runner = json.loads((RESULTS / "runner-h200.json").read_text())
    slower = copy.deepcopy(runner)
    slower["1"]["trtkit_graph_ms"] *= 1.03  # 3% slower against the same floor
    (tmp_path / "runner.json").write_text(json.dumps(slower))
    proc = run(RESULTS / "runner-h200.json", tmp_path / "runner.json")
    assert proc.returncode == 1
    assert "1/trtkit_graph_ms/floor_ms" in proc.stdout and "(+3.0%)  OUTSIDE" in proc.stdout
    faster_gpu = copy.deepcopy(runner)  # the whole GPU 5% faster that day: ratios to the floor unchanged
    for batch in runner["batches"]:
        faster_gpu[str(batch)] = {k: v * 0.95 if isinstance(v, float) else v for k, v in runner[str(batch)].items()}
    (tmp_path / "gpu.json").write_text(json.dumps(faster_gpu))
    assert run(RESULTS / "runner-h200.json", tmp_path / "gpu.json").returncode == 0

    precision = json.loads((RESULTS / "precision-h200.json").read_text())
    del precision["trtkit_vs_raw"]["fp16"]
    (tmp_path / "precision.json").write_text(json.dumps(precision))
    proc = run(RESULTS / "precision-h200.json", tmp_path / "precision.json")
    assert proc.returncode == 1 and "trtkit_vs_raw/fp16/1: missing now" in proc.stdout


def test_a_run_that_measured_nothing_is_not_within_tolerance(tmp_path):
    committed = {"batches": [1], "1": {"trtkit_graph_ms": 1.0, "floor_ms": 1.0}}
    empty = {"batches": [1], "1": {"trtkit_graph_ms": None, "floor_ms": None}}
    for before, after in ((committed, empty), (empty, empty)):
        a, b = tmp_path / "a.json", tmp_path / "b.json"
        a.write_text(json.dumps(before))
        b.write_text(json.dumps(after))
        done = subprocess.run([sys.executable, str(SCRIPT), str(a), str(b)], capture_output=True, text=True)
        assert done.returncode == 1, done.stdout
        assert "NOT within" in done.stdout
