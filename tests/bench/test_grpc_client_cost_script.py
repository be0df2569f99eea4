"""``benchmarks/grpc_client_cost_cpu.py`` end to end on a real Triton (the serve extra's), a few requests each way."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.bench  # a benchmark harness's test: pytest -m bench

ROOT = Path(__file__).resolve().parents[2]


def test_the_client_cost_benchmark_measures_every_way(tmp_path):
    pytest.importorskip("pytriton", reason="the serve extra is not installed (pip install 'trtkit[serve]')")
    pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is not installed")
    from trtkit.errors import DependencyError
    from trtkit.serve.backend import backend_environment

    try:
        backend_environment()
    except DependencyError as exc:
        pytest.skip(f"Triton cannot serve from this environment: {exc}")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "grpc_client_cost_cpu.py"), "--requests", "40",
                           "--concurrency", "4", "--repeat", "1", "--results", str(tmp_path / "r" / "cost.json")],
                          capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    assert json.loads((tmp_path / "r" / "cost.json").read_text()) == data  # the results file, not the repo's
    assert set(data["runs"]) == {"infer", "raw_stub", "stream", "futures", "wire"} and data["requests"] == 40
    for runs in data["runs"].values():
        assert len(runs) == 1 and runs[0]["cpu_us_per_request"] > 0 and runs[0]["requests_per_s"] > 0
