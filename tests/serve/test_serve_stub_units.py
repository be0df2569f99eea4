"""The pieces of ``trtkit serve --backend stub`` that need no Triton: the generated model repository (its config read
back with Triton's own model-config protobuf), each instance's GPU from its name, and the Python-backend model run
over a stand-in for ``triton_python_backend_utils`` with the fake TensorRT and fake CUDA."""

from __future__ import annotations

import json
import sys
import types

import numpy as np
import pytest

from tests.fakes.fake_cuda import FakeCudart
from tests.fakes.fake_trt import make_fake_trt
from tests.runtime.fakes import fake_engine_bytes, fake_gpu  # noqa: F401 - a fixture
from trtkit.errors import ServeError, UsageError
from trtkit.runtime.cuda import Cuda
from trtkit.runtime.runner import TrtRunner
from trtkit.serve import stub, stub_model
from trtkit.serve.server import ServeSettings, load_model


def _parse(text: str):
    pb2 = pytest.importorskip("tritonclient.grpc.model_config_pb2",
                              reason="tritonclient (the serve extra) reads Triton's model config")
    from google.protobuf import text_format

    return text_format.Parse(text, pb2.ModelConfig())


def test_stub_backend_loads_no_runner_in_the_serving_process(engine):
    rt = FakeCudart(devices=2)
    settings = ServeSettings(instances=2, gpus=(0, 1), backend="stub", max_batch=3)
    model = load_model(engine, settings, trt=make_fake_trt("8.6.0"), cuda=Cuda(rt))
    assert model.runners == [] and model.devices == [0, 0, 1, 1] and rt.live_allocations()["device"] == 0
    assert (model.max_batch, model.preferred_batch_sizes) == (3, (2, 3))


def test_bad_backend_is_refused():
    with pytest.raises(UsageError, match="backend 'triton': give one of pytriton, stub, tensorrt"):
        ServeSettings(backend="triton").check()


def test_repository_for_the_python_backend(tmp_path, engine):
    settings = ServeSettings(instances=2, gpus=(0, 3), backend="stub", max_queue_delay_us=250, cuda_graph=False)
    model = load_model(engine, settings, trt=make_fake_trt("8.6.0"), cuda=Cuda(FakeCudart(devices=4)))
    repo = stub.write_repository([model], settings, tmp_path / "repo")
    assert (repo / "tiny" / "1" / "model.py").read_text() == open(stub_model.__file__).read()
    config = _parse((repo / "tiny" / "config.pbtxt").read_text())
    assert config.name == "tiny" and config.backend == "python" and config.max_batch_size == 4
    assert [(t.name, list(t.dims)) for t in config.input] == [("x", [3, 8, 8])]
    assert list(config.dynamic_batching.preferred_batch_size) == [2, 4]
    assert config.dynamic_batching.max_queue_delay_microseconds == 250
    assert [(g.name, g.count) for g in config.instance_group] == [("trtkit_gpu0", 2), ("trtkit_gpu3", 2)]
    assert config.parameters["engine"].string_value == str(engine.resolve())
    assert config.parameters["cuda_graph"].string_value == "0"


def test_instance_gpu_from_its_name():
    assert stub_model.instance_device("trtkit_gpu0_0") == 0
    assert stub_model.instance_device("trtkit_gpu12_3") == 12
    with pytest.raises(ServeError, match="'tiny_0' is not in an instance group named trtkit_gpu<GPU>"):
        stub_model.instance_device("tiny_0")


class _PbUtils(types.ModuleType):
    """What the model uses of ``triton_python_backend_utils``: requests' input tensors, output tensors, answers."""

    def __init__(self):
        super().__init__("triton_python_backend_utils")

        class Tensor:
            def __init__(self, name, array):
                self.name, self.array = name, array

            def as_numpy(self):
                return self.array

        class InferenceResponse:
            def __init__(self, output_tensors, error=None):
                self.output_tensors, self.error = output_tensors, error

        class TritonError:
            def __init__(self, message):
                self.message = message

        self.Tensor, self.InferenceResponse, self.TritonError = Tensor, InferenceResponse, TritonError

    def get_input_tensor_by_name(self, request, name):
        return request.get(name)


def test_python_backend_model_batches_requests_on_its_gpu(tmp_path, engine, fake_gpu, monkeypatch):  # noqa: F811
    trt, rt = fake_gpu
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", _PbUtils())
    monkeypatch.delenv(stub_model.PRELUDE_ENV, raising=False)
    rt.devices = 2
    settings = ServeSettings(instances=1, gpus=(1,), backend="stub")
    model = load_model(engine, settings, trt=trt, cuda=Cuda(rt))
    config = _parse(stub.stub_config(model, settings))
    from google.protobuf import json_format

    args = {"model_config": json.dumps(json_format.MessageToDict(config, preserving_proto_field_name=True)),
            "model_instance_name": "trtkit_gpu1_0"}
    m = stub_model.TritonPythonModel()
    m.initialize(args)
    assert sorted(set(rt.allocation_device.values())) == [1]
    pb = sys.modules["triton_python_backend_utils"]
    rng = np.random.default_rng(4)
    xs = [rng.standard_normal((n, 3, 8, 8)).astype(np.float32) for n in (1, 2)]
    rt.cudaSetDevice(0)  # the stub's thread may have another device current
    answers = m.execute([{"x": pb.Tensor("x", x)} for x in xs])
    with TrtRunner(engine, trt=trt, cuda=Cuda(rt)) as reference:
        for x, answer in zip(xs, answers):
            assert answer.error is None and [t.name for t in answer.output_tensors] == ["y"]
            np.testing.assert_allclose(answer.output_tensors[0].array, reference.infer({"x": x})["y"], rtol=1e-6)
    # a batch the runner refuses: every request answered with the reason, the model still serving
    (bad,) = m.execute([{"x": pb.Tensor("x", np.zeros((1, 3, 9, 9), np.float32))}])
    assert bad.output_tensors == [] and "x" in bad.error.message
    (again,) = m.execute([{"x": pb.Tensor("x", xs[0])}])
    assert again.error is None
    m.finalize()
    assert rt.live_allocations()["device"] == 0


def test_prelude_runs_first(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    prelude = tmp_path / "prelude.py"
    prelude.write_text(f"open({str(marker)!r}, 'w').write('yes')\nraise SystemExit('stop here')\n")
    monkeypatch.setenv(stub_model.PRELUDE_ENV, str(prelude))
    with pytest.raises(SystemExit, match="stop here"):
        stub_model.TritonPythonModel().initialize({"model_config": "{}", "model_instance_name": "trtkit_gpu0_0"})
    assert marker.read_text() == "yes"


def test_a_server_that_dies_while_loading_is_named_with_the_end_of_its_log(tmp_path):
    """What a user sees when tritonserver exits early (a port taken, a backend that does not load): the exit code
    and the last lines of Triton's own log, not only the code."""
    import subprocess
    import sys

    from trtkit.errors import ServeError
    from trtkit.serve.stub import StubTriton

    log = tmp_path / "triton.log"
    log.write_text("I1201 starting\nE1201 failed to bind to 0.0.0.0:8001: Address already in use\nI1201 exiting\n")
    server = StubTriton.__new__(StubTriton)  # the process part only: no tritonserver is needed for this
    server.log_file = log
    server._proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    server._proc.wait()
    with pytest.raises(ServeError, match=r"exited with code 3 while loading; the end of Triton.s log \(.*triton.log\): "
                                         r"I1201 starting \| E1201 failed to bind.*Address already in use"):
        server.wait_loaded(["m"], timeout_s=5)


def test_a_server_that_dies_while_serving_says_how_and_what_it_printed(tmp_path):
    """A crash (Triton prints the signal and its stack to stderr, not to its log) is named with what it printed."""
    import signal
    import subprocess
    import sys

    from trtkit.serve.logs import console_path
    from trtkit.serve.stub import StubTriton

    log = tmp_path / "triton.log"
    server = StubTriton.__new__(StubTriton)
    server.log_file, server.output_file = log, console_path(log)
    assert server.output_file == tmp_path / "triton.log.stderr"
    with open(server.output_file, "wb") as out:
        server._proc = subprocess.Popen(
            [sys.executable, "-c", "import os, sys, time; print('Signal (11) received.'); print(' 0# 0x55 in "
             "tritonserver', flush=True); os.kill(os.getpid(), 9)"], stdout=out, stderr=subprocess.STDOUT)
    server._proc.wait()
    assert server.exit_reason() == (f"killed by signal 9 (SIGKILL); it printed ({server.output_file}): "
                                    "Signal (11) received. | 0# 0x55 in tritonserver")
    # a caught signal's stack is quoted from the signal on: the frames nearest the crash
    server.output_file.write_text("I1203 serving\nSignal (11) received.\n" + "".join(f" {i}# f{i}\n" for i in range(9)))
    assert server.exit_reason().endswith("): Signal (11) received. | 0# f0 | 1# f1 | 2# f2 | 3# f3 | 4# f4")
    server._proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"])
    server._proc.wait()
    server.output_file.write_text("")
    assert server.exit_reason() == "exit code 1"  # nothing printed: nothing quoted
    server._proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert server.exit_reason() is None  # still running
    finally:
        server._proc.send_signal(signal.SIGKILL)
        server._proc.wait()


@pytest.mark.parametrize("pool, flag", [(None, None), (64, "--grpc-infer-allocation-pool-size=64")])
def test_the_grpc_allocation_pool_reaches_tritonservers_command_line(tmp_path, monkeypatch, pool, flag):
    from trtkit.serve import stub
    from trtkit.serve.server import ServeSettings

    started = []
    monkeypatch.setattr(stub, "prepare_server", lambda workspace, backends, python_stub: tmp_path)
    monkeypatch.setattr(stub.subprocess, "Popen", lambda command, **kwargs: started.append(command))
    settings = ServeSettings(grpc_allocation_pool=pool)
    stub.StubTriton(tmp_path / "repo", settings, tmp_path, tmp_path / "triton.log", env={})
    (command,) = started
    pools = [a for a in command if a.startswith("--grpc-infer-allocation-pool-size")]
    assert pools == ([flag] if flag else [])  # none given: Triton's own default
