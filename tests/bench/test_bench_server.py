"""``trtkit bench --server``: options refused before any load, no perf_analyzer or no server named in one line, and
perf_analyzer's command line and CSV report, with a stand-in perf_analyzer (tests/fakes/fake_perf_analyzer.py)."""

from __future__ import annotations

import json
import socket

import pytest

from tests.fakes import fake_perf_analyzer
from trtkit.cli import main as cli_main

# perf_analyzer's CSV where the server has no statistics extension: no server columns
CSV_CLIENT_ONLY = (
    "Concurrency,Inferences/Second,Client Send,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency\n"
    "1,612.75,18,7,1571,1650,1702,2100\n"
)


@pytest.fixture
def server():
    """A listening socket standing in for the server's port (perf_analyzer, faked, never talks to it)."""
    with socket.create_server(("127.0.0.1", 0)) as s:
        yield f"127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def fake_pa(tmp_path, monkeypatch):
    """The stand-in perf_analyzer as $PERF_ANALYZER; returns the file its calls' arguments go to."""
    fake_perf_analyzer.install(tmp_path, monkeypatch)
    argv = tmp_path / "argv.jsonl"
    monkeypatch.setenv("FAKE_PA_ARGV", str(argv))
    for name in ("FAKE_PA_FAIL", "FAKE_PA_UNSTABLE", "FAKE_PA_CSV"):
        monkeypatch.delenv(name, raising=False)
    return argv


def _calls(argv_file) -> list:
    return [json.loads(line) for line in argv_file.read_text().splitlines()]


def _flags(call: list) -> dict:
    """``{flag: value}`` of a perf_analyzer command line (a switch's value is None)."""
    out, i = {}, 0
    while i < len(call):
        if i + 1 < len(call) and not call[i + 1].startswith("-"):
            out[call[i]], i = call[i + 1], i + 2
        else:
            out[call[i]], i = None, i + 1
    return out


SERVER = ["bench", "--server", "127.0.0.1:1", "--model", "m"]


@pytest.mark.parametrize("args, says", [
    (["bench"], "nothing to benchmark: give an engine or ONNX model to benchmark, or --server URL --model NAME"),
    (["bench", "--server", "127.0.0.1:1"], "--server 127.0.0.1:1: give the served model as --model NAME"),
    (["bench", "m.engine", "--server", "127.0.0.1:1", "--model", "m"],
     "not an engine (m.engine): a server's load and an engine's benchmark are apart"),
    (["bench", "m.engine", "--grpc", "--concurrency", "8"],
     "--concurrency, --grpc: give an engine or ONNX model to benchmark, or --server URL --model NAME"),
    (["bench", "--model", "m"], "--model: give an engine or ONNX model to benchmark, or --server URL --model NAME"),
    ([*SERVER, "--streams", "2", "--no-cuda-graph", "--fp16", "--warmup-ms", "50"],
     "--fp16, --no-cuda-graph, --streams, --warmup-ms: options of an engine's benchmark, not of --server; leave them "
     "out"),
    ([*SERVER, "--concurrency", "1,x"], "--concurrency '1,x'"),
    ([*SERVER, "--concurrency", "0"], "levels of 1 or more"),
    ([*SERVER, "--iterations", "0"], "--iterations must be 1 or more, not 0"),
    ([*SERVER, "--batch", "0"], "--batch must be 1 or more, not 0"),
    ([*SERVER, "--duration-s", "0"], "--duration-s must be 1 ms or more, not 0"),
    ([*SERVER, "--shared-memory", "posix"], "--shared-memory must be one of 'none', 'system', 'cuda', not 'posix'"),
    ([*SERVER, "--streaming"],
     "--streaming needs gRPC (Triton streams inference over gRPC only): ask for gRPC, or leave --streaming off"),
    (["bench", "--server", "host:port", "--model", "m"], "server 'host:port': give HOST:PORT, e.g. localhost:8000"),
])
def test_refused_before_any_load(args, says, capsys, fake_pa):
    assert cli_main.main(args) == 2  # usage errors
    err = capsys.readouterr().err
    assert says in " ".join(err.split()) and len(err.strip().splitlines()) == 1, err
    assert not fake_pa.exists()  # perf_analyzer never ran


def test_no_perf_analyzer_is_one_line_naming_the_install(tmp_path, monkeypatch, capsys, server):
    monkeypatch.delenv("PERF_ANALYZER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no perf_analyzer there; the dev environment has no perf-analyzer wheel
    assert cli_main.main(["bench", "--server", server, "--model", "m"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and 'pip install "trtkit[serve]"' in err and "set PERF_ANALYZER" in err, err
    (tmp_path / "not-executable").write_text("")
    monkeypatch.setenv("PERF_ANALYZER", str(tmp_path / "not-executable"))
    assert cli_main.main(["bench", "--server", server, "--model", "m"]) == 1
    assert f"PERF_ANALYZER={tmp_path / 'not-executable'} is not an executable file" in capsys.readouterr().err


def test_no_server_answering_is_named(fake_pa, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        assert cli_main.main(["bench", "--server", f"127.0.0.1:{port}", "--model", "m", "--grpc"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"No server answers at 127.0.0.1:{port} (Connection refused)" in err, err
    assert "trtkit serve ENGINE" in err and not fake_pa.exists()


def test_each_level_is_one_perf_analyzer_run_and_its_csv_is_the_table_and_the_json(fake_pa, server, tmp_path,
                                                                                  capsys):
    out = tmp_path / "load.json"
    code = cli_main.main(["bench", "--server", f"grpc://{server}", "--model", "resnet50", "--grpc", "--streaming",
                          "--shared-memory", "cuda", "--batch", "4", "--concurrency", "1,8", "--duration-s", "0.5",
                          "--json", str(out)])
    assert code == 0, capsys.readouterr().err
    calls = _calls(fake_pa)
    assert [c[c.index("--concurrency-range") + 1] for c in calls] == ["1:1", "8:8"]
    flags = _flags(calls[1])
    assert flags["-m"] == "resnet50" and flags["-u"] == server and flags["-i"] == "grpc" and "--streaming" in flags
    assert flags["-b"] == "4" and flags["--shared-memory"] == "cuda" and flags["--input-data"] == "random"
    assert flags["--measurement-interval"] == "500" and "--request-count" not in flags and flags["-f"]
    data = json.loads(out.read_text())
    keys = ("server", "model", "protocol", "batch", "shared_memory", "window_s", "iterations")
    assert {k: data[k] for k in keys} == {
        "server": f"grpc://{server}", "model": "resnet50", "protocol": "gRPC stream", "batch": 4,
        "shared_memory": "cuda", "window_s": 0.5, "iterations": None}
    assert data["perf_analyzer"]["version"] == "2.60.0" and data["perf_analyzer"]["binary"].endswith("perf_analyzer")
    assert data["concurrency"]["8"] == {
        "concurrency": 8, "ips": 2400.5, "rps": 600.12, "p50_ms": 1.74, "p90_ms": 1.84, "p95_ms": 1.94,
        "p99_ms": 2.32, "server_us": {"queue": 400, "compute_input": 130, "compute_infer": 1180,
                                      "compute_output": 190, "network_misc": 1000}, "error": None}
    table = " ".join(capsys.readouterr().out.split())
    assert "trtkit bench resnet50 on" in table and "gRPC stream, batch 4, perf_analyzer" in table
    assert "8 2,400.5 1.740 1.840 2.320 400 1,180" in table


def test_http_by_default_and_a_request_count_instead_of_windows(fake_pa, server, tmp_path, monkeypatch, capsys):
    csv = tmp_path / "client-only.csv"
    csv.write_text(CSV_CLIENT_ONLY)
    monkeypatch.setenv("FAKE_PA_CSV", str(csv))
    out = tmp_path / "load.json"
    assert cli_main.main(["bench", "--server", f"http://{server}", "--model", "m", "--concurrency", "1",
                          "--iterations", "500", "--json", str(out)]) == 0
    (call,) = _calls(fake_pa)
    flags = _flags(call)
    assert flags["-i"] == "http" and flags["-u"] == server and flags["--request-count"] == "500"
    assert flags["--shared-memory"] == "none" and flags["-b"] == "1" and "--streaming" not in flags
    level = json.loads(out.read_text())["concurrency"]["1"]
    assert (level["ips"], level["p50_ms"], level["p95_ms"], level["p99_ms"]) == (612.75, 1.571, 1.702, 2.1)
    assert level["server_us"] == {}  # a server without statistics: none claimed


def test_a_level_perf_analyzer_cannot_measure_says_why_and_the_next_still_runs(fake_pa, server, monkeypatch,
                                                                               capsys):
    monkeypatch.setenv("FAKE_PA_FAIL", "8")
    monkeypatch.setenv("FAKE_PA_UNSTABLE", "64")
    assert cli_main.main(["bench", "--server", server, "--model", "m", "--concurrency", "1,8,64,128",
                          "--duration-s", "2"]) == 1
    assert [c[c.index("--concurrency-range") + 1] for c in _calls(fake_pa)] == ["1:1", "8:8", "64:64", "128:128"]
    out = " ".join(capsys.readouterr().out.split())
    assert "concurrency 8: perf_analyzer exited 99: " in out and "failed to connect to all addresses" in out
    assert ("concurrency 64: perf_analyzer exited 2: its 10 windows of 2 s never agreed within 10%; longer "
            "windows steady it (try windows of 4 s)") in out
    assert "concurrency 1:" not in out and "concurrency 128:" not in out


def test_the_perf_analyzer_wheels_binary_is_found_where_the_wheel_puts_it(tmp_path, monkeypatch):
    """The perf-analyzer wheel installs perf_analyzer/bin/perf_analyzer (its console script only wraps it)."""
    from trtkit.bench.serving import find_perf_analyzer

    binary = tmp_path / "site" / "perf_analyzer" / "bin" / "perf_analyzer"
    binary.parent.mkdir(parents=True)
    (binary.parents[1] / "__init__.py").write_text('__version__ = "2.60.0"\n')
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert find_perf_analyzer({"PATH": ""}) == str(binary)
    assert find_perf_analyzer({"PERF_ANALYZER": str(binary), "PATH": ""}) == str(binary)
