"""The statistics pass of trtkit's own calibration on the CPU: the FP32 model run in ONNX Runtime, no TensorRT.

:func:`collect_histograms_cpu` gives what :func:`calibrators.statistics.collect_histograms` gives (one
:class:`~calibrators.histogram.HistogramSet` over the calibration batches, in the plan's tensor order) where no GPU
is at hand. ONNX Runtime is optional (``pip install 'trtkit[eval]'``) and imported on first use; graph optimizations
are off, so the marked tensors are the ones the graph names.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from calibrators.histogram import DEFAULT_BINS, HistogramSet
from trtkit.errors import CalibrationError
from trtkit.model import onnxruntime_session, with_outputs


def collect_histograms_cpu(model, tensors: list, feeds: Iterable[dict], *, bins: int = DEFAULT_BINS):
    """Histograms of ``tensors`` over ``feeds``, computed by running the FP32 model in ONNX Runtime.

    Args:
        model: the FP32 ``onnx.ModelProto``.
        tensors: names of the tensors to histogram (graph inputs are read from the feed).
        feeds: calibration batches, ``{input name: array}`` (e.g. :meth:`CalibrationSession.batches`).
        bins: histogram bins per tensor.

    Returns:
        ``(HistogramSet, samples)``.

    Raises:
        DependencyError: onnxruntime is not installed.
        CalibrationError: a tensor is not in the model, or ONNX Runtime failed on a batch (its reason).
    """
    inputs = {i.name for i in model.graph.input}
    known = inputs | {out for node in model.graph.node for out in node.output}
    unknown = [t for t in tensors if t not in known]
    if unknown:
        raise CalibrationError(f"The model has no tensor(s) {', '.join(unknown[:5])} to calibrate.")
    marked = [t for t in tensors if t not in inputs]
    session = _session(with_outputs(model, marked)) if marked else None
    hists, samples = HistogramSet(bins), 0
    for name in tensors:
        hists.histogram(name)
    for feed in feeds:
        hists.update({t: feed[t] for t in tensors if t in inputs})
        if session is not None:
            try:
                values = session.run(marked, dict(feed))
            except Exception as exc:  # onnxruntime raises its own exception types
                raise CalibrationError(f"ONNX Runtime failed on a calibration batch: {exc}") from exc
            hists.update(dict(zip(marked, values)))
        samples += int(np.shape(next(iter(feed.values())))[0])
    return hists, samples


def _session(model):
    return onnxruntime_session(
        model,
        "Calibration on the CPU runs the model in ONNX Runtime: pip install onnxruntime (or 'trtkit[eval]'); "
        "or calibrate in TensorRT on a GPU machine.",
    )
