"""The pieces of ``trtkit serve`` that need no Triton: batch limits, settings, instances spread over GPUs, request
batching, ports in use, and what the Python backend needs from this interpreter."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import numpy as np
import pytest

from tests import models
from tests.fakes.fake_cuda import FakeCudart
from tests.fakes.fake_trt import make_fake_trt
from tests.runtime.fakes import fake_engine_bytes
from trtkit.errors import DependencyError, ProfileError, ServeError, TrtkitError
from trtkit.export.triton import triton_model
from trtkit.runtime.cuda import Cuda
from trtkit.runtime.runner import TrtRunner
from trtkit.serve import ports, python_backend
from trtkit.serve.batching import joined_inputs, run_requests
from trtkit.serve.server import ServeSettings, batch_limit, load_model


def test_batch_limit_from_profile_and_max_batch(engine):
    spec = triton_model(engine, trt=make_fake_trt("8.6.0"))
    assert batch_limit(spec, None, engine) == (4, (2, 4))
    assert batch_limit(spec, 3, engine) == (3, (2, 3))
    assert batch_limit(spec, 1, engine) == (1, (1,))
    with pytest.raises(ProfileError, match=r"max_batch=8 is above the largest batch .* \(profile 0 takes 1..4\)"):
        batch_limit(spec, 8, engine)


def test_preferred_batch_sizes_replace_the_profiles_within_the_batch_limit(engine):
    spec = triton_model(engine, trt=make_fake_trt("8.6.0"))
    assert batch_limit(spec, None, engine, (3, 1, 3)) == (4, (1, 3))
    assert batch_limit(spec, 3, engine, (2, 3)) == (3, (2, 3))
    with pytest.raises(ProfileError, match=r"preferred batch sizes 2,4: 4 not within 1..3, the largest batch served"):
        batch_limit(spec, 3, engine, (2, 4))
    with pytest.raises(ProfileError, match=r"max_batch=8 is above the largest batch"):  # the limit is checked first
        batch_limit(spec, 8, engine, (2,))


def test_unbatched_engine_refuses_max_batch(tmp_path):
    path = tmp_path / "fixed.engine"
    path.write_bytes(fake_engine_bytes(models.tiny_conv(dynamic_batch=False)))
    spec = triton_model(path, trt=make_fake_trt("8.6.0"))
    assert batch_limit(spec, None, path) == (0, ())
    with pytest.raises(ProfileError, match="serves it unbatched; leave max_batch unset"):
        batch_limit(spec, 2, path)
    with pytest.raises(ProfileError, match="has no batches to prefer; leave the preferred batch sizes unset"):
        batch_limit(spec, None, path, (1,))


@pytest.mark.parametrize("kwargs, message", [
    ({"instances": 0}, "instances must be 1 or more, not 0"),
    ({"max_batch": 0}, "max_batch must be 1 or more"),
    ({"max_queue_delay_us": -1}, "max_queue_delay_us must be 0 or more"),
    ({"gpus": (0, 0)}, "give distinct GPU indices"),
    ({"gpus": ()}, "give distinct GPU indices"),
    ({"grpc_allocation_pool": 0}, "grpc_allocation_pool must be 1 or more request states, not 0"),
    ({"preferred_batch_sizes": (8, 0)}, r"preferred_batch_sizes=8,0: give batch sizes of 1 or more"),
    ({"preferred_batch_sizes": ()}, r"preferred_batch_sizes=\(\): give batch sizes of 1 or more"),
])
def test_bad_settings(kwargs, message):
    with pytest.raises(TrtkitError, match=message):
        ServeSettings(**kwargs).check()


def test_instances_spread_over_gpus(engine):
    model = load_model(engine, ServeSettings(instances=2, gpus=(0, 2)), trt=make_fake_trt("8.6.0"))
    assert model.devices == [0, 0, 2, 2] and model.max_batch == 4 and model.name == engine.stem


def test_requests_joined_into_one_batch_and_split_back(engine):
    rt = FakeCudart()
    with TrtRunner(engine, trt=make_fake_trt("8.6.0"), cuda=Cuda(rt), cuda_graph=False) as runner:  # one enqueue
        rng = np.random.default_rng(1)
        reqs = [{"x": rng.standard_normal((n, 3, 8, 8)).astype(np.float32)} for n in (1, 2, 1)]
        calls = rt.calls["cudaStreamSynchronize"] + rt.calls["cudaEventSynchronize"]
        outs = run_requests(runner, reqs, batched=True)
        assert rt.calls["cudaStreamSynchronize"] + rt.calls["cudaEventSynchronize"] == calls + 1  # one call
        assert [o["y"].shape[0] for o in outs] == [1, 2, 1]
        for req, out in zip(reqs, outs):
            np.testing.assert_allclose(out["y"], runner.infer(req)["y"], rtol=1e-6)


def test_requests_joined_straight_into_the_runners_pinned_buffers(engine):
    with TrtRunner(engine, trt=make_fake_trt("8.6.0"), cuda=Cuda(FakeCudart())) as runner:
        rng = np.random.default_rng(3)
        reqs = [{"x": rng.standard_normal((n, 3, 8, 8)).astype(np.float32)} for n in (2, 1)]
        feed = joined_inputs(runner, reqs, ["x"])
        assert feed["x"] is runner.host_inputs({"x": (3, 3, 8, 8)})["x"]  # the runner's own buffer: no copy into it
        np.testing.assert_array_equal(feed["x"], np.concatenate([r["x"] for r in reqs]))
        # another dtype than the engine's: joined into a new array, which the runner converts as any input
        halves = [{"x": r["x"].astype(np.float16)} for r in reqs]
        other = joined_inputs(runner, halves, ["x"])
        assert other["x"].dtype == np.float16 and other["x"] is not feed["x"] and other["x"].shape == (3, 3, 8, 8)


def test_port_in_use_is_named_with_its_process():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert not ports.port_is_free("127.0.0.1", port)
        with pytest.raises(ServeError, match=rf"HTTP port {port} on 127.0.0.1 is in use by pid {os.getpid()} "):
            ports.check_ports("127.0.0.1", {"HTTP": port})
    with pytest.raises(TrtkitError, match="HTTP and gRPC ports are both 9000"):
        ports.check_ports("127.0.0.1", {"gRPC": 9000, "HTTP": 9000})
    with pytest.raises(TrtkitError, match="outside 1..65535"):
        ports.check_ports("127.0.0.1", {"HTTP": 70000})


def test_python_without_shared_library_is_refused_with_a_fix(tmp_path):
    with pytest.raises(DependencyError, match="built without it .*--enable-shared"):
        python_backend.python_library({"Py_ENABLE_SHARED": 0, "LIBDIR": str(tmp_path)}, (3, 11))
    (tmp_path / "libpython3.11.so.1.0").write_bytes(b"")
    found = python_backend.python_library({"Py_ENABLE_SHARED": 1, "LIBDIR": str(tmp_path),
                                    "INSTSONAME": "libpython3.11.so.1.0"}, (3, 11))
    assert found == tmp_path / "libpython3.11.so.1.0"


def test_missing_backend_stub_names_the_versions_there_are(tmp_path):
    stubs = tmp_path / "tritonserver" / "python_backend_stubs"
    for v in ("3.10", "3.12"):
        (stubs / v).mkdir(parents=True)
        (stubs / v / "triton_python_backend_stub").write_bytes(b"")
    assert python_backend.check_backend_stub(tmp_path, (3, 12)).parent.name == "3.12"
    with pytest.raises(DependencyError, match=r"no Python backend stub for Python 3.9 \(it has 3.10, 3.12\)"):
        python_backend.check_backend_stub(tmp_path, (3, 9))


PYTRITON_070 = ["numpy<2.0.0,>=1.21", "protobuf>=3.7", "tritonclient[grpc,http]~=2.50",
                'pytest~=8.1.1; extra == "test"']


def test_numpy_ceiling_read_from_requirements():
    assert python_backend.numpy_ceiling(PYTRITON_070) == ("2.0.0", False)
    assert python_backend.numpy_ceiling(["numpy (>=1.2, <=1.26.4)", 'numpy<3; python_version > "3"']) == ("1.26.4",
                                                                                                         True)
    assert python_backend.numpy_ceiling(["numpy>=1.21", "numpyro<1", "protobuf<4"]) is None
    assert python_backend.numpy_ceiling(None) is None


@pytest.mark.parametrize("numpy_version, refused", [
    ("2.2.6", True), ("2.0.0", True), ("2.0.0rc1", True), ("1.26.4", False), ("1.21.0", False),
])
def test_numpy_that_pytriton_excludes_is_refused(numpy_version, refused):
    if not refused:
        python_backend.check_numpy(numpy_version, PYTRITON_070, "0.7.0")
        return
    with pytest.raises(DependencyError) as err:
        python_backend.check_numpy(numpy_version, PYTRITON_070, "0.7.0")
    says = str(err.value)
    assert f"cannot run with numpy {numpy_version}: nvidia-pytriton 0.7.0 requires numpy<2.0.0,>=1.21" in says
    assert "every output with no data" in says and 'pip install "numpy<2.0.0"' in says


def test_numpy_check_follows_the_declared_pin():
    python_backend.check_numpy("2.2.6", ["numpy>=1.21"], "0.8.0")  # a pytriton that lifts the pin is let through
    python_backend.check_numpy("2.0", ["numpy<=2.0.0"], "0.8.0")
    with pytest.raises(DependencyError, match='pip install "numpy<=2.0.0"'):
        python_backend.check_numpy("2.0.1", ["numpy<=2.0.0"], "0.8.0")


def test_serve_refuses_to_start_under_a_numpy_pytriton_excludes(engine, monkeypatch, capsys):
    from importlib import metadata

    from trtkit.cli import main as cli_main

    monkeypatch.setattr(np, "__version__", "2.2.6")
    monkeypatch.setattr(metadata, "requires", lambda name: PYTRITON_070 if name == "nvidia-pytriton" else [])
    monkeypatch.setattr(metadata, "version", lambda name: "0.7.0")
    monkeypatch.setattr(TrtRunner, "__init__", lambda *a, **k: pytest.fail("an engine loaded before the refusal"))
    assert cli_main.main(["serve", str(engine)]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "trtkit serve cannot run with numpy 2.2.6: nvidia-pytriton 0.7.0 requires numpy<2.0.0,>=1.21" in err


def test_backend_environment_puts_this_interpreters_library_first():
    pytest.importorskip("pytriton", reason="nvidia-pytriton is not installed (pip install 'trtkit[serve]')")
    try:
        python_backend.check_numpy()
        libdir = str(python_backend.python_library().parent)
    except DependencyError as exc:
        pytest.skip(f"Triton cannot serve from this environment: {exc}")
    env = python_backend.backend_environment({"LD_LIBRARY_PATH": f"/usr/lib:{libdir}"})
    assert env["LD_LIBRARY_PATH"] == f"{libdir}:/usr/lib"
    # the stub Triton runs, under that environment, resolves libpython to this interpreter's own
    import shutil
    import subprocess
    import sys

    import pytriton

    if shutil.which("ldd") is None:
        pytest.skip("no ldd to ask the dynamic loader")
    stub = python_backend.check_backend_stub(Path(pytriton.__file__).parent)
    seen = subprocess.run(["ldd", str(stub)], capture_output=True, text=True, timeout=30,
                          env={**os.environ, **env}).stdout
    soname = f"libpython{sys.version_info[0]}.{sys.version_info[1]}.so.1.0"
    (line,) = [x for x in seen.splitlines() if soname in x]
    assert line.split("=>")[1].split("(")[0].strip() == str(python_backend.python_library())


def test_a_stop_signal_once_the_json_says_ready_drains_the_server(tmp_path, monkeypatch):
    """``--json`` tells a caller the server is ready; a SIGTERM from that moment on must ask for a drain (the
    server's ``request_stop``), not kill the process with Python's default handler."""
    import io
    import signal

    import trtkit.serve
    from trtkit.cli import render
    from trtkit.cli import serve as serve_cli
    from trtkit.cli.main import make_parser

    asked = []

    class FakeServer:
        def __init__(self, engines, settings):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def request_stop(self):
            asked.append("stop")

        def wait(self):
            return bool(asked)

        def exit_reason(self):
            return None

    handler_when_written = []

    def write_json(path, data):
        handler_when_written.append(signal.getsignal(signal.SIGTERM))

    monkeypatch.setattr(trtkit.serve, "Server", FakeServer)
    monkeypatch.setattr(serve_cli, "_show", lambda server, console: None)
    monkeypatch.setattr(serve_cli, "status", lambda server: {})
    monkeypatch.setattr(render, "write_json", write_json)
    engine = tmp_path / "m.engine"
    engine.write_bytes(b"unused by the fake server")
    before = signal.getsignal(signal.SIGTERM)
    args = make_parser("serve").parse_args(["serve", str(engine), "--json", str(tmp_path / "status.json")])
    from rich.console import Console

    assert serve_cli.run(args, Console(file=io.StringIO())) == 1  # the fake's wait() ends with no stop asked
    (handler,) = handler_when_written
    assert callable(handler) and handler not in (signal.SIG_DFL, signal.SIG_IGN)
    handler(signal.SIGTERM, None)
    assert asked == ["stop"]
    assert signal.getsignal(signal.SIGTERM) == before  # put back once the server has stopped
