"""Explicit INT8 made by trtkit: amax from a matching cache or from calibration in TensorRT, then the Q/DQ model.

1. :func:`~trtkit.quant.qdq.plan_qdq` picks the tensors to quantize.
2. :func:`calibrators.statistics.collect_histograms` histograms them over the calibration data in TensorRT.
3. amax per tensor with the chosen algorithm (:mod:`calibrators.algorithms`); a calibration cache in TensorRT's
   format is written, and a matching cache (ours or TensorRT's own) skips steps 2-3.
4. :func:`~trtkit.quant.qdq.insert_qdq` makes the Q/DQ model.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable

from calibrators.algorithms import compute_amaxes
from calibrators.cache import table_from_amaxes
from calibrators.statistics import collect_histograms
from trtkit import _version_compat as compat
from trtkit.errors import CalibrationError
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


def make_qdq_model(
    trt, model, session, build_engine: Callable[[object], bytes], options: QdqOptions | None = None
) -> ExplicitResult:
    """The Q/DQ model for ``model``: amax from a matching cache, or from calibration in TensorRT.

    Args:
        trt: the ``tensorrt`` module.
        model: the FP32 ``onnx.ModelProto``.
        session: a :class:`~calibrators.session.CalibrationSession` (its ``cached`` table is used when present, and
            a new cache is written when calibration runs).
        build_engine: builds the FP32 statistics engine, ``onnx.ModelProto -> serialized engine`` (see
            :func:`~calibrators.statistics.collect_histograms`).
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
    hists, samples, timings = collect_histograms(
        trt, work, plan.activations, session, build_engine, where=session.settings.histograms
    )
    seconds = time.perf_counter() - started
    amax = compute_amaxes(hists, session.algorithm)
    session.save(table_from_amaxes(amax, compat.version(trt), session.algorithm), samples=samples)
    logger.info(
        "Calibration (%s): %d tensors from %d samples in %.1f s.", session.algorithm, len(amax), samples, seconds
    )
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
