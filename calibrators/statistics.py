"""The statistics pass of trtkit's own calibration (the Q/DQ path), with TensorRT alone.

:func:`collect_histograms` marks the tensors to quantize as outputs of the FP32 model, has the caller's function build
that statistics engine (the builder passes it down: calibration never imports the builder), runs it over the
calibration batches with :class:`trtkit.runtime.runner.TrtRunner`, and accumulates a histogram of each tensor: on the
GPU where the engine's outputs are (:mod:`calibrators.device_histogram`), else on the host. Graph inputs are
histogrammed from the feed itself. No ONNX Runtime anywhere. :mod:`calibrators.explicit` turns the histograms into
amax and the Q/DQ model.
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import numpy as np

from calibrators.device_histogram import DeviceHistograms, load_kernels
from calibrators.histogram import HistogramSet
from trtkit.errors import CalibrationError, CudaError
from trtkit.model import with_outputs
from trtkit.runtime.cuda import default_cuda
from trtkit.runtime.runner import TrtRunner

logger = logging.getLogger("trtkit")


def collect_histograms(
    trt,
    model,
    tensors: list,
    session,
    build_engine: Callable[[object], bytes],
    *,
    threads: int | None = None,
    where: str = "auto",
):
    """Histograms of ``tensors`` over the calibration data, computed by running the FP32 model in TensorRT.

    Args:
        trt: the ``tensorrt`` module.
        model: the FP32 ``onnx.ModelProto``.
        tensors: names of the tensors to histogram (graph inputs are read from the feed).
        session: the :class:`~calibrators.session.CalibrationSession` (data, batch size).
        build_engine: builds the statistics engine: ``onnx.ModelProto -> serialized engine`` (the builder gives one
            that builds in FP32 with the user's profiles, tactic sources and timing cache).
        threads: host histogram worker threads (numpy releases the GIL); default: up to 8.
        where: ``gpu``: bin the engine's float32 outputs on the device (:mod:`calibrators.device_histogram`);
            ``cpu``: copy them to the host and bin them there; ``auto``: the GPU when its kernels load, else the CPU.
            Graph inputs are binned on the host from the feed either way.

    Returns:
        ``(HistogramSet, samples, timings)``; ``timings``: seconds of the engine build, the forward passes (with
        their copies) and the histogram updates, and ``histograms_on`` (``"gpu"`` or ``"cpu"``).

    Raises:
        CalibrationError: ``where="gpu"`` and the GPU kernels cannot be loaded.
    """
    inputs = {i.name for i in model.graph.input}
    marked = [t for t in tensors if t not in inputs]
    started = time.perf_counter()
    engine = build_engine(with_outputs(model, marked))
    timings: dict[str, Any] = {"engine_build": time.perf_counter() - started, "forward": 0.0, "histograms": 0.0}
    logger.info(
        "Calibration: FP32 statistics engine with %d extra outputs built in %.1f s.",
        len(marked),
        timings["engine_build"],
    )
    cuda = default_cuda()
    kernels = _histogram_kernels(cuda, where) if marked else None
    timings["histograms_on"] = "gpu" if kernels is not None else "cpu"
    hists, samples = HistogramSet(), 0
    for name in tensors:  # in plan order (the cache's), and before worker threads add to them
        hists.histogram(name)
    workers = threads or min(8, os.cpu_count() or 1)
    with (
        TrtRunner(engine, trt=trt, cuda=cuda, check_manifest=False, device_outputs=kernels is not None) as runner,
        ThreadPoolExecutor(workers) as pool,
    ):
        device = DeviceHistograms(cuda, kernels, hists.bins) if kernels is not None else None
        try:
            for feed in session.batches():
                t0 = time.perf_counter()
                outputs = runner.infer(feed, copy_outputs=False)  # views, read before the next call
                t1 = time.perf_counter()
                on_host = {t: feed[t] for t in tensors if t in inputs}
                if device is not None:
                    device = _update_on_device(device, hists, outputs, marked, runner.stream, where, timings)
                left = [t for t in marked if device is None or outputs[t].dtype != np.float32]
                on_host.update({t: _host_array(outputs[t], runner.stream) for t in left})
                _update_parallel(hists, on_host, pool)
                timings["forward"] += t1 - t0
                timings["histograms"] += time.perf_counter() - t1
                samples += next(iter(feed.values())).shape[0]
        finally:
            if device is not None:
                device.close()
            if kernels is not None:
                kernels.close()
    return hists, samples, timings


def _update_on_device(device, hists, outputs: dict, marked: list, stream: int, where: str, timings: dict):
    """Bin this batch's float32 outputs on the GPU; return ``device``, or None once it failed under ``auto`` (the
    batch then goes to the host: a failed update added nothing)."""
    on_device = {t: (outputs[t].ptr, outputs[t].nbytes // 4) for t in marked if outputs[t].dtype == np.float32}
    try:
        device.update(hists, on_device, stream)
        return device
    except CudaError as exc:
        if where == "gpu":
            raise
        logger.warning("Calibration histograms move to the CPU: the GPU kernels failed (%s).", exc)
        device.close()  # waits for what was queued before the failure
        timings["histograms_on"] = "cpu"
        return None


def _host_array(value, stream: int):
    return value.to_host(stream) if hasattr(value, "to_host") else value


def _histogram_kernels(cuda, where: str):
    """The GPU histogram kernels, or None to bin on the CPU (``where``: auto, gpu or cpu)."""
    if where == "cpu":
        return None
    kernels, reason = load_kernels(cuda)
    if kernels is None:
        if where == "gpu":
            raise CalibrationError(
                f"The GPU calibration histograms are not available ({reason}); use "
                "calibration.histograms 'cpu' (or 'auto')",
                field="calibration.histograms",
            )
        logger.info("Calibration histograms are computed on the CPU: the GPU kernels did not load (%s).", reason)
    return kernels


def _update_parallel(hists: HistogramSet, arrays: dict, pool) -> None:
    futures = [pool.submit(hists.tensors[name].update, value) for name, value in arrays.items()]
    for future in futures:
        future.result()
