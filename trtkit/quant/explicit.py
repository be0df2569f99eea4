"""Explicit INT8 made by trtkit, with TensorRT alone: calibrate in TensorRT, compute amax, insert Q/DQ.

1. :func:`~trtkit.quant.qdq.plan_qdq` picks the tensors to quantize.
2. :func:`collect_histograms` builds the FP32 network with those tensors marked as outputs, runs it in TensorRT
   over the calibration batches (:class:`trtkit.runtime.runner.TrtRunner`), and accumulates a histogram of each
   (graph inputs are histogrammed from the feed itself). No ONNX Runtime anywhere.
3. amax per tensor with the chosen algorithm (:mod:`calibrators.algorithms`); a calibration cache in TensorRT's
   format is written, and a matching cache (ours or TensorRT's own) skips steps 2-3.
4. :func:`~trtkit.quant.qdq.insert_qdq` makes the Q/DQ model.
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from calibrators.algorithms import compute_amaxes
from calibrators.cache import table_from_amaxes
from calibrators.device_histogram import DeviceHistograms, load_kernels
from calibrators.histogram import HistogramSet
from trtkit import _version_compat as compat
from trtkit.errors import CalibrationError, CudaError
from trtkit.quant.qdq import QdqOptions, QdqPlan, insert_qdq, plan_qdq

logger = logging.getLogger("trtkit")


@dataclass
class ExplicitResult:
    """What :func:`make_qdq_model` produced.

    Attributes:
        model: the Q/DQ ``onnx.ModelProto``.
        plan: the :class:`~trtkit.quant.qdq.QdqPlan`.
        amax: the activation ranges used.
        from_cache: the ranges came from a calibration cache (no calibration run).
        samples: calibration samples run (0 when from the cache).
        seconds: time spent collecting statistics.
        timings: where that time went: ``engine_build``, ``forward`` (TensorRT runs and their copies, host side),
            ``histograms``, in seconds; ``histograms_on``: ``"gpu"`` or ``"cpu"``.
    """

    model: object
    plan: QdqPlan
    amax: dict = field(default_factory=dict)
    from_cache: bool = False
    samples: int = 0
    seconds: float = 0.0
    timings: dict = field(default_factory=dict)

    def describe_timings(self) -> str:
        """E.g. ``engine 38.2 s, forward passes 1.3 s, histograms 0.4 s (GPU)``; empty without timings."""
        names = (("engine_build", "engine"), ("forward", "forward passes"), ("histograms", "histograms"))
        text = ", ".join(f"{label} {self.timings[key]:.1f} s" for key, label in names if key in self.timings)
        where = self.timings.get("histograms_on")
        return f"{text} ({where.upper()})" if text and where else text


def with_outputs(model, names: list):
    """A copy of ``model`` whose graph also outputs the tensors ``names`` (FP32; shapes from ONNX inference)."""
    import onnx
    from onnx import TensorProto, helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    try:
        inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
    except Exception:  # shapes are a courtesy: TensorRT infers them anyway
        inferred = {}
    existing = {o.name for o in out.graph.output}
    for name in names:
        if name in existing:
            continue
        value = out.graph.output.add()
        if name in inferred:
            value.CopyFrom(inferred[name])
        else:
            value.CopyFrom(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    return out


def collect_histograms(trt, model, tensors: list, session, build_config, *, threads: int | None = None,
                       where: str = "auto"):
    """Histograms of ``tensors`` over the calibration data, computed by running the FP32 model in TensorRT.

    Args:
        trt: the ``tensorrt`` module.
        model: the FP32 ``onnx.ModelProto``.
        tensors: names of the tensors to histogram (graph inputs are read from the feed).
        session: the :class:`~calibrators.session.CalibrationSession` (data, batch size).
        build_config: the user's :class:`~trtkit.builder.config.BuildConfig`; the statistics engine is built with the
            same profiles, tactic sources, timing cache and optimization level, in FP32.
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
    from trtkit.builder.builder import build_serialized
    from trtkit.runtime.cuda import default_cuda
    from trtkit.runtime.runner import TrtRunner

    inputs = {i.name for i in model.graph.input}
    marked = [t for t in tensors if t not in inputs]
    # The statistics engine only runs the calibration data once: build it fast (optimization level 1).
    level = 1 if build_config.optimization_level is None else min(int(build_config.optimization_level), 1)
    config = replace(build_config, precision="fp32", calibration=None, require_precision=False,
                     profiling_verbosity="NONE", strongly_typed=False, save_qdq_onnx=None, optimization_level=level)
    started = time.perf_counter()
    result = build_serialized(with_outputs(model, marked), config, trt=trt)
    timings: dict[str, Any] = {"engine_build": time.perf_counter() - started, "forward": 0.0, "histograms": 0.0}
    logger.info("Calibration: FP32 statistics engine with %d extra outputs built in %.1f s.", len(marked),
                timings["engine_build"])
    cuda = default_cuda()
    kernels = _histogram_kernels(cuda, where) if marked else None
    timings["histograms_on"] = "gpu" if kernels is not None else "cpu"
    hists, samples = HistogramSet(), 0
    for name in tensors:  # in plan order (the cache's), and before worker threads add to them
        hists.histogram(name)
    workers = threads or min(8, os.cpu_count() or 1)
    with (TrtRunner(result.engine, trt=trt, cuda=cuda, check_manifest=False, device_outputs=kernels is not None)
          as runner, ThreadPoolExecutor(workers) as pool):
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
            raise CalibrationError(f"The GPU calibration histograms are not available ({reason}); use "
                                   f"--calib-histograms cpu (or auto)")
        logger.info("Calibration histograms are computed on the CPU: the GPU kernels did not load (%s).", reason)
    return kernels


def _update_parallel(hists: HistogramSet, arrays: dict, pool) -> None:
    futures = [pool.submit(hists.tensors[name].update, value) for name, value in arrays.items()]
    for future in futures:
        future.result()


def make_qdq_model(trt, model, session, build_config, options: QdqOptions | None = None) -> ExplicitResult:
    """The Q/DQ model for ``model``: amax from a matching cache, or from calibration in TensorRT.

    Args:
        trt: the ``tensorrt`` module.
        model: the FP32 ``onnx.ModelProto``.
        session: a :class:`~calibrators.session.CalibrationSession` (its ``cached`` table is used when present, and
            a new cache is written when calibration runs).
        build_config: the user's build settings (for the statistics engine).
        options: Q/DQ placement settings.

    Raises:
        CalibrationError: a cache lacks ranges for tensors to quantize, or the data is unusable.
    """
    import onnx

    work = onnx.ModelProto()
    work.CopyFrom(model)
    plan = plan_qdq(work, options)
    if session.cached is not None:
        amax = _amax_from_cache(session.cached, plan.activations)
        qdq, plan = insert_qdq(work, amax, plan)
        return ExplicitResult(qdq, plan, amax, from_cache=True)
    started = time.perf_counter()
    hists, samples, timings = collect_histograms(trt, work, plan.activations, session, build_config,
                                                 where=session.settings.histograms)
    seconds = time.perf_counter() - started
    amax = compute_amaxes(hists, session.algorithm, session.settings.percentile)
    session.save(table_from_amaxes(amax, compat.version(trt), session.algorithm), samples=samples)
    logger.info("Calibration (%s): %d tensors from %d samples in %.1f s.", session.algorithm, len(amax), samples,
                seconds)
    qdq, plan = insert_qdq(work, amax, plan, strict=True)
    return ExplicitResult(qdq, plan, amax, samples=samples, seconds=seconds, timings=timings)


def _amax_from_cache(table, tensors: list) -> dict:
    amax = table.amaxes()
    missing = [t for t in tensors if t not in amax]
    if len(missing) == len(tensors) and tensors:
        raise CalibrationError(
            f"The calibration cache has none of the {len(tensors)} tensors to quantize (e.g. '{tensors[0]}'); it was "
            f"made for another model. Delete it to recalibrate."
        )
    return {t: amax[t] for t in tensors if t in amax}
