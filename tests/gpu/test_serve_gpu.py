"""``trtkit serve`` on a real GPU, both backends (runners in Triton's Python backend; Triton's own TensorRT backend,
from the folder ``TRTKIT_TRITON_BACKENDS`` names, skipped without it): the tiny conv net behind Triton, one HTTP and
one gRPC round trip equal to TrtRunner's outputs, a wrong shape refused while the model stays ready, instances on every
GPU of the host, inputs through CUDA shared memory.

Needs the serve extra in the GPU bundle, with a numpy pytriton accepts (0.7.0: numpy<2; skipped with the reason
otherwise). Run on the GPU host: ``bash .gpu/bin/gpu-run pytest -m gpu -q
tests/gpu/test_serve_gpu.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests import models
from tests.conftest import GPU_TACTIC_SOURCES
from tests.serve.net import free_ports

pytestmark = pytest.mark.gpu

PROFILE = "x:1x3x8x8,2x3x8x8,4x3x8x8"


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from trtkit.builder.builder import build_serialized
    from trtkit.builder.config import BuildConfig
    from trtkit.builder.profiles import parse_shapes

    config = BuildConfig(profiles=[parse_shapes(PROFILE)], tactic_sources=GPU_TACTIC_SOURCES, tf32=False)
    path = tmp_path_factory.mktemp("serve") / "tiny.engine"
    path.write_bytes(build_serialized(models.tiny_conv(), config).engine)
    return path


def _serve_or_skip(backend: str) -> str | None:
    """Skips without the serve extra, without the TensorRT backend's folder (``backend="tensorrt"``) or under a numpy
    pytriton's stubs cannot answer with; returns that folder (``TRTKIT_TRITON_BACKENDS``) for the tensorrt backend."""
    import os

    pytest.importorskip("pytriton", reason="the serve extra is not in this environment (pip install 'trtkit[serve]')")
    backends = os.environ.get("TRTKIT_TRITON_BACKENDS")
    if backend == "tensorrt" and not backends:
        pytest.skip("TRTKIT_TRITON_BACKENDS names no folder with Triton's TensorRT backend "
                    "(scripts/build_triton_trt_backend.sh)")
    from trtkit.errors import DependencyError
    from trtkit.serve.python_backend import check_numpy

    try:
        check_numpy()  # pytriton's backend stub answers with empty outputs under numpy 2
    except DependencyError as exc:
        pytest.skip(str(exc))
    return backends if backend == "tensorrt" else None


@pytest.mark.parametrize("backend", ["python", "tensorrt"])
def test_serve_round_trips_on_the_gpu(engine, backend):
    backends = _serve_or_skip(backend)
    import tritonclient.grpc as tgrpc
    import tritonclient.http as thttp
    from tritonclient.utils import InferenceServerException

    from trtkit._lazy import cudart
    from trtkit.runtime.runner import TrtRunner
    from trtkit.serve import Server, ServeSettings

    gpus = tuple(range(min(2, int(cudart().cudaGetDeviceCount()[1]))))
    http_port, grpc_port, metrics_port = free_ports(3)
    x = np.random.default_rng(0).standard_normal((3, 3, 8, 8)).astype(np.float32)
    with TrtRunner(engine) as runner:
        want = runner.infer({"x": x})["y"]
    settings = ServeSettings(instances=2, gpus=gpus, http_port=http_port, grpc_port=grpc_port,
                             metrics_port=metrics_port, exit_timeout_s=10, backend=backend,
                             triton_backends=backends)
    with Server([engine], settings) as server:
        (model,) = server.models
        assert model.devices == [g for g in gpus for _ in range(2)] and model.max_batch == 4
        with thttp.InferenceServerClient(f"127.0.0.1:{http_port}") as http:
            inp = thttp.InferInput("x", list(x.shape), "FP32")
            inp.set_data_from_numpy(x)
            np.testing.assert_allclose(http.infer("tiny", [inp]).as_numpy("y"), want, rtol=1e-5, atol=1e-6)
            bad = thttp.InferInput("x", [1, 3, 9, 9], "FP32")
            bad.set_data_from_numpy(np.zeros((1, 3, 9, 9), np.float32))
            with pytest.raises(InferenceServerException, match="unexpected shape for input 'x'"):
                http.infer("tiny", [bad])
            assert http.is_model_ready("tiny")
        with tgrpc.InferenceServerClient(f"127.0.0.1:{grpc_port}") as grpc:
            ginp = tgrpc.InferInput("x", list(x.shape), "FP32")
            ginp.set_data_from_numpy(x)
            np.testing.assert_allclose(grpc.infer("tiny", [ginp], client_timeout=60).as_numpy("y"), want, rtol=1e-5,
                                       atol=1e-6)


@pytest.mark.parametrize("backend", ["python", "tensorrt"])
def test_inputs_through_cuda_shared_memory_on_the_gpu(engine, backend):
    """Inputs written into device memory and shared with the server by CUDA IPC (``trtkit bench --server
    --shared-memory cuda``, where perf_analyzer is found: every level measured): one answer equal to TrtRunner's."""
    backends = _serve_or_skip(backend)
    import tritonclient.grpc as tgrpc
    import tritonclient.utils.cuda_shared_memory as cshm

    from trtkit.bench.serving import LoadSettings, find_perf_analyzer, load_test
    from trtkit.errors import DependencyError
    from trtkit.runtime.runner import TrtRunner
    from trtkit.serve import Server, ServeSettings

    http_port, grpc_port, metrics_port = free_ports(3)
    x = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)
    with TrtRunner(engine) as runner:
        want = runner.infer({"x": x})["y"]
    settings = ServeSettings(instances=1, http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port,
                             exit_timeout_s=10, backend=backend, shared_memory=True,
                             triton_backends=backends)
    with Server([engine], settings):
        try:
            binary = find_perf_analyzer()
        except DependencyError:
            binary = None
        if binary:
            (level,) = load_test(f"127.0.0.1:{grpc_port}", "tiny", LoadSettings(
                concurrency=(4,), duration_s=1.0, grpc=True, shared_memory="cuda"), binary=binary)
            assert level.error is None and level.ips > 0, level.error
        with tgrpc.InferenceServerClient(f"127.0.0.1:{grpc_port}") as grpc:
            region = cshm.create_shared_memory_region("trtkit-test-x", x.nbytes, 0)
            try:
                cshm.set_shared_memory_region(region, [x])
                grpc.register_cuda_shared_memory("trtkit-test-x", cshm.get_raw_handle(region), 0, x.nbytes)
                item = tgrpc.InferInput("x", list(x.shape), "FP32")
                item.set_shared_memory("trtkit-test-x", x.nbytes)
                got = grpc.infer("tiny", [item], client_timeout=60).as_numpy("y")
                grpc.unregister_cuda_shared_memory("trtkit-test-x")
            finally:
                cshm.destroy_shared_memory_region(region)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
