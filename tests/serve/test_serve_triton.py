"""``trtkit serve`` end to end on a real Triton (the pytriton wheel's) over the fake TensorRT and fake CUDA: HTTP and
gRPC round trips, Triton's health/ready/metrics endpoints, bad requests, an engine that fails to load, two fake GPUs,
and SIGTERM draining requests in flight. Servers bind 127.0.0.1; every wait is bounded."""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tests.serve.conftest import tiny_engine_bytes
from tests.serve.net import free_ports
from trtkit.errors import DependencyError, ServeError

CHILD = Path(__file__).with_name("serve_child.py")
ROOT = Path(__file__).parents[2]
START_TIMEOUT_S = 90


def _skip_reason() -> str | None:
    import importlib.util

    if importlib.util.find_spec("pytriton") is None:
        return ("the serve extra is not installed (pip install 'trtkit[serve]'; not in dev: nvidia-pytriton pins "
                "numpy<2)")
    try:
        import tritonclient.grpc  # noqa: F401
        import tritonclient.http  # noqa: F401

        from trtkit.serve.python_backend import backend_environment

        backend_environment()
    except ImportError as exc:
        return f"the serve extra is not installed (pip install 'trtkit[serve]'): {exc}"
    except DependencyError as exc:
        return f"Triton cannot serve from this environment: {exc}"
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))


def expected_outputs(engine: Path, x: np.ndarray) -> np.ndarray:
    from tests.fakes.fake_cuda import FakeCudart
    from tests.fakes.fake_trt import make_fake_trt
    from trtkit.runtime.cuda import Cuda
    from trtkit.runtime.runner import TrtRunner

    with TrtRunner(engine, trt=make_fake_trt("8.6.0"), cuda=Cuda(FakeCudart())) as runner:
        return runner.infer({"x": x})["y"]


class Child:
    """``trtkit serve ARGS`` in a child process; ``status`` is its --json once ready."""

    def __init__(self, tmp_path: Path, args: list, env: dict | None = None):
        self.status_path = tmp_path / "status.json"
        self.out_path = tmp_path / "serve.out"
        full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
        with open(self.out_path, "wb") as out:
            self.proc = subprocess.Popen([sys.executable, str(CHILD), "serve", *args, "--json",
                                          str(self.status_path)], stdout=out, stderr=subprocess.STDOUT, env=full_env)

    def output(self) -> str:
        return self.out_path.read_text(errors="replace")

    def wait_ready(self) -> dict:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.status_path.exists():
                return json.loads(self.status_path.read_text())
            if self.proc.poll() is not None:
                pytest.fail(f"trtkit serve exited {self.proc.returncode}:\n{self.output()}")
            time.sleep(0.2)
        self.kill()
        pytest.fail(f"trtkit serve not ready after {START_TIMEOUT_S} s:\n{self.output()}")

    def finish(self, timeout_s: float = 60) -> int:
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"trtkit serve still running {timeout_s} s after SIGTERM:\n{self.output()}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


@pytest.fixture
def engines(tmp_path):
    good = tmp_path / "tiny.engine"
    good.write_bytes(tiny_engine_bytes())
    junk = tmp_path / "junk.engine"
    junk.write_bytes(b"this is not an engine")
    return good, junk


def test_serve_http_grpc_two_gpus_bad_requests_and_sigterm_drain(tmp_path, engines):
    import tritonclient.grpc as tgrpc
    import tritonclient.http as thttp
    from tritonclient.utils import InferenceServerException

    good, junk = engines
    http_port, grpc_port, metrics_port = free_ports(3)
    stubs_report = tmp_path / "stubs.jsonl"  # the runners live in the Python backend's stubs: each reports there
    child = Child(tmp_path, [str(good), str(junk), "--instances", "2", "--gpus", "0,1", "--http-port",
                             str(http_port), "--grpc-port", str(grpc_port), "--metrics-port", str(metrics_port),
                             "--max-queue-delay-us", "500"],
                  env={"TRTKIT_FAKE_GPUS": "2", "TRTKIT_FAKE_INFER_S": "0.2", "TRTKIT_FAKE_REPORT": str(stubs_report)})
    try:
        status = child.wait_ready()
        assert [m["name"] for m in status["models"]] == ["tiny"]
        assert status["models"][0]["instances"] == [0, 0, 1, 1] and status["models"][0]["max_batch"] == 4
        (failed,) = status["failed"]
        assert failed["engine"] == str(junk) and "could not be deserialized" in failed["reason"]
        assert f"not served {junk}" in " ".join(child.output().split())

        x = np.random.default_rng(0).standard_normal((3, 3, 8, 8)).astype(np.float32)
        want = expected_outputs(good, x)
        http = thttp.InferenceServerClient(f"127.0.0.1:{http_port}", network_timeout=30)
        assert http.is_server_live() and http.is_server_ready() and http.is_model_ready("tiny")
        inp = thttp.InferInput("x", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        np.testing.assert_allclose(http.infer("tiny", [inp]).as_numpy("y"), want, rtol=1e-6)
        grpc = tgrpc.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        ginp = tgrpc.InferInput("x", list(x[:1].shape), "FP32")
        ginp.set_data_from_numpy(x[:1])
        np.testing.assert_allclose(grpc.infer("tiny", [ginp], client_timeout=30).as_numpy("y"), want[:1], rtol=1e-6)

        for bad, dtype, says in ((np.zeros((1, 3, 9, 9), np.float32), "FP32", "unexpected shape for input 'x'"),
                                 (np.zeros((1, 3, 8, 8), np.int32), "INT32",
                                  "inference input 'x' data-type is 'INT32'"),
                                 (np.zeros((5, 3, 8, 8), np.float32), "FP32", "batch-size must be <= 4")):
            binp = thttp.InferInput("x", list(bad.shape), dtype)
            binp.set_data_from_numpy(bad)
            with pytest.raises(InferenceServerException, match=says):
                http.infer("tiny", [binp])
        assert http.is_model_ready("tiny")  # still serving
        np.testing.assert_allclose(http.infer("tiny", [inp]).as_numpy("y"), want, rtol=1e-6)
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
        assert 'nv_inference_request_success{model="tiny",version="1"} 3' in metrics
        # Triton's own statistics: every batch ran, none failed
        stats = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/models/tiny/stats",
                                                  timeout=10).read())["model_stats"][0]
        assert stats["inference_stats"]["success"]["count"] == 3 and stats["inference_stats"]["fail"]["count"] == 0

        # the shared-memory protocol stays closed unless trtkit serve --shared-memory opens it
        with pytest.raises(InferenceServerException, match="restricted"):
            grpc.register_system_shared_memory("t-in", "/t-in", 64)

        http.close()  # Triton's shutdown waits for open connections (up to --exit-timeout-s)
        grpc.close()
        # requests in flight when SIGTERM comes are answered before the server exits
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            def one(_):
                with tgrpc.InferenceServerClient(f"127.0.0.1:{grpc_port}") as client:
                    return client.infer("tiny", [ginp], client_timeout=30).as_numpy("y")

            futures = [pool.submit(one, i) for i in range(4)]
            time.sleep(0.3)
            child.proc.send_signal(signal.SIGTERM)
            for f in futures:
                np.testing.assert_allclose(f.result(timeout=60), want[:1], rtol=1e-6)
        assert child.finish() == 0
    finally:
        child.kill()
    out = child.output()
    assert "stopping: finishing requests in flight" in out and "stopped" in out
    fake = json.loads(out.split("FAKE_CUDA ", 1)[1].splitlines()[0])
    # nothing allocated in the serving process; each of the 4 stubs freed what it made
    assert fake["devices"] == [] and fake["live"]["device"] == 0
    stubs = [json.loads(line) for line in stubs_report.read_text().splitlines()]
    assert len(stubs) == 4 and sorted(d for s in stubs for d in s["devices"]) == [0, 0, 1, 1], stubs
    assert all(s["live"]["device"] == 0 and s["live"]["streams"] == 0 for s in stubs)


def test_inputs_through_system_shared_memory(tmp_path, engines):
    import tritonclient.grpc as tgrpc
    import tritonclient.utils.shared_memory as shm
    from tritonclient.utils import InferenceServerException

    good, _ = engines
    http_port, grpc_port, metrics_port = free_ports(3)
    # the server keeps 2 gRPC request states for reuse
    child = Child(tmp_path, [str(good), "--shared-memory", "--http-port", str(http_port), "--grpc-port",
                             str(grpc_port), "--metrics-port", str(metrics_port), "--grpc-allocation-pool", "2"])
    try:
        child.wait_ready()
        with tgrpc.InferenceServerClient(f"127.0.0.1:{grpc_port}") as client:
            # an answer computed from an input the server read from shared memory
            x = np.random.default_rng(2).standard_normal((2, 3, 8, 8)).astype(np.float32)
            handle = shm.create_shared_memory_region("t-in", "/t-in", x.nbytes)
            try:
                shm.set_shared_memory_region(handle, [x])
                client.register_system_shared_memory("t-in", "/t-in", x.nbytes)
                inp = tgrpc.InferInput("x", list(x.shape), "FP32")
                inp.set_shared_memory("t-in", x.nbytes)
                got = client.infer("tiny", [inp]).as_numpy("y")
                # Triton lets go of the request (and its use of the region) just after the answer goes out
                for _ in range(50):
                    try:
                        client.unregister_system_shared_memory("t-in")
                        break
                    except InferenceServerException as exc:
                        if "currently in use" not in str(exc):
                            raise
                        time.sleep(0.1)
            finally:
                shm.destroy_shared_memory_region(handle)
        np.testing.assert_allclose(got, expected_outputs(good, x), rtol=1e-6)
        child.proc.send_signal(signal.SIGTERM)
        assert child.finish() == 0
    finally:
        child.kill()


@pytest.mark.parametrize("extra, code, says", [
    (["--strict"], 1, "--strict: every engine must load; could not load '{junk}'"),
    (["--max-batch", "8"], 1, "--max-batch 8 is above the largest batch of engine '{good}' (profile 0 takes 1..4)"),
    (["--instances", "0"], 2, "--instances must be 1 or more, not 0"),  # a usage error
    (["--grpc-allocation-pool", "0"], 2, "--grpc-allocation-pool must be 1 or more request states, not 0"),
    (["--preferred-batch", "2,8"], 1, "preferred batch sizes 2,8: 8 not within 1..4, the largest batch served from "
                                      "engine '{good}'"),
    (["--tensorrt-options", "eager_batching"], 2, "--tensorrt-options are options of Triton's TensorRT backend "
                                                  "(--backend tensorrt), not of the 'python' backend"),
    (["--backend", "tensorrt", "--tensorrt-options", "output_copy_stream"], 2,
     "output_copy_stream is left out: with it Triton 2.51's TensorRT backend"),
])
def test_refusals_before_serving(tmp_path, engines, extra, code, says):
    good, junk = engines
    http_port, grpc_port, metrics_port = free_ports(3)
    targets = [str(good), str(junk)] if "--strict" in extra else [str(good)]
    proc = subprocess.run([sys.executable, str(CHILD), "serve", *targets, *extra, "--http-port", str(http_port),
                           "--grpc-port", str(grpc_port), "--metrics-port", str(metrics_port)],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert says.format(good=good, junk=junk) in " ".join(proc.stderr.split())


def test_preferred_batch_sizes_reach_the_served_models_dynamic_batcher(tmp_path, engines):
    import tritonclient.grpc as tgrpc

    good, _ = engines
    http_port, grpc_port, metrics_port = free_ports(3)
    child = Child(tmp_path, [str(good), "--preferred-batch", "3,1", "--http-port", str(http_port), "--grpc-port",
                             str(grpc_port), "--metrics-port", str(metrics_port)])
    try:
        status = child.wait_ready()
        assert status["models"][0]["preferred_batch_sizes"] == [1, 3]
        grpc = tgrpc.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        config = grpc.get_model_config("tiny", as_json=True)["config"]
        assert [int(b) for b in config["dynamic_batching"]["preferred_batch_size"]] == [1, 3]
        x = np.zeros((1, 3, 8, 8), np.float32)
        inp = tgrpc.InferInput("x", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        assert grpc.infer("tiny", [inp], client_timeout=30).as_numpy("y").shape[0] == 1
    finally:
        child.proc.send_signal(signal.SIGTERM)
        assert child.finish() == 0


def test_port_in_use_is_named(tmp_path, engines):
    good, _ = engines
    http_port, grpc_port, metrics_port = free_ports(3)
    with socket.socket() as s:
        s.bind(("127.0.0.1", grpc_port))
        s.listen()
        proc = subprocess.run([sys.executable, str(CHILD), "serve", str(good), "--http-port", str(http_port),
                               "--grpc-port", str(grpc_port), "--metrics-port", str(metrics_port)],
                              capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 1
    assert f"gRPC port {grpc_port} on 127.0.0.1 is in use by pid {os.getpid()}" in " ".join(proc.stderr.split())


def test_a_triton_that_crashes_is_named_with_its_signal_and_what_it_printed(tmp_path, engines):
    """Triton prints a crash's signal and stack to its stderr, not to its log: trtkit serve keeps that output and says
    how Triton ended (a SIGSEGV sent from here stands in for the Python backend's crash under gRPC streams)."""
    good, _ = engines
    http_port, grpc_port, metrics_port = free_ports(3)
    log = tmp_path / "triton.log"
    child = Child(tmp_path, [str(good), "--http-port", str(http_port), "--grpc-port", str(grpc_port),
                             "--metrics-port", str(metrics_port), "--log-file", str(log)])
    try:
        child.wait_ready()
        triton = [int(p.parent.name) for p in Path("/proc").glob("[0-9]*/stat")
                  if p.read_text().rsplit(")", 1)[-1].split()[1] == str(child.proc.pid)
                  and "tritonserver" in Path(p.parent / "comm").read_text()]
        assert len(triton) == 1, triton
        os.kill(triton[0], signal.SIGSEGV)
        assert child.finish() == 1
    finally:
        child.kill()
    out = " ".join(child.output().split())
    assert "Triton exited: killed by signal 11 (SIGSEGV); it printed (" in out and "Signal (11) received." in out
    assert "Signal (11) received." in (tmp_path / "triton.log.stderr").read_text()


@pytest.mark.parametrize("strict", [False, True])
def test_python_backend_names_a_model_its_stubs_cannot_load(tmp_path, engines, strict):
    good, _ = engines
    other = tmp_path / "other.engine"
    other.write_bytes(good.read_bytes())
    http_port, grpc_port, metrics_port = free_ports(3)
    args = [str(good), str(other), "--backend", "python", "--http-port", str(http_port), "--grpc-port",
            str(grpc_port), "--metrics-port", str(metrics_port), *(["--strict"] if strict else [])]
    env = {"TRTKIT_FAKE_STUB_FAIL": "other"}  # the stubs of other.engine fail to make their runner
    if strict:
        proc = subprocess.run([sys.executable, str(CHILD), "serve", *args], capture_output=True, text=True,
                              timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT), **env})
        assert proc.returncode == 1, proc.stdout + proc.stderr
        said = " ".join(proc.stderr.split())
        assert f"--strict: every engine must load; could not load '{other}': Triton could not load it" in said
        assert "fake stub failure for other" in said
        return
    child = Child(tmp_path, args, env=env)
    try:
        status = child.wait_ready()
        assert [m["name"] for m in status["models"]] == ["tiny"]
        (failed,) = status["failed"]
        assert failed["engine"] == str(other) and "fake stub failure for other" in failed["reason"]
        import tritonclient.http as thttp

        x = np.ones((1, 3, 8, 8), np.float32)
        with thttp.InferenceServerClient(f"127.0.0.1:{http_port}", network_timeout=30) as http:
            assert http.is_model_ready("tiny") and not http.is_model_ready("other")
            inp = thttp.InferInput("x", list(x.shape), "FP32")
            inp.set_data_from_numpy(x)
            np.testing.assert_allclose(http.infer("tiny", [inp]).as_numpy("y"), expected_outputs(good, x), rtol=1e-6)
        child.proc.send_signal(signal.SIGTERM)
        assert child.finish() == 0
    finally:
        child.kill()


@pytest.mark.parametrize("options", [(), ("busy_wait_events", "eager_batching", "gather_kernel", "blocking")])
def test_tensorrt_backend_loads_in_the_wheels_triton_and_a_model_it_cannot_place_is_named(tmp_path, engines,
                                                                                            monkeypatch, options):
    """Triton's own TensorRT backend (built by scripts/build_triton_trt_backend.sh, folder in TRTKIT_TRITON_BACKENDS;
    its TensorRT libraries in TRTKIT_TENSORRT_LIBS) loads into the pytriton wheel's tritonserver on the repository
    trtkit writes, with no Python backend stub; on a machine without a GPU its model cannot be placed, and trtkit
    names the engine with Triton's reason."""
    backends, libs = os.environ.get("TRTKIT_TRITON_BACKENDS"), os.environ.get("TRTKIT_TENSORRT_LIBS")
    if not (backends and libs):
        pytest.skip("TRTKIT_TRITON_BACKENDS and TRTKIT_TENSORRT_LIBS name no TensorRT backend and libraries")
    from tests.fakes.fake_trt import make_fake_trt
    from trtkit.serve import tensorrt_backend
    from trtkit.serve.server import Server, ServeSettings

    # the fake module has no libraries beside it
    monkeypatch.setattr(tensorrt_backend, "tensorrt_library_dir", lambda trt=None: Path(libs))
    good, _ = engines
    http_port, grpc_port, metrics_port = free_ports(3)
    log = tmp_path / "triton.log"
    settings = ServeSettings(backend="tensorrt", triton_backends=backends, http_port=http_port, grpc_port=grpc_port,
                             metrics_port=metrics_port, log_file=str(log), tensorrt_options=options)
    server = Server([good], settings, trt=make_fake_trt("8.6.0"))
    with pytest.raises(ServeError, match=r"nothing to serve; could not load '.*tiny.engine': Triton could not load "
                                         r"it: .*gpu id 0"):
        server.start()
    text = log.read_text()
    assert "TRITONBACKEND_Initialize: tensorrt" in text and "libtriton_tensorrt.so" in text
    # the latency options parsed (the model got as far as its GPU), the execution policy reached the backend
    assert ('"execution-policy":"BLOCKING"' in text.replace(" ", "")) == ("blocking" in options)
    assert not server.is_alive()
