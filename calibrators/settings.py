"""What INT8 calibration is asked to do: data, cache, algorithm, batch, preprocessing, where histograms are binned.

A plain dataclass, part of a :class:`trtkit.builder.config.BuildConfig` (and importable from there); the values are
checked when that config is made.
"""

from __future__ import annotations

from dataclasses import dataclass, field

CALIB_ALGORITHMS = ("entropy", "minmax", "mse")
HISTOGRAM_DEVICES = ("auto", "gpu", "cpu")
# ``algorithm=None``: the path's own default. TensorRT's calibrators have entropy and min-max only; for the Q/DQ
# model trtkit makes, MSE keeps a detector's accuracy closest to FP32.
DEFAULT_ALGORITHMS = {"calibrator": "entropy", "qdq": "mse"}


@dataclass
class CalibrationSettings:
    """Where INT8 calibration data comes from and how it is turned into scales.

    Attributes:
        source: an image folder, a folder of .npy/.npz files, or an iterable of feed dicts.
        cache_path: calibration cache file (TensorRT text format) to reuse or write.
        algorithm: ``entropy``, ``minmax`` or ``mse`` (the last: Q/DQ path only); ``None``
            (the default) takes the path's own default, ``DEFAULT_ALGORITHMS``: entropy for TensorRT's
            calibrator, mse for the Q/DQ model made by trtkit.
        max_samples: cap on the number of samples used.
        batch_size: calibration batch size (default: the profile's opt batch).
        force: reuse a cache even when its provenance does not match.
        preprocess: image preprocessing settings (resize mode, channel order, scale, mean, std, layout).
        histograms: where trtkit's own calibration (Q/DQ path) bins activations: ``gpu`` (CUDA kernels next to the
            engine's outputs), ``cpu`` (numpy, after copying them to the host) or ``auto`` (GPU, else CPU). Both give
            the same histograms.
    """

    source: object = None
    cache_path: str | None = None
    algorithm: str | None = None
    max_samples: int | None = None
    batch_size: int | None = None
    force: bool = False
    preprocess: dict = field(default_factory=dict)
    histograms: str = "auto"
