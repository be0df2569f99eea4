"""Calibration, in one place: data, statistics, algorithms, caches, and both INT8 paths' calibration runs.

- :mod:`calibrators.settings`: :class:`CalibrationSettings`, what a build asks of calibration.
- :mod:`calibrators.sources`: image folders, ``.npy``/``.npz`` folders, iterables of feed dicts; batching.
- :mod:`calibrators.preprocess`: resize/letterbox, channel order, scale, mean/std, layout.
- :mod:`calibrators.histogram` and :mod:`calibrators.algorithms`: vectorized histograms and amax per algorithm.
- :mod:`calibrators.device_histogram`: the same histograms binned on the GPU (CUDA kernels shipped as PTX).
- :mod:`calibrators.cache`: TensorRT's cache text format and the provenance sidecar.
- :mod:`calibrators.session`: settings resolved against a model (data, batch size, provenance, cache reuse).
- :mod:`calibrators.statistics`: the statistics pass of the Q/DQ path (the FP32 engine run over the data in TensorRT,
  its tensors histogrammed); :mod:`calibrators.explicit`: amax from it (or a cache) and the Q/DQ model.
- :mod:`calibrators.trt_calibrator`: TensorRT's own calibrators (8.6 to 10.x) fed through cuda-python.

Importing ``calibrators`` loads nothing else: the names below load their module on first use.
"""

from __future__ import annotations

from trtkit._lazy import lazy_exports

# public name -> module that defines it
_EXPORTS = {
    "ALGORITHMS": "calibrators.algorithms",
    "compute_amax": "calibrators.algorithms",
    "compute_amaxes": "calibrators.algorithms",
    "CalibrationTable": "calibrators.cache",
    "Provenance": "calibrators.cache",
    "load_cache": "calibrators.cache",
    "parse_cache": "calibrators.cache",
    "write_cache": "calibrators.cache",
    "Histogram": "calibrators.histogram",
    "HistogramSet": "calibrators.histogram",
    "Preprocess": "calibrators.preprocess",
    "parse_preprocess": "calibrators.preprocess",
    "ArrayFolderSource": "calibrators.sources",
    "ImageFolderSource": "calibrators.sources",
    "IterableSource": "calibrators.sources",
    "batches": "calibrators.sources",
    "open_source": "calibrators.sources",
    "CalibrationSettings": "calibrators.settings",
}

__all__ = list(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS, globals())
