"""GPU calibration histograms, on the fake CUDA runtime: same histograms as the host path, batch after batch, and a
clear fallback or error when the kernels cannot load. The real kernels are compared on the GPU host
(tests/gpu/test_histogram_gpu.py)."""

from __future__ import annotations

import hashlib
import logging
import re
from pathlib import Path

import numpy as np
import pytest

from calibrators import device_histogram
from calibrators.device_histogram import DeviceHistograms, load_kernels
from calibrators.histogram import HistogramSet
from tests.fakes.fake_cuda import FakeCudart, FakeHistogramKernels
from tests.fakes.fake_trt import make_fake_trt
from tests.runtime.fakes import fake_gpu  # noqa: F401 - fixture
from trtkit.builder.config import BuildConfig, CalibrationSettings
from trtkit.errors import CalibrationError, CudaError, TrtkitError
from trtkit.runtime.cuda import Cuda


def _batches(rng):
    """Three batches per tensor whose maxima grow (the range doubles in between), with zeros, NaN and inf."""
    relu = np.maximum(rng.normal(0, 1, (4, 8, 16, 16)), 0).astype(np.float32)
    wide = (rng.normal(0, 1, 5000) * 40).astype(np.float32)
    odd = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 3.0, -7.5], dtype=np.float32)
    return [
        {"relu": relu, "wide": wide[:1000], "odd": odd, "empty": np.zeros(0, np.float32)},
        {"relu": relu * 3, "wide": wide[1000:], "odd": odd * 4, "empty": np.zeros(0, np.float32)},
        {"relu": relu * 0.5, "wide": wide[:10], "odd": np.full(3, np.nan, np.float32),
         "empty": np.zeros(0, np.float32)},
    ]


def _on_device(rt, arrays: dict) -> dict:
    out = {}
    for name, values in arrays.items():
        dev = rt.device_array(values.shape, np.float32, fill=values)
        out[name] = (dev.ptr, values.size)
    return out


def test_device_histograms_match_the_host_path_exactly_batch_after_batch():
    rt = FakeCudart()
    cuda = Cuda(rt)
    stream = cuda.stream_create()
    host, device = HistogramSet(), HistogramSet()
    gpu = DeviceHistograms(cuda, rt.histogram_kernels(), device.bins)
    for batch in _batches(np.random.default_rng(0)):
        host.update(batch)
        gpu.update(device, _on_device(rt, batch), stream)
    assert set(device.tensors) == {"relu", "wide", "odd"}  # an empty tensor adds nothing
    for name, expected in host.tensors.items():
        if expected.counts is None:
            assert device.tensors.get(name) is None or device.tensors[name].counts is None
            continue
        got = device[name]
        assert (got.range, got.amax, got.count) == (expected.range, expected.amax, expected.count), name
        np.testing.assert_array_equal(got.counts, expected.counts)
    assert device["wide"].range > device["wide"].amax / 2  # it grew across batches
    gpu.close()
    assert rt.live_allocations()["device"] == 3 * 4  # only the test's own arrays are left


def test_a_tensor_of_only_nan_is_skipped_like_on_the_host():
    rt = FakeCudart()
    cuda = Cuda(rt)
    hists = HistogramSet()
    DeviceHistograms(cuda, rt.histogram_kernels(), hists.bins).update(
        hists, _on_device(rt, {"x": np.full(5, np.nan, np.float32)}), cuda.stream_create())
    assert hists["x"].counts is None and hists["x"].count == 0


def test_kernels_fall_back_to_none_with_the_reason(monkeypatch):
    def no_gpu(cuda):
        raise CudaError("cuInit failed with CUDA_ERROR_NO_DEVICE")

    monkeypatch.setattr(device_histogram, "PtxKernels", no_gpu)
    kernels, reason = load_kernels(Cuda(FakeCudart(kernels=False)))
    assert kernels is None and reason == "CudaError: cuInit failed with CUDA_ERROR_NO_DEVICE"


def test_shipped_ptx_was_made_from_the_current_kernel_source():
    """An edited histogram.cu without a new PTX fails here: run scripts/make_ptx.py."""
    source = Path(device_histogram.__file__).with_name("kernels") / "histogram.cu"
    first = device_histogram.PTX.read_text().splitlines()[0]
    recorded = re.search(r"source sha256 ([0-9a-f]{64})", first).group(1)
    assert recorded == hashlib.sha256(source.read_bytes()).hexdigest()
    text = device_histogram.PTX.read_text()
    assert ".version 7.0" in text and ".target sm_60" in text
    assert ".entry absmax_f32" in text and ".entry histogram_f32" in text


# --- where the explicit path bins: gpu, cpu, auto ---------------------------------------------------------------

def _qdq_build(tmp_path, where: str):
    from tests.quant.test_precision_plan import _data, _plan

    tmp_path.mkdir(parents=True, exist_ok=True)
    cache = tmp_path / f"{where}.cache"
    settings = CalibrationSettings(source=_data(16), cache_path=str(cache), histograms=where)
    plan = _plan(make_fake_trt("8.6.0"), "int8", int8_mode="qdq", calibration=settings)
    return plan.notes[0], cache.read_text().splitlines()


def test_the_explicit_path_gets_the_same_scales_from_gpu_and_cpu_histograms(tmp_path, fake_gpu):  # noqa: F811
    gpu_note, gpu_cache = _qdq_build(tmp_path, "gpu")
    cpu_note, cpu_cache = _qdq_build(tmp_path, "cpu")
    assert "s (GPU)):" in gpu_note and "s (CPU)):" in cpu_note, (gpu_note, cpu_note)
    assert gpu_cache == cpu_cache and len(gpu_cache) > 2


def test_without_kernels_auto_bins_on_the_cpu_and_says_why_and_gpu_is_an_error(tmp_path, fake_gpu, monkeypatch,  # noqa: F811
                                                                               caplog):
    _, rt = fake_gpu
    rt.histogram_kernels = None  # the fake offers none: the real PTX is tried, and made to fail

    def no_gpu(cuda):
        raise CudaError("cuInit failed with CUDA_ERROR_NO_DEVICE")

    monkeypatch.setattr(device_histogram, "PtxKernels", no_gpu)
    with caplog.at_level(logging.INFO, logger="trtkit"):
        note, _ = _qdq_build(tmp_path, "auto")
    assert "s (CPU)):" in note
    assert "computed on the CPU: the GPU kernels did not load (CudaError: cuInit failed" in caplog.text
    with pytest.raises(CalibrationError, match=r"The GPU calibration histograms are not available \(CudaError: "
                                               r"cuInit failed with CUDA_ERROR_NO_DEVICE\); use "
                                               r"calibration.histograms 'cpu' \(or 'auto'\)"):
        _qdq_build(tmp_path, "gpu")


def test_kernels_failing_mid_run_hand_over_to_the_cpu_under_auto_only(tmp_path, fake_gpu, caplog):  # noqa: F811
    _, rt = fake_gpu
    _, expected = _qdq_build(tmp_path / "cpu", "cpu")
    launches = []

    class FailingKernels(FakeHistogramKernels):
        def histogram(self, *args):
            launches.append(args)
            if len(launches) > 3:  # the second batch's launches fail
                raise CudaError("cuLaunchKernel failed with CUDA_ERROR_LAUNCH_FAILED")
            super().histogram(*args)

    rt.histogram_kernels = lambda: FailingKernels(rt)
    with caplog.at_level(logging.WARNING, logger="trtkit"):
        note, cache = _qdq_build(tmp_path / "auto", "auto")
    assert "histograms move to the CPU: the GPU kernels failed (cuLaunchKernel failed" in caplog.text
    assert "s (CPU)):" in note and cache == expected  # nothing of the failed batch was counted twice or lost
    launches.clear()
    with pytest.raises(CudaError, match="CUDA_ERROR_LAUNCH_FAILED"):
        _qdq_build(tmp_path / "gpu", "gpu")


def test_an_unknown_histogram_device_is_refused_with_the_choices():
    with pytest.raises(TrtkitError, match="calibration.histograms must be one of 'auto', 'gpu', 'cpu', not 'tpu'"):
        BuildConfig(precision="int8", calibration=CalibrationSettings(source=".", histograms="tpu"))
