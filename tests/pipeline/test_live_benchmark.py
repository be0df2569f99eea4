"""``benchmarks/live_h200.py --fake`` end to end on the CPU: publishers, trtkit listening (fake TensorRT), receivers;
the GPU host gets one call, so the script must run through and write every key of the issue's results format."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.bench  # a benchmark harness's test: pytest -m bench

pytest.importorskip("av")
ROOT = Path(__file__).resolve().parents[2]


def test_the_live_benchmark_writes_the_issues_format(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "live_h200.py"), "--fake", "--out",
                           str(tmp_path)], capture_output=True, text=True, timeout=400, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((tmp_path / "live-h200.json").read_text())
    context = json.dumps(data)[:6000]
    assert data["errors"] == {} and data["complete"] is True, context
    single, four, over = data["single"], data["four_streams"], data["overload"]
    assert {"fps", "source_fps", "p99_latency_ms", "dropped"} <= set(single), context
    # every frame published is counted: kept and sent on to the receiver, or dropped by the policy
    assert single["frames_out"] + single["dropped"] == single["published"], context
    assert single["received"] == single["frames_out"], context
    assert len(four["fps_each"]) == 4 and four["dropped"] == sum(four["dropped_each"]), context
    assert four["received_each"] == four["frames_out_each"] and four["decoder"] == "pyav"
    assert {"dropped", "p99_latency_ms"} <= set(over) and over["capacity_fps"] == data["capacity"]["fps"] > 0
    assert over["frames_out"] + over["dropped"] == over["published"] and over["received"] == over["frames_out"]
    assert {"date", "command"} <= set(data) and data["environment"]["gpu"] == "Fake GPU"
    assert set(data["targets"]) == {"single_holds_source_fps", "single_p99_le_100ms", "single_no_drops",
                                    "four_streams_no_drops", "overload_drops_by_policy", "overload_p99_le_1s"}


def test_the_docs_page_renders_each_scenario(tmp_path):
    from tests.scripts import script_module

    results = tmp_path / "results"
    results.mkdir()
    (results / "live-h200.json").write_text(json.dumps({
        "date": "2026-01-02T03:04:05Z", "command": "python benchmarks/live_h200.py --engine e.engine",
        "environment": {"gpu": "NVIDIA H200", "tensorrt": "10.0"}, "settings": {"video": [1920, 1080], "fps": 30},
        "single": {"fps": 30.0, "source_fps": 30.0, "p99_latency_ms": 41.5, "dropped": 0, "published": 600},
        "four_streams": {"fps_each": [29.9, 30.0, 29.8, 30.0], "dropped_each": [0, 0, 1, 0], "dropped": 1,
                         "p99_latency_ms_each": [50, 51, 52, 53], "decoder": "pyav"},
        "capacity": {"fps": 140.0}, "overload": {"dropped": 4100, "p99_latency_ms": 120.0, "source_fps": 560.0,
                                                 "capacity_fps": 140.0, "frames_out": 1500}}))
    with script_module("scripts", "docs_benchmarks") as docs:
        page = docs.pages(results)["benchmarks/live.md"]
    assert "| 30 | 30 | 41.5 | 0 |" in page and "| stream 2 | 29.8 | 1 | 52 |" in page, page
    assert "| 560 | 140 | 1 500 | 4 100 | 120 |" in page and "GPU: NVIDIA H200" in page, page
