"""The pieces of ``trtkit serve --backend python`` that need no Triton: the generated model repository (its config read
back with Triton's own model-config protobuf), each instance's GPU from its name, and the Python-backend model run
over a stand-in for ``triton_python_backend_utils`` with the fake TensorRT and fake CUDA."""

from __future__ import annotations

import json
import sys
import types

import numpy as np
import pytest

from tests.fakes.fake_trt import make_fake_trt
from tests.runtime.fakes import fake_engine_bytes, fake_gpu  # noqa: F401 - a fixture
from trtkit.errors import ServeError, UsageError
from trtkit.runtime.cuda import Cuda
from trtkit.runtime.runner import TrtRunner
from trtkit.serve import python_backend
from trtkit.serve import python_backend_model as model_py
from trtkit.serve.server import ServeSettings, load_model


def _parse(text: str):
    pb2 = pytest.importorskip("tritonclient.grpc.model_config_pb2",
                              reason="tritonclient (the serve extra) reads Triton's model config")
    from google.protobuf import text_format

    return text_format.Parse(text, pb2.ModelConfig())


def test_the_python_backend_is_the_default_and_a_bad_backend_is_refused(engine):
    settings = ServeSettings(instances=2, gpus=(0, 1), max_batch=3)
    model = load_model(engine, settings, trt=make_fake_trt("8.6.0"))
    assert settings.backend == "python" and model.devices == [0, 0, 1, 1]
    assert (model.max_batch, model.preferred_batch_sizes) == (3, (2, 3))
    with pytest.raises(UsageError, match="backend must be one of 'python', 'tensorrt', not 'stub'"):
        ServeSettings(backend="stub").check()


def test_repository_for_the_python_backend(tmp_path, engine):
    settings = ServeSettings(instances=2, gpus=(0, 3), max_queue_delay_us=250, cuda_graph=False)
    model = load_model(engine, settings, trt=make_fake_trt("8.6.0"))
    repo = python_backend.write_repository([model], settings, tmp_path / "repo")
    assert (repo / "tiny" / "1" / "model.py").read_text() == open(model_py.__file__).read()
    config = _parse((repo / "tiny" / "config.pbtxt").read_text())
    assert config.name == "tiny" and config.backend == "python" and config.max_batch_size == 4
    assert [(t.name, list(t.dims)) for t in config.input] == [("x", [3, 8, 8])]
    assert list(config.dynamic_batching.preferred_batch_size) == [2, 4]
    assert config.dynamic_batching.max_queue_delay_microseconds == 250
    assert [(g.name, g.count) for g in config.instance_group] == [("trtkit_gpu0", 2), ("trtkit_gpu3", 2)]
    assert config.parameters["engine"].string_value == str(engine.resolve())
    assert config.parameters["cuda_graph"].string_value == "0"


def test_instance_gpu_from_its_name():
    assert model_py.instance_device("trtkit_gpu0_0") == 0
    assert model_py.instance_device("trtkit_gpu12_3") == 12
    with pytest.raises(ServeError, match="'tiny_0' is not in an instance group named trtkit_gpu<GPU>"):
        model_py.instance_device("tiny_0")


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
    monkeypatch.delenv(model_py.PRELUDE_ENV, raising=False)
    rt.devices = 2
    settings = ServeSettings(instances=1, gpus=(1,))
    model = load_model(engine, settings, trt=trt)
    config = _parse(python_backend.model_config(model, settings))
    from google.protobuf import json_format

    args = {"model_config": json.dumps(json_format.MessageToDict(config, preserving_proto_field_name=True)),
            "model_instance_name": "trtkit_gpu1_0"}
    m = model_py.TritonPythonModel()
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
    monkeypatch.setenv(model_py.PRELUDE_ENV, str(prelude))
    with pytest.raises(SystemExit, match="stop here"):
        model_py.TritonPythonModel().initialize({"model_config": "{}", "model_instance_name": "trtkit_gpu0_0"})
    assert marker.read_text() == "yes"
