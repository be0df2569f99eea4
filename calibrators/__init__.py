"""Calibration data sources and algorithms (entropy, min-max, percentile) and calibration cache files.

- :mod:`calibrators.sources`: image folders, ``.npy``/``.npz`` folders, iterables of feed dicts; batching.
- :mod:`calibrators.preprocess`: resize/letterbox, channel order, scale, mean/std, layout.
- :mod:`calibrators.histogram` and :mod:`calibrators.algorithms`: vectorized histograms and amax per algorithm.
- :mod:`calibrators.cache`: TensorRT's cache text format and the provenance sidecar.
- :mod:`calibrators.session`: settings resolved against a model (data, batch size, provenance, cache reuse).
- :mod:`calibrators.trt_calibrator`: TensorRT's own calibrators (8.6 to 10.x) fed through cuda-python.
"""

from calibrators.algorithms import ALGORITHMS, compute_amax, compute_amaxes
from calibrators.cache import CalibrationTable, Provenance, load_cache, parse_cache, write_cache
from calibrators.histogram import Histogram, HistogramSet
from calibrators.preprocess import Preprocess, parse_preprocess
from calibrators.sources import ArrayFolderSource, ImageFolderSource, IterableSource, batches, open_source

__all__ = [
    "ALGORITHMS", "compute_amax", "compute_amaxes", "CalibrationTable", "Provenance", "load_cache", "parse_cache",
    "write_cache", "Histogram", "HistogramSet", "Preprocess", "parse_preprocess", "ArrayFolderSource",
    "ImageFolderSource", "IterableSource", "batches", "open_source",
]
