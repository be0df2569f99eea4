"""The CUDA histogram kernels against the host histograms, bit for bit, and the explicit path binning on the GPU.

Run on the GPU host: ``bash .gpu/bin/gpu-run pytest -m gpu -q tests/gpu/test_histogram_gpu.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from calibrators.device_histogram import DeviceHistograms, PtxKernels
from calibrators.histogram import HistogramSet
from tests.gpu.conftest import kernels_on_stream

pytestmark = pytest.mark.gpu

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="module")
def gpu(cuda_stream):
    yield from kernels_on_stream(cuda_stream, PtxKernels)


def _upload(cuda, stream, arrays: dict) -> tuple[dict, list]:
    from trtkit.runtime.buffers import DeviceBuffer

    tensors, buffers = {}, []
    for name, values in arrays.items():
        values = np.ascontiguousarray(values, dtype=np.float32)
        buf = DeviceBuffer(cuda, values.nbytes)
        cuda.memcpy_htod_async(buf.ptr, values.ctypes.data, values.nbytes, stream)
        buffers.append(buf)
        tensors[name] = (buf.ptr, values.size)
    cuda.stream_synchronize(stream)
    return tensors, buffers


def test_kernels_give_the_host_histograms_exactly(gpu):
    cuda, kernels, stream = gpu
    rng = np.random.default_rng(0)
    relu = np.maximum(rng.normal(0, 1, 12_000_000), 0).astype(np.float32)  # many zeros: the warp-aggregated bin
    heavy = (rng.standard_cauchy(3_000_001) * 5).astype(np.float32)
    odd = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 3.0, -7.5, 1e-30, 3.4e38], dtype=np.float32)
    batches = [{"relu": relu, "heavy": heavy, "odd": odd},
               {"relu": relu * 4.5, "heavy": heavy[:1000] * 0.1, "odd": odd[:3]},
               {"relu": relu[:777] * 1000, "heavy": heavy[::7], "odd": odd * 0.5}]
    host, device = HistogramSet(), HistogramSet()
    binner = DeviceHistograms(cuda, kernels, device.bins)
    try:
        for batch in batches:
            host.update(batch)
            tensors, buffers = _upload(cuda, stream, batch)
            binner.update(device, tensors, stream)
            for buf in buffers:
                buf.free()
    finally:
        binner.close()
    for name, expected in host.tensors.items():
        got = device[name]
        assert (got.range, got.amax, got.count) == (expected.range, expected.amax, expected.count), name
        np.testing.assert_array_equal(got.counts, expected.counts, err_msg=name)


def test_the_explicit_path_bins_on_the_gpu_and_gets_the_cpu_scales(tmp_path):
    from tests.conftest import GPU_TACTIC_SOURCES
    from trtkit.builder.builder import build_serialized
    from trtkit.builder.config import BuildConfig, CalibrationSettings
    from trtkit.builder.profiles import parse_shapes

    x = np.load(DATA / "digits_calib.npz")["x"]
    caches, notes = {}, {}
    for where in ("gpu", "cpu"):
        cache = tmp_path / f"{where}.cache"
        # entropy, not the Q/DQ default (mse): each pass builds its own FP32 statistics engine, and mse often lands
        # on a tensor's observed maximum, which two builds' tactics give a few ulps apart; entropy's amax is a bin
        # edge, so equal histograms give equal caches (mse's first GPU run failed exactly this comparison)
        settings = CalibrationSettings(source=[{"images": x[i:i + 64]} for i in range(0, len(x), 64)],
                                       cache_path=str(cache), histograms=where, algorithm="entropy")
        config = BuildConfig(precision="int8", int8_mode="qdq", calibration=settings,
                             profiles=[parse_shapes("images:1x1x8x8,64x1x8x8,64x1x8x8")],
                             tactic_sources=GPU_TACTIC_SOURCES)
        result = build_serialized(str(DATA / "digits_cnn.onnx"), config)
        notes[where] = " ".join(result.manifest.to_json()["build"]["precision_plan"]["notes"])
        caches[where] = cache.read_text()
    assert "s (GPU)):" in notes["gpu"] and "s (CPU)):" in notes["cpu"], notes
    assert caches["gpu"] == caches["cpu"]
