"""``benchmarks/serve_h200.py``'s diagnosis: ``--sweep`` parsing and grouping, Triton's statistics read into where the
time went (a canned stats answer of Triton 2.51), the sweep skipping what does not fit, and the null model
(:mod:`trtkit.serve.stub_model`) answering zeros on a real Triton where the serve extra is installed."""

from __future__ import annotations

import copy
import importlib
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest

from tests.serve.conftest import tiny_engine_bytes
from tests.serve.net import free_ports
from tests.serve.test_serve_triton import _skip_reason
from trtkit.errors import ServeError
from trtkit.serve.stub_model import NULL_MODEL_ENV, null_outputs

pytestmark = pytest.mark.bench  # a benchmark harness's test: pytest -m bench

ROOT = Path(__file__).resolve().parents[2]
CHILD = ROOT / "tests" / "serve" / "serve_child.py"


def _script():
    return importlib.import_module("benchmarks.serve_h200")  # the repository root is on sys.path


# Triton 2.51's answer to GET /v2/models/<m>/stats (its model_stats entry) after 2 requests of 1 and 3 rows; _after()
# is a later reading with 40 more requests of one row, run as 5 executions of batch 8
BEFORE = {
    "name": "resnet50",
    "version": "1",
    "inference_count": 4,
    "execution_count": 2,
    "inference_stats": {
        "success": {"count": 2, "ns": 72200037},
        "fail": {"count": 0, "ns": 0},
        "queue": {"count": 2, "ns": 566695},
        "compute_input": {"count": 2, "ns": 189932},
        "compute_infer": {"count": 2, "ns": 70400384},
        "compute_output": {"count": 2, "ns": 1035194},
    },
    "batch_stats": [
        {"batch_size": 1, "compute_input": {"count": 1, "ns": 167709}, "compute_infer": {"count": 1, "ns": 41585072},
         "compute_output": {"count": 1, "ns": 598156}},
        {"batch_size": 3, "compute_input": {"count": 1, "ns": 22223}, "compute_infer": {"count": 1, "ns": 28815312},
         "compute_output": {"count": 1, "ns": 437038}},
    ],
}


def _after():
    after = copy.deepcopy(BEFORE)
    after["inference_count"] += 40  # 40 requests of one row, in 5 executions of 8
    after["execution_count"] += 5
    stats = after["inference_stats"]
    for stage, ns_per_request in (("queue", 100_000), ("compute_input", 20_000), ("compute_infer", 2_000_000),
                                  ("compute_output", 30_000), ("success", 2_200_000)):
        stats[stage]["count"] += 40
        stats[stage]["ns"] += 40 * ns_per_request
    after["batch_stats"].append({"batch_size": 8, "compute_input": {"count": 5, "ns": 5 * 20_000},
                                 "compute_infer": {"count": 5, "ns": 5 * 2_000_000},
                                 "compute_output": {"count": 5, "ns": 5 * 30_000}})
    return after


def test_stats_delta_says_per_request_stages_batch_sizes_and_how_busy_the_instances_were():
    delta = _script().stats_delta(BEFORE, _after(), wall_s=0.1, instances=2)
    assert delta["requests"] == 40 and delta["executions"] == 5 and delta["inferences"] == 40
    assert delta["mean_batch"] == 8.0
    assert delta["batch_sizes"] == {"8": 5}  # only what ran between the readings
    assert delta["per_request_us"] == {"queue": 100.0, "compute_input": 20.0, "compute_infer": 2000.0,
                                       "compute_output": 30.0}
    # 5 executions x 2.05 ms of compute over 0.1 s x 2 instances
    assert delta["busy_frac"] == pytest.approx(5 * 2.05e-3 / 0.2, abs=1e-3)


def test_stats_delta_of_an_idle_level_has_no_means():
    delta = _script().stats_delta(BEFORE, copy.deepcopy(BEFORE), wall_s=1.0, instances=4)
    assert delta["requests"] == 0 and delta["mean_batch"] is None and delta["batch_sizes"] == {}
    assert set(delta["per_request_us"].values()) == {None} and delta["busy_frac"] == 0.0


def test_sweep_is_every_combination_first_key_outermost_and_parts_follow_each_other():
    parse = _script().parse_sweep
    assert parse("instances=4,8;client_procs=4,8") == [
        {"instances": 4, "client_procs": 4}, {"instances": 4, "client_procs": 8},
        {"instances": 8, "client_procs": 4}, {"instances": 8, "client_procs": 8}]
    assert parse(" model=null ; client_procs=4 | delay_us=0,1000 ") == [
        {"model": "null", "client_procs": 4}, {"delay_us": 0}, {"delay_us": 1000}]


@pytest.mark.parametrize("text, says", [
    ("", "empty"),
    ("gpus=0,1", "KEY one of instances, delay_us, client_procs, model, backend, graphs, shm, trt, grpc_pool, "
                 "stream_procs, preferred, nice, cpus"),
    ("grpc_pool=-1", "0 or more"),
    ("stream_procs=-1", "0 or more"),
    ("instances", "KEY=V1,V2"),
    ("instances=4;instances=8", "given twice"),
    ("instances=", "no values"),
    ("instances=four", "not whole numbers"),
    ("instances=0", "1 or more"),
    ("delay_us=-1", "0 or more"),
    ("model=fast", "runner or null"),
    ("backend=onnx", "stub or pytriton or tensorrt"),
    ("graphs=some", "every or triton"),
    ("shm=posix", "system or cuda or none"),
    ("trt=busy_wait_events+spin", "'trt': 'busy_wait_events\\+spin': .*spin not known here"),
    ("preferred=8-64", "'preferred': '8-64': sizes above the engine's max batch 32"),
    ("preferred=16+x", "'preferred': '16\\+x': 'x' is not a batch size"),
    ("nice=-1", "0 or more"),
    ("cpus=half", "'cpus': 'half' \\(give all, split .* or split:N"),
    ("cpus=split:0", "'cpus': 'split:0'"),
    ("cpus=split:x", "'cpus': 'split:x'"),
    ("client=grpcio", "'client': 'grpcio' \\(give tritonclient, wire or wire:N"),
    ("client=wire:0", "'client': 'wire:0'"),
    ("instances=4 | ;", "empty"),
])
def test_a_bad_sweep_is_refused_naming_what_is_wrong(text, says):
    with pytest.raises(ValueError, match=says):
        _script().parse_sweep(text)


def test_bad_sweep_on_the_command_line_exits_2_before_anything_runs(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "serve_h200.py"), "--sweep", "instances=0",
                           "--results", str(tmp_path / "r.json")], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2 and "instances" in proc.stderr and "1 or more" in proc.stderr
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("extra, says", [
    (["--grpc-allocation-pool", "-1"], "--grpc-allocation-pool -1: give 1 or more request states"),
    (["--client-procs", "4", "--stream-procs", "5"], "--stream-procs 5: give 0 to --client-procs (4) processes"),
    (["--stream-procs", "-1"], "--stream-procs -1: give 0 to --client-procs"),
    (["--bench-batches", "4,64"], "--bench-batches 4,64: give batch sizes from 1 to 32"),
    (["--bench-batches", "four"], "--bench-batches four: give batch sizes from 1 to 32"),
    (["--client-nice", "20"], "--client-nice 20: give 0 to 19"),
    (["--cli-procs", "-1"], "--cli-procs -1: give 1 or more client processes, or 0 for none"),
    (["--preferred-batch", "8-40"], "--preferred-batch 8-40: sizes above the engine's max batch 32"),
    (["--opt-batch", "33"], "--opt-batch 33: give a batch from 1 to 32"),
    (["--opt-batch", "0"], "--opt-batch 0: give a batch from 1 to 32"),
    (["--cpus", "half"], "--cpus half: give all, split (the server on half of the CPUs) or split:N"),
    (["--client-kind", "wire:x"], "--client-kind wire:x: give tritonclient, wire or wire:N"),
    # more CPUs than the host has, in the main run or a sweep: refused before the engine is built
    (["--cpus", "split:4096"], "cpus=split:4096 needs 4097 or more CPUs"),
    (["--sweep", "cpus=all,split:4096"], "cpus=split:4096 needs 4097 or more CPUs"),
])
def test_bad_client_or_front_end_settings_exit_2_before_anything_runs(tmp_path, extra, says):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "serve_h200.py"), *extra,
                           "--results", str(tmp_path / "r.json")], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2 and says in proc.stderr
    assert not (tmp_path / "r.json").exists()


def _args(**over):
    base = dict(instances=4, max_queue_delay_us=100, client_procs=4, sweep="", sweep_levels="64", sweep_s=3.0,
                port=18000, deadline_s=540.0, ready_timeout_s=60, backend="stub", shared_memory="system", out=None,
                graph_batches="every", tensorrt_options="", grpc_allocation_pool=0, stream_procs=0,
                preferred_batch="", client_nice=0, cpus="all", client_kind="tritonclient",
                sweep_perf_analyzer=False,
                perf_analyzer="on", perf_analyzer_levels="1,8,64", perf_analyzer_ms=3500, duration_s=8.0, soak_s=60.0,
                compare_levels_s=0.0, cli_procs=0)
    return types.SimpleNamespace(**{**base, **over})


def test_sweep_groups_share_a_server_between_client_process_counts():
    m = _script()
    groups = m.sweep_groups(m.parse_sweep("model=null,runner;client_procs=4,8 | instances=8"), _args())
    same = {"delay_us": 100, "graphs": "every", "trt": "none", "grpc_pool": 0, "preferred": "none", "cpus": "all"}
    four, eight = ({"client_procs": 4, "shm": "system", "stream_procs": 0, "nice": 0, "client": "tritonclient"},
                   {"client_procs": 8, "shm": "system", "stream_procs": 0, "nice": 0, "client": "tritonclient"})
    assert groups == [
        ({"model": "null", "backend": "stub", "instances": 4, **same}, [four, eight]),
        ({"model": "runner", "backend": "stub", "instances": 4, **same}, [four, eight]),
        ({"model": "runner", "backend": "stub", "instances": 8, **same}, [four]),  # the main run's procs and shm
    ]
    groups = m.sweep_groups(m.parse_sweep("backend=tensorrt;instances=1,2;graphs=every,triton"), _args())
    assert [(g["backend"], g["instances"], g["graphs"]) for g, _ in groups] == [
        ("tensorrt", 1, "every"), ("tensorrt", 1, "triton"), ("tensorrt", 2, "every"), ("tensorrt", 2, "triton")]
    # how the clients send inputs shares a server, as their process count does
    groups = m.sweep_groups(m.parse_sweep("instances=3;shm=system,cuda"), _args(shared_memory="cuda"))
    assert [clients for _, clients in groups] == [[four, {**four, "shm": "cuda"}]]
    # so does how many client processes send over a gRPC stream
    groups = m.sweep_groups(m.parse_sweep("stream_procs=0,4"), _args())
    assert [clients for _, clients in groups] == [[four, {**four, "stream_procs": 4}]]
    # each set of the tensorrt backend's options is a server of its own
    groups = m.sweep_groups(m.parse_sweep("trt=none,busy_wait_events+eager_batching"), _args(backend="tensorrt"))
    assert [g["trt"] for g, _ in groups] == ["none", "busy_wait_events+eager_batching"]
    # trtkit serve takes them comma-separated (a '+' there once stopped the server of that setting on the H200)
    assert m.tensorrt_options_flag("busy_wait_events+eager_batching+blocking") == [
        "--tensorrt-options", "busy_wait_events,eager_batching,blocking"]
    assert m.tensorrt_options_flag("none") == [] == m.tensorrt_options_flag(None)
    # each gRPC allocation pool is a server of its own (0: Triton's default)
    groups = m.sweep_groups(m.parse_sweep("grpc_pool=0,64"), _args(backend="tensorrt"))
    assert [g["grpc_pool"] for g, _ in groups] == [0, 64]
    # each set of preferred batch sizes is a server of its own; the clients' nice value shares one
    groups = m.sweep_groups(m.parse_sweep("preferred=none,8-32,16+32;nice=0,10"), _args(backend="tensorrt"))
    assert [(g["preferred"], [c["nice"] for c in clients]) for g, clients in groups] == [
        ("none", [0, 10]), ("8-32", [0, 10]), ("16+32", [0, 10])]
    assert m.preferred_flag("16+32") == ["--preferred-batch", "16,32"] and m.preferred_flag("none") == []
    # each CPU layout is a server of its own
    groups = m.sweep_groups(m.parse_sweep("cpus=all,split,split:6"), _args(backend="tensorrt"))
    assert [g["cpus"] for g, _ in groups] == ["all", "split", "split:6"]
    # the main run's layout (--cpus) is the sweep's default
    groups = m.sweep_groups(m.parse_sweep("instances=2"), _args(cpus="split:6"))
    assert [g["cpus"] for g, _ in groups] == ["split:6"]


def test_cpus_split_keeps_the_server_and_the_clients_on_halves_of_the_cpus_and_the_children_there(monkeypatch):
    m = _script()
    assert m.cpu_halves("all") == (None, None) and m.pin(None) is None
    monkeypatch.setattr(m.os, "sched_getaffinity", lambda pid: {3, 0, 2, 1, 5})
    assert m.cpu_halves("split") == ((0, 1), (2, 3, 5))
    assert m.cpu_halves("split:3") == ((0, 1, 2), (3, 5))  # split:N: the server on the first N
    with pytest.raises(RuntimeError, match="cpus=split:5 needs 6 or more CPUs .*may use 5"):
        m.cpu_halves("split:5")
    monkeypatch.setattr(m.os, "sched_getaffinity", lambda pid: {7})
    with pytest.raises(RuntimeError, match="cpus=split needs 2 or more CPUs .*may use 1"):
        m.cpu_halves("split")
    monkeypatch.undo()
    first = min(os.sched_getaffinity(0))  # a child started with pin() runs on those CPUs only
    out = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                         preexec_fn=m.pin((first,)), capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == f"[{first}]"


def test_a_sweep_that_cannot_end_before_the_deadline_starts_no_server_and_names_each_setting(tmp_path, monkeypatch):
    m = _script()
    started = []
    monkeypatch.setattr(m, "ServeProcess", lambda *a, **k: started.append(k))
    args = _args(sweep="instances=4,8;client_procs=4,8", deadline_s=(time.monotonic() - m.STARTED) + 30)
    out = m.run_sweep(Path("unused.engine"), args, tmp_path, {"errors": {}}, start_s=6.0, stop_s=8.0)
    assert not started and out["runs"] == []
    assert [(s["instances"], s["client_procs"]) for s in out["skipped"]] == [(4, 4), (4, 8), (8, 4), (8, 8)]
    assert all("left before the deadline" in s["why"] for s in out["skipped"])


def test_null_outputs_are_zeros_of_each_output_with_max_batch_rows():
    config = {"max_batch_size": 32, "output": [{"name": "logits", "data_type": "TYPE_FP16", "dims": ["1000"]},
                                               {"name": "index", "data_type": "TYPE_INT32", "dims": [1]}]}
    zeros = null_outputs(config)
    assert zeros["logits"].shape == (32, 1000) and zeros["logits"].dtype == np.float16 and not zeros["logits"].any()
    assert zeros["index"].shape == (32, 1) and zeros["index"].dtype == np.int32
    assert null_outputs({"output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [4]}]})["y"].shape == (4,)
    with pytest.raises(ServeError, match="'y'.*fixed dims"):
        null_outputs({"max_batch_size": 4, "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [-1]}]})
    with pytest.raises(ServeError, match="'s'.*TYPE_STRING"):
        null_outputs({"max_batch_size": 4, "output": [{"name": "s", "data_type": "TYPE_STRING", "dims": [1]}]})


@pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))
def test_null_model_answers_zeros_on_triton_and_its_stats_read_back(tmp_path):
    """The stubs of a null-model server make no runner (here every runner would fail to load: the model still
    loads), answer each request with zeros of its rows, and the statistics endpoint reads back through the script's
    parser."""
    import tritonclient.grpc as grpcclient

    engine = tmp_path / "tiny.engine"
    engine.write_bytes(tiny_engine_bytes())
    http, grpc, metrics = free_ports(3)
    status = tmp_path / "status.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), NULL_MODEL_ENV: "1", "TRTKIT_FAKE_STUB_FAIL": "tiny"}
    with open(tmp_path / "serve.out", "wb") as log:
        proc = subprocess.Popen([sys.executable, str(CHILD), "serve", str(engine), "--instances", "2", "--http-port",
                                 str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics), "--json",
                                 str(status)], stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 90
        while not status.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert status.exists(), (tmp_path / "serve.out").read_text()
        m = _script()
        before = m.model_stats(f"http://127.0.0.1:{http}", "tiny")
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc}")
        for rows in (1, 3):
            x = np.ones((rows, 3, 8, 8), np.float32)
            item = grpcclient.InferInput("x", list(x.shape), "FP32")
            item.set_data_from_numpy(x)
            y = client.infer("tiny", [item]).as_numpy("y")
            assert y.shape == (rows, 4, 1, 1) and y.dtype == np.float32 and not y.any()
        client.close()
        delta = m.stats_delta(before, m.model_stats(f"http://127.0.0.1:{http}", "tiny"), wall_s=1.0, instances=2)
        assert delta["requests"] == 2 and delta["inferences"] == 4 and delta["executions"] == 2
        assert delta["batch_sizes"] == {"1": 1, "3": 1} and delta["per_request_us"]["compute_infer"] > 0
    finally:
        proc.terminate()
        proc.wait(timeout=60)


class _Server:
    """Stands in for serve_h200.ServeProcess: ready at once, stops at once."""

    def __init__(self, *args, **kwargs):
        self.kwargs, self.log_file = kwargs, Path("no-such.log")

    def files(self):
        return (self.log_file,)

    def wait_ready(self, timeout_s):
        return {"ready_s": 0.5}

    def stop(self):
        return {"exit_code": 0, "exit_s": 0.0}


def test_a_sweep_server_with_more_instances_is_given_a_longer_stop_and_skipped_when_that_does_not_fit(tmp_path,
                                                                                                    monkeypatch):
    m = _script()
    servers = []
    monkeypatch.setattr(m, "ServeProcess", lambda *a, **k: servers.append(_Server(*a, **k)) or servers[-1])
    monkeypatch.setattr(m, "measured_level", lambda server, url, c, n, *rest: {"ips": 1.0, "client_procs": n})
    warmed = []
    monkeypatch.setattr(m, "warm_up",
                        lambda url, c, client, workdir, cpus=None: warmed.append((c, client["client_procs"])))
    # 21 s left after the stop reserve: 4 instances need 1 + 3.5 (the warm-up load) + 10 + 3.5 (one level);
    # 8 instances' stop is taken as 20 s
    args = _args(sweep="instances=4,8", sweep_s=1.0, deadline_s=(time.monotonic() - m.STARTED) + m.STOP_RESERVE_S + 21)
    out = m.run_sweep(Path("unused.engine"), args, tmp_path, {"errors": {}}, start_s=1.0, stop_s=10.0)
    assert [s.kwargs["instances"] for s in servers] == [4]
    assert warmed == [(64, 4)]  # the server that ran was loaded once, unmeasured, before its level
    assert [(r["instances"], r["grpc"]["64"], r["ready_s"], r["stop"]["exit_code"]) for r in out["runs"]] == [
        (4, {"ips": 1.0, "client_procs": 4}, 0.5, 0)]
    assert [(s["instances"], s["client_procs"]) for s in out["skipped"]] == [(8, 4)]


def test_a_client_process_with_no_answer_is_merged_with_its_errors_not_a_key_error(tmp_path, monkeypatch):
    """A level where one client process got no answer at all (the server hung on the H200 with one of the TensorRT
    backend's options) still merges: the other's latencies, every request counted, that process's errors named."""
    import json

    m = _script()
    parts = iter([
        {"ips": 100.0, "requests": 50, "failed": 0, "wall_s": 0.5, "cpu_frac": 0.5, "cpu_s": 0.25, "errors": [],
         "latencies_ms": [1.0, 2.0, 3.0]},
        {"ips": 0.0, "requests": 0, "failed": 12, "wall_s": 60.0, "cpu_frac": 0.1, "cpu_s": 6.0,
         "errors": ["DEADLINE_EXCEEDED: no answer in 60 s"]},
    ])

    class Client:
        def __init__(self, argv, cwd, preexec_fn=None):
            Path(argv[8]).write_text(json.dumps(next(parts)))

        def wait(self, timeout):
            return 0

    monkeypatch.setattr(m.subprocess, "Popen", Client)
    merged = m.load("127.0.0.1:1", 64, 2, 1.0, 1000, tmp_path)
    assert merged["ips"] == 100.0 and merged["failed"] == 12 and merged["p50_ms"] == 2.0
    assert merged["errors"] == ["DEADLINE_EXCEEDED: no answer in 60 s"]


class _Running:
    def poll(self):
        return None


def test_client_processes_start_their_load_together_once_all_are_ready(tmp_path):
    import threading

    m = _script()
    outs = [tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"]
    Path(str(outs[0]) + ".ready").touch()
    outs[2].write_text("{}")  # one that has already ended (its result written) is not waited for
    go = tmp_path / "go"
    timer = threading.Timer(0.3, lambda: (go.exists() and Path(tmp_path / "early").touch(),
                                          Path(str(outs[1]) + ".ready").touch()))
    timer.start()
    took = m.start_together([_Running()] * 3, outs, go, timeout_s=30)
    timer.join()
    assert go.exists() and not (tmp_path / "early").exists() and 0.25 <= took < 30
    # a client that never gets ready holds the others no longer than the timeout
    go2 = tmp_path / "go2"
    assert m.start_together([_Running()], [tmp_path / "never.json"], go2, timeout_s=0.2) >= 0.2 and go2.exists()


def test_client_processes_are_told_to_stream_or_call_and_the_merge_counts_the_streams(tmp_path, monkeypatch):
    import json

    m = _script()
    modes = []

    class Client:
        def __init__(self, argv, cwd, preexec_fn=None):
            modes.append(argv[-1])
            Path(argv[8]).write_text(json.dumps({"ips": 10.0, "requests": 5, "failed": 0, "wall_s": 0.5,
                                                 "cpu_frac": 0.5, "cpu_s": 0.25, "errors": [],
                                                 "latencies_ms": [1.0]}))

        def wait(self, timeout):
            return 0

    monkeypatch.setattr(m.subprocess, "Popen", Client)
    merged = m.load("127.0.0.1:1", 64, 3, 1.0, 1000, tmp_path, "cuda", stream_procs=1)
    assert modes == ["stream", "unary", "unary"] and merged["stream_procs"] == 1 and merged["client_procs"] == 3


def test_server_threads_name_the_busiest_threads_of_the_server_and_the_processes_under_it():
    m = _script()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        deadline = time.monotonic() + 10
        while child.pid not in m.descendants(os.getpid()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert m.descendants(os.getpid())[0] == os.getpid() and child.pid in m.descendants(os.getpid())
        found = m.server_threads(os.getpid())
        assert (os.getpid(), str(os.getpid())) in found and any(pid == child.pid for pid, _ in found)
    finally:
        child.kill()
        child.wait()
    # two handler threads at a core each, the rest nearly idle: the busiest come first, by process
    before = {(1, "11"): ("tritonserver", "tritonserver", 10.0), (1, "12"): ("tritonserver", "tritonserver", 10.0),
              (1, "13"): ("tritonserver", "grpc_global_tim", 1.0), (2, "21"): ("triton_python_b", "stub", 0.0)}
    after = {(1, "11"): ("tritonserver", "tritonserver", 12.0), (1, "12"): ("tritonserver", "tritonserver", 11.9),
             (1, "13"): ("tritonserver", "grpc_global_tim", 1.1), (2, "21"): ("triton_python_b", "stub", 0.5),
             (1, "14"): ("tritonserver", "new", 0.2)}  # a thread that started during the level counts from 0
    got = m.threads_delta(before, after, wall_s=2.0, top=3)
    assert got["cores"] == pytest.approx((2.0 + 1.9 + 0.1 + 0.5 + 0.2) / 2)
    assert got["by_process"] == {"tritonserver": pytest.approx(2.1), "triton_python_b": 0.25}
    assert [(t["tid"], t["cores"]) for t in got["busiest"]] == [(11, 1.0), (12, 0.95), (21, 0.25)]
    assert m.threads_delta(before, {}, wall_s=2.0) is None  # the server was gone
