"""``benchmarks/serve_h200.py`` on the fake backend with a stand-in model: the GPU host gets one call for it, so
whatever step fails, the results JSON must come back (``--out`` made when missing, written before any log copy)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.test_anchor_script import WRAPPER, stand_in_model
from tests.serve.test_serve_triton import _skip_reason

pytestmark = pytest.mark.bench  # a benchmark harness's test: pytest -m bench

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "serve_h200.py"


def _run(tmp_path, *extra, timeout=240):
    stand_in_model(tmp_path / "m.onnx")
    wrapper = tmp_path / "wrapper.py"
    wrapper.write_text(WRAPPER.format(root=str(ROOT), script=str(SCRIPT)))
    return subprocess.run(
        [sys.executable, str(wrapper), "--onnx", str(tmp_path / "m.onnx"), "--cache", str(tmp_path / "cache"),
         "--bench-s", "0.2", "--duration-s", "0.5", "--client-procs", "1", "--soak-requests", "50",
         "--ready-timeout-s", "90", "--instances", "2", *extra],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def test_results_come_back_when_serving_fails_and_out_does_not_exist(tmp_path):
    out = tmp_path / "not" / "there" / "yet"
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    # the server is started without the fake backend (no --serve-with): it fails, as serving did on the GPU host;
    # --results lies under a file, so that write fails and the --out copy must still land
    proc = _run(tmp_path, "--out", str(out), "--results", str(blocker / "serve-h200.json"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((out / "serve-h200.json").read_text())
    assert "serve" in data["errors"] and "trtkit serve exited 1" in data["errors"]["serve"]
    assert not [k for k in data["errors"] if k == "run" or ".copy." in k], data["errors"]
    assert data["bench_streams2_ips"] > 0 and data["engine"]["profile"] == {"min": 1, "opt": 32, "max": 32}
    assert "error:" in (out / "serve-gpu0.out").read_text()  # the server's own output, copied after the JSON
    assert f"could not write {blocker / 'serve-h200.json'}" in proc.stdout
    # perf_analyzer's anchor: found before any server starts, or skipped with why (not an error)
    if "PERF_ANALYZER" not in os.environ and shutil.which("perf_analyzer") is None:
        assert data["perf_analyzer"] == {"available": False, "reason": data["perf_analyzer"]["reason"]}
        assert "set PERF_ANALYZER" in data["perf_analyzer"]["reason"]


@pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))
def test_every_figure_on_a_fake_served_model(tmp_path):
    out = tmp_path / "out"
    proc = _run(tmp_path, "--out", str(out), "--results", str(tmp_path / "results" / "serve-h200.json"),
                "--serve-with", str(ROOT / "tests" / "serve" / "serve_child.py"),
                "--sweep", "model=null;client_procs=1,2 | model=null;client=wire:2 | model=null;stream_procs=1",
                "--sweep-s", "0.5",
                "--cli-procs", "2", "--cpus", "split", timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((out / "serve-h200.json").read_text())
    # --cpus split: the server on the first half of the CPUs, every client (trtkit bench's too) on the second
    cpus = sorted(os.sched_getaffinity(0))
    clients = cpus[len(cpus) // 2 :]
    assert data["cpus"] == "split" and data["settings"]["cpus"] == "split"
    assert json.loads((tmp_path / "results" / "serve-h200.json").read_text()) == data
    assert not data["errors"], data["errors"]
    for level in ("1", "8", "64"):
        figures = data["grpc"]["concurrency"][level]
        assert figures["failed"] == 0 and figures["requests"] > 0 and figures["ips"] > 0, (level, figures)
        assert figures["p50_ms"] <= figures["p99_ms"]
        # where the time went: the server's statistics over the level (its warm-up too) and the clients' CPU
        server = figures["server"]
        assert server["requests"] >= figures["requests"] and server["executions"] >= 1
        assert sum(server["batch_sizes"].values()) == server["executions"] and 0 < server["busy_frac"]
        assert server["per_request_us"]["compute_infer"] > 0 and 0 < figures["host_cpu_busy_frac"] <= 1
        assert len(figures["client_cpu_frac"]) == 1 and figures["client_cpu_frac"][0] > 0
        assert figures["client_cpus"] == clients
        # the server's CPU by thread: trtkit serve, tritonserver and the stubs under it
        threads = figures["server_threads"]
        assert threads["cores"] > 0 and "tritonserver" in threads["by_process"] and threads["busiest"][0]["cores"] > 0
    # what a user runs, trtkit bench --server --procs 2, on the same server at the highest level
    cli = data["cli_bench"]["concurrency"]["64"]
    assert cli["procs"] == 2 and cli["failed"] == 0 and cli["ips"] > 0 and data["cli_bench"]["exit_code"] == 0
    assert data["cli_bench"]["procs"] == 2 and "--procs 2" in data["cli_bench"]["command"]
    assert data["cli_bench"]["command"].startswith(f"taskset -c {','.join(map(str, clients))} ")
    assert data["soak"]["requests"] == 50 and data["soak"]["failed"] == 0
    assert data["grpc"]["shared_memory"] == "system" and data["level_s"] == 0.5  # inputs through shared memory
    assert data["ready_s"] >= 0 and data["stop"]["exit_code"] == 0 and data["instances"] == [0, 0]
    assert data["two_gpus"] == "not run: this host has 1 GPU(s)"
    # pytriton keeps Triton's statistics behind its token: said so, and its levels are measured all the same
    compared = data["compare"]["grpc"]["concurrency"]["64"]
    assert compared["ips"] > 0 and compared["server"].startswith("not read: HTTPError: HTTP Error 403")
    sweep = data["sweep"]
    # one server for all four: the later parts differ in their clients only (trtkit's wire client over two
    # connections; one process over a gRPC stream, last: Triton's Python backend can crash under streams)
    assert sweep["skipped"] == [] and [(r["model"], r["client_procs"], r["stream_procs"], r["client"])
                                       for r in sweep["runs"]] == [
        ("null", 1, 0, "tritonclient"), ("null", 2, 0, "tritonclient"), ("null", 1, 0, "wire:2"),
        ("null", 1, 1, "tritonclient")]
    assert sweep["runs"][2]["grpc"]["64"]["client"] == "wire:2"
    assert sweep["runs"][3]["grpc"]["64"]["stream_procs"] == 1
    for run in sweep["runs"]:
        level = run["grpc"]["64"]
        assert level["failed"] == 0 and level["ips"] > 0 and level["server"]["requests"] >= level["requests"], (
            run["client"], run["stream_procs"], level["errors"])
        assert len(level["client_cpu_frac"]) == run["client_procs"] and run["stop"]["exit_code"] == 0
        assert run["instances"] == 2 and run["delay_us"] == 100 and run["cpus"] == "split"  # the main run's layout
        assert level["client_cpus"] == clients
    assert {"serve-gpu0.out", "triton-gpu0.log"} <= {p.name for p in out.iterdir()}


def test_input_uint8_builds_an_nhwc_uint8_engine_and_benches_it(tmp_path):
    # requests of uint8 pixels carry a quarter of the float input's bytes; the bench figure is the same engine's
    out = tmp_path / "out"
    proc = _run(tmp_path, "--out", str(out), "--results", str(tmp_path / "r" / "serve-h200.json"), "--input-uint8",
                "--bench-batches", "4,8")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((out / "serve-h200.json").read_text())
    # the GPU alone at the batch sizes a server forms, with a stream per instance
    batches = data["bench_at_served_batches"]
    assert batches["streams"] == 2 and batches["4"] > 0 and batches["8"] > 0, data["errors"]
    assert data["engine"]["input"] == {"shape": [32, 224, 224, 3], "dtype": "uint8"}
    assert "-u8nhwc-" in data["engine"]["path"] and data["bench_streams2_ips"] > 0, data["errors"]
    assert data["settings"]["input_uint8"] is True


@pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))
def test_uint8_pixel_requests_are_served_at_every_level(tmp_path):
    # what the next GPU call measures: the same levels with requests of (224, 224, 3) uint8 pixels
    out = tmp_path / "out"
    proc = _run(tmp_path, "--out", str(out), "--results", str(tmp_path / "results" / "serve-h200.json"),
                "--serve-with", str(ROOT / "tests" / "serve" / "serve_child.py"), "--input-uint8", "--compare", "none",
                "--client-kind", "wire", "--cli-procs", "1", timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((out / "serve-h200.json").read_text())
    assert not data["errors"], data["errors"]
    assert data["engine"]["input"] == {"shape": [32, 224, 224, 3], "dtype": "uint8"}
    for level in ("1", "8", "64"):
        figures = data["grpc"]["concurrency"][level]
        assert figures["failed"] == 0 and figures["requests"] > 0 and figures["ips"] > 0, (level, figures)
    assert data["soak"]["requests"] == 50 and data["soak"]["failed"] == 0
    # every load through trtkit's wire client: the levels, the soak, and trtkit bench --client wire
    assert data["grpc"]["client"] == "wire" and data["grpc"]["concurrency"]["64"]["client"] == "wire"
    assert "--client wire --connections 1" in data["cli_bench"]["command"]
    assert data["cli_bench"]["concurrency"]["64"]["failed"] == 0 and data["cli_bench"]["client"] == "wire"
