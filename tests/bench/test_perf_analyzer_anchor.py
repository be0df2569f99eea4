"""perf_analyzer as ``benchmarks/serve_h200.py``'s anchor, on a fake binary: perf_analyzer 2.51's CSV read right (its
header as report_writer.cc of r24.10 writes it), the command line of one level, a level that fails or hangs recorded
without stopping the others, the anchor skipped with a reason where there is no binary, and the main run and the sweep
reaching it against a stand-in server."""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from pathlib import Path

import pytest

from tests.bench.test_serve_diagnosis import _args

pytestmark = pytest.mark.bench  # a benchmark harness's test: pytest -m bench

ROOT = Path(__file__).resolve().parents[2]

# perf_analyzer 2.51, --concurrency-range 64:64 against a Triton with the statistics extension, no response cache
CSV_SERVER = (
    "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,"
    "Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency\n"
    "64,19032.4,21,1210,480,130,1180,190,9,3190,3650,3850,4980\n"
)
# the same where the server has no statistics extension: no server columns
CSV_CLIENT_ONLY = (
    "Concurrency,Inferences/Second,Client Send,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency\n"
    "1,612.75,18,7,1571,1650,1702,2100\n"
)

# a stand-in perf_analyzer: writes perf_analyzer 2.51's CSV for its --concurrency-range to -f, and its arguments to
# $FAKE_PA_ARGV; at the concurrency in $FAKE_PA_FAIL it exits 99, in $FAKE_PA_UNSTABLE it writes no CSV, in
# $FAKE_PA_HANG it sleeps
FAKE = '''#!{python}
import json, os, sys, time
argv = sys.argv[1:]
if argv == ["--version"]:
    print("Perf Analyzer Version 2.51.0 (commit unknown)")
    sys.exit(0)
c = int(argv[argv.index("--concurrency-range") + 1].split(":")[0])
with open(os.environ["FAKE_PA_ARGV"], "a") as f:
    f.write(json.dumps(argv) + "\\n")
print(" Successfully read data for 1 stream/streams with 1 step/steps.")
if str(c) == os.environ.get("FAKE_PA_FAIL"):
    print("error: failed to get model metadata: failed to connect to all addresses", file=sys.stderr)
    sys.exit(99)
if str(c) == os.environ.get("FAKE_PA_UNSTABLE"):
    print("Failed to obtain stable measurement within 6 measurement windows for concurrency " + str(c)
          + ". Please try to increase the --measurement-interval.", file=sys.stderr)
    sys.exit(0)
if str(c) == os.environ.get("FAKE_PA_HANG"):
    time.sleep(60)
header = ("Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,"
          "Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency")
with open(argv[argv.index("-f") + 1], "w") as f:
    f.write(header + "\\n" + f"{{c}},{{300 * c + 0.5}},20,1000,400,130,1180,190,9,{{1500 + 30 * c}},"
            f"{{1600 + 30 * c}},{{1700 + 30 * c}},{{2000 + 40 * c}}\\n")
'''


def _anchor():
    return importlib.import_module("benchmarks.perf_analyzer_anchor")  # the repository root is on sys.path


def _script():
    return importlib.import_module("benchmarks.serve_h200")


@pytest.fixture
def fake_pa(tmp_path, monkeypatch):
    """The stand-in perf_analyzer as $PERF_ANALYZER; returns the file its calls' arguments go to."""
    binary = tmp_path / "bin" / "perf_analyzer"
    binary.parent.mkdir()
    binary.write_text(FAKE.format(python=sys.executable))
    binary.chmod(0o755)
    argv = tmp_path / "argv.jsonl"
    monkeypatch.setenv("PERF_ANALYZER", str(binary))
    monkeypatch.setenv("FAKE_PA_ARGV", str(argv))
    for name in ("FAKE_PA_FAIL", "FAKE_PA_UNSTABLE", "FAKE_PA_HANG"):
        monkeypatch.delenv(name, raising=False)
    return argv


def test_the_csv_of_perf_analyzer_2_51_is_read_into_images_per_second_latencies_and_the_servers_share():
    pa = _anchor()
    assert pa.parse_csv(CSV_SERVER) == {
        "ips": 19032.4, "p50_ms": 3.19, "p90_ms": 3.65, "p95_ms": 3.85, "p99_ms": 4.98, "client_send_us": 21,
        "client_recv_us": 9, "server_us": {"queue": 480, "compute_input": 130, "compute_infer": 1180,
                                           "compute_output": 190, "network_misc": 1210}}
    assert pa.parse_csv(CSV_CLIENT_ONLY) == {"ips": 612.8, "p50_ms": 1.571, "p90_ms": 1.65, "p95_ms": 1.702,
                                             "p99_ms": 2.1, "client_send_us": 18, "client_recv_us": 7}


def test_a_csv_without_figures_or_columns_says_what_is_missing():
    pa = _anchor()
    with pytest.raises(ValueError, match="no measurement"):
        pa.parse_csv(CSV_SERVER.split("\n")[0] + "\n")
    with pytest.raises(ValueError, match="no column 'p99 latency'"):
        pa.parse_csv("Concurrency,Inferences/Second,Client Send,Client Recv,p50 latency,p90 latency,p95 latency\n"
                     "1,600,18,7,1571,1650,1702\n")


def test_no_binary_is_a_reason_not_an_error(tmp_path):
    pa = _anchor()
    binary, why = pa.find_binary({"PATH": str(tmp_path)})
    assert binary is None and "set PERF_ANALYZER" in why and "tritonclient-2.51.0" in why
    (tmp_path / "not-executable").write_text("")
    binary, why = pa.find_binary({"PERF_ANALYZER": str(tmp_path / "not-executable"), "PATH": ""})
    assert binary is None and why == f"PERF_ANALYZER={tmp_path / 'not-executable'} is not an executable file"
    on_path = tmp_path / "perf_analyzer"
    on_path.write_text("#!/bin/sh\n")
    on_path.chmod(0o755)
    assert pa.find_binary({"PATH": str(tmp_path)}) == (str(on_path), None)
    m = _script()
    assert m.perf_analyzer_setup(_args(perf_analyzer="off")) == {"available": False, "reason": "--perf-analyzer off"}


def test_each_level_is_one_grpc_run_of_the_models_own_input_and_a_failing_one_does_not_stop_the_next(tmp_path,
                                                                                                      fake_pa,
                                                                                                      monkeypatch):
    m = _script()
    monkeypatch.setenv("FAKE_PA_FAIL", "8")
    args = _args(shared_memory="cuda", deadline_s=(time.monotonic() - m.STARTED) + 600, out=str(tmp_path / "out"))
    (tmp_path / "out").mkdir()
    results = {"errors": {}, "perf_analyzer": m.perf_analyzer_setup(args)}
    assert results["perf_analyzer"]["available"] and results["perf_analyzer"]["version"] == "2.51.0"
    levels = m.perf_analyzer_levels(args, "127.0.0.1:18001", [1, 8, 64], tmp_path, results, "gpu0")
    assert levels["1"]["ips"] == 300.5 and levels["64"]["ips"] == 19200.5 and levels["64"]["p99_ms"] == 4.56
    assert levels["64"]["server_us"]["compute_infer"] == 1180
    assert levels["8"] == {"failed": results["errors"]["gpu0.perf_analyzer.c8"]}
    assert levels["8"]["failed"].startswith("perf_analyzer exited 99: ") and "failed to get model metadata" in \
        levels["8"]["failed"]
    assert list(results["errors"]) == ["gpu0.perf_analyzer.c8"]
    calls = [json.loads(line) for line in fake_pa.read_text().splitlines()]
    assert [c[c.index("--concurrency-range") + 1] for c in calls] == ["1:1", "8:8", "64:64"]
    flags = dict(zip(calls[2][::2], calls[2][1::2]))
    assert flags["-m"] == "resnet50" and flags["-u"] == "127.0.0.1:18001" and flags["-i"] == "grpc"
    assert flags["-b"] == "1" and flags["--input-data"] == "random" and flags["--shared-memory"] == "cuda"
    assert flags["--measurement-interval"] == "3500" and int(flags["--output-shared-memory-size"]) >= 4000
    # its CSV and output land beside the results, named after the run
    assert {"perf-analyzer-gpu0-c64.csv", "perf-analyzer-gpu0-c8.log"} <= {p.name for p in (tmp_path / "out").iterdir()}


def test_no_stable_measurement_or_a_hang_is_that_levels_failure(tmp_path, fake_pa, monkeypatch):
    pa = _anchor()
    monkeypatch.setenv("FAKE_PA_UNSTABLE", "8")
    monkeypatch.setenv("FAKE_PA_HANG", "64")
    binary = os.environ["PERF_ANALYZER"]
    unstable = pa.measure_level(binary, "resnet50", "127.0.0.1:1", 8, "none", 500, tmp_path, 30)
    assert "no measurement" in unstable["failed"] and "Failed to obtain stable measurement" in unstable["failed"]
    t0 = time.monotonic()
    hung = pa.measure_level(binary, "resnet50", "127.0.0.1:1", 64, "none", 500, tmp_path, 1.0)
    assert hung["failed"].startswith("no result in 1 s (killed)") and time.monotonic() - t0 < 20
    calls = [json.loads(line) for line in fake_pa.read_text().splitlines()]
    assert "--output-shared-memory-size" not in calls[0]  # no shared memory: no regions for the outputs either


def test_a_level_that_does_not_fit_before_the_deadline_is_not_run(tmp_path, fake_pa):
    m = _script()
    args = _args(deadline_s=(time.monotonic() - m.STARTED) + m.STOP_RESERVE_S + 5)
    results = {"errors": {}, "perf_analyzer": m.perf_analyzer_setup(args)}
    levels = m.perf_analyzer_levels(args, "127.0.0.1:1", [64], tmp_path, results, "gpu0")
    assert levels["64"].startswith("not run: ") and not fake_pa.exists() and not results["errors"]


class _Server:
    """Stands in for serve_h200.ServeProcess in the main run: ready at once, stops at once."""

    def __init__(self, *args, **kwargs):
        self.kwargs, self.instances = kwargs, 3
        self.output, self.log_file = Path("no-such.out"), Path("no-such.log")

    def files(self):
        return self.output, self.log_file

    def wait_ready(self, timeout_s):
        return {"ready_s": 0.5, "load_s": 1.0, "start_s": 2.0, "models": [{"instances": [0, 0, 0]}]}

    def stop(self, timeout_s=90):
        return {"exit_code": 0, "exit_s": 0.0}


def test_the_main_run_is_anchored_after_its_levels_and_before_the_soak(tmp_path, fake_pa, monkeypatch):
    m = _script()
    order = []
    monkeypatch.setattr(m, "ServeProcess", _Server)
    monkeypatch.setattr(m, "measured_level", lambda *a: order.append(f"c{a[2]}") or {"ips": 1000.0})
    monkeypatch.setattr(m, "soak_run", lambda *a: order.append("soak") or {"requests": 1})
    monkeypatch.setattr(m.perf_analyzer_anchor, "measure_level", lambda *a, **k: order.append(f"pa{a[3]}") or {
        "ips": 20000.0 if a[3] == 64 else 1.0})
    args = _args(shared_memory="cuda", deadline_s=(time.monotonic() - m.STARTED) + 600, soak_s=5.0,
                 perf_analyzer_levels="8,64")
    results = {"errors": {}, "perf_analyzer": m.perf_analyzer_setup(args), "bench_streams2_ips": 28000.0}
    one = m.serve_and_load(Path("unused.engine"), args, tmp_path, results, "0", "gpu0", (1, 64), True, anchor=True)
    assert order == ["c1", "c64", "pa8", "pa64", "soak"] and one["soak"] == {"requests": 1}
    m.anchor_ratio(results, one["grpc"]["concurrency"]["64"]["ips"])
    pa = results["perf_analyzer"]
    assert pa["concurrency"] == {"8": {"ips": 1.0}, "64": {"ips": 20000.0}} and pa["shared_memory"] == "cuda"
    assert pa["ratio_c64_to_bench"] == 0.714 and not results["errors"]
    # the comparison run is not anchored
    order.clear()
    m.serve_and_load(Path("unused.engine"), args, tmp_path, results, "0", "cmp", (64,), False, "stub")
    assert order == ["c64"]


def test_the_sweep_anchors_each_server_when_asked(tmp_path, fake_pa, monkeypatch):
    m = _script()
    monkeypatch.setattr(m, "ServeProcess", _Server)
    monkeypatch.setattr(m, "measured_level", lambda server, url, c, n, *rest: {"ips": 1.0})
    monkeypatch.setattr(m, "warm_up", lambda *a: None)
    args = _args(sweep="instances=3,4", sweep_s=0.5, sweep_perf_analyzer=True, perf_analyzer_ms=200,
                 deadline_s=(time.monotonic() - m.STARTED) + 600)
    results = {"errors": {}, "perf_analyzer": m.perf_analyzer_setup(args)}
    out = m.run_sweep(Path("unused.engine"), args, tmp_path, results, start_s=1.0, stop_s=1.0)
    # every run names its client: trtkit's (the main run's kind, tritonclient here) or perf_analyzer
    runs = [(r["instances"], r["client"], r["grpc"]["64"]["ips"]) for r in out["runs"]]
    assert runs == [(3, "tritonclient", 1.0), (3, "perf_analyzer", 19200.5), (4, "tritonclient", 1.0),
                    (4, "perf_analyzer", 19200.5)]
    assert not results["errors"] and out["skipped"] == []
