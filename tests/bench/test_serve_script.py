"""``benchmarks/serve_h200.py`` on the fake backend with a stand-in model and the stand-in perf_analyzer
(tests/fakes/fake_perf_analyzer.py): the GPU host gets one call for it, so whatever step fails, the results JSON must
come back (``--out`` made when missing, written before any log copy)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.test_anchor_script import WRAPPER, stand_in_model
from tests.fakes import fake_perf_analyzer
from tests.serve.test_serve_triton import _skip_reason

pytestmark = pytest.mark.bench  # a benchmark harness's test: pytest -m bench

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "serve_h200.py"


def _run(tmp_path, *extra, timeout=240):
    stand_in_model(tmp_path / "m.onnx")
    wrapper = tmp_path / "wrapper.py"
    wrapper.write_text(WRAPPER.format(root=str(ROOT), script=str(SCRIPT)))
    env = {**os.environ, "FAKE_PA_ARGV": str(tmp_path / "argv.jsonl")}
    fake_perf_analyzer.install(tmp_path, env)
    return subprocess.run(
        [sys.executable, str(wrapper), "--onnx", str(tmp_path / "m.onnx"), "--cache", str(tmp_path / "cache"),
         "--bench-s", "0.2", "--window-s", "0.5", "--soak-requests", "50", "--ready-timeout-s", "90",
         "--instances", "2", *extra],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)


def test_results_come_back_when_serving_fails_and_out_does_not_exist(tmp_path):
    out = tmp_path / "not" / "there" / "yet"
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    # the server is started without the fake backend (no --serve-with): it fails, as serving did on the GPU host;
    # --results lies under a file, so that write fails and the --out copy must still land
    proc = _run(tmp_path, "--out", str(out), "--results", str(blocker / "serve-h200.json"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((out / "serve-h200.json").read_text())
    assert "trtkit serve exited 1" in data["errors"]["python"] and "trtkit serve exited 1" in data["errors"]["tensorrt"]
    assert not [k for k in data["errors"] if k == "run" or ".copy." in k], data["errors"]
    assert data["bench_streams2_ips"] > 0 and data["engine"]["profile"] == {"min": 1, "opt": 32, "max": 32}
    assert data["perf_analyzer"]["version"] == "2.60.0"  # found before any server starts
    assert "error:" in (out / "serve-python.out").read_text()  # the server's own output, copied after the JSON
    assert f"could not write {blocker / 'serve-h200.json'}" in proc.stdout


def test_a_backend_that_would_not_end_before_the_deadline_is_not_run(tmp_path):
    out = tmp_path / "out"
    proc = _run(tmp_path, "--out", str(out), "--results", str(tmp_path / "r.json"), "--deadline-s", "1")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    servers = json.loads((out / "serve-h200.json").read_text())["servers"]
    assert servers["tensorrt"].startswith("not run: ") and servers["tensorrt"].endswith(" s left before the deadline")


def test_input_uint8_builds_an_nhwc_uint8_engine_and_benches_it(tmp_path):
    # requests of uint8 pixels carry a quarter of the float input's bytes; the bench figure is the same engine's
    out = tmp_path / "out"
    proc = _run(tmp_path, "--out", str(out), "--results", str(tmp_path / "r" / "serve-h200.json"), "--input-uint8",
                "--backends", "python")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((out / "serve-h200.json").read_text())
    assert data["engine"]["input"] == {"shape": [32, 224, 224, 3], "dtype": "uint8"}
    assert "-u8nhwc-" in data["engine"]["path"] and data["bench_streams2_ips"] > 0, data["errors"]
    assert data["settings"]["input_uint8"] is True and list(data["servers"]) == ["python"]


@pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))
def test_every_figure_on_a_fake_served_model(tmp_path):
    out = tmp_path / "out"
    proc = _run(tmp_path, "--out", str(out), "--results", str(tmp_path / "results" / "serve-h200.json"),
                "--serve-with", str(ROOT / "tests" / "serve" / "serve_child.py"), "--backends", "python", timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((out / "serve-h200.json").read_text())
    assert json.loads((tmp_path / "results" / "serve-h200.json").read_text()) == data
    assert not data["errors"], data["errors"]
    served = data["servers"]["python"]
    for level in ("1", "8", "64"):
        figures = served["grpc"][level]
        assert figures["error"] is None and figures["ips"] == 300 * int(level) + 0.5, (level, figures)
        assert figures["p50_ms"] <= figures["p99_ms"] and figures["server_us"]["compute_infer"] > 0
    assert served["c64_vs_bench_streams2"] == round(19200.5 / data["bench_streams2_ips"], 3)
    soak = served["soak"]
    assert soak["requests"] == 50 and soak["error"] is None and "leak_bytes_device" in soak
    assert served["ready_s"] >= 0 and served["stop"]["exit_code"] == 0 and served["instances"] == [0, 0]
    calls = [json.loads(line) for line in (tmp_path / "argv.jsonl").read_text().splitlines()]
    assert [c[c.index("--concurrency-range") + 1] for c in calls] == ["1:1", "8:8", "64:64", "64:64"]
    assert calls[-1][calls[-1].index("--request-count") + 1] == "50"  # the soak: one measurement of its requests
    assert all(c[c.index("-u") + 1] == "127.0.0.1:18001" and c[c.index("--shared-memory") + 1] == "system"
               for c in calls)
    assert {"serve-python.out", "triton-python.log"} <= {p.name for p in out.iterdir()}
