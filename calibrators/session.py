"""One calibration run's settings resolved against a model and a TensorRT: data, batch size, provenance, cache.

Both INT8 paths start here: :func:`prepare` opens the data source, decides the calibration batch size, computes the
provenance of the scales this run would produce, and loads a matching cache (refusing a mismatching one before any
build starts).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from calibrators.cache import CalibrationTable, Provenance, load_cache, write_cache
from calibrators.preprocess import Preprocess
from calibrators.sources import SampleSpec, batches, check_source, checked, open_source
from trtkit.errors import CalibrationError

logger = logging.getLogger("trtkit")

WITHOUT_DATA_FIELDS = ("onnx_sha256", "tensorrt", "algorithm")


@dataclass
class CalibrationSession:
    """Resolved calibration settings.

    Attributes:
        settings: the :class:`~calibrators.settings.CalibrationSettings` given.
        source: the opened data source, or ``None`` when only a cache was given.
        batch_size: samples per calibration batch.
        provenance: what a cache written by this run records (and what a reused cache must match).
        cached: the matching cache's table, or ``None`` (calibrate).
    """

    settings: Any  # a trtkit.builder.config.CalibrationSettings (the builder is a layer above)
    source: object
    batch_size: int
    provenance: Provenance
    cached: CalibrationTable | None = None
    spec: SampleSpec | None = None

    @property
    def algorithm(self) -> str:
        return self.settings.algorithm

    def batches(self):
        """Feed dicts of exactly ``batch_size`` samples, up to ``max_samples``.

        Raises:
            CalibrationError: there is no data to calibrate with.
        """
        if self.source is None:
            raise CalibrationError(
                "INT8 calibration needs data: give --calib DIR (images or .npy/.npz), or a --calib-cache that matches "
                "this model."
            )
        source = checked(self.source, self.spec) if self.spec is not None else self.source
        return batches(source, self.batch_size, self.settings.max_samples)

    def save(self, table_or_bytes, samples: int | None = None) -> None:
        """Write the cache (TensorRT's bytes or a table) and its provenance, if a cache path was given."""
        if not self.settings.cache_path:
            return
        write_cache(self.settings.cache_path, table_or_bytes, replace(self.provenance, samples=samples))
        logger.info("Wrote calibration cache '%s'.", self.settings.cache_path)


def prepare(
    settings, loaded_model, trt_version: str, batch_size: int, spec: SampleSpec | None = None
) -> CalibrationSession:
    """Resolve calibration settings for a model.

    Args:
        settings: :class:`~calibrators.settings.CalibrationSettings` (``None`` is refused with what to give).
        loaded_model: the :class:`~trtkit.model.LoadedModel` being built (its sha256 and inputs).
        trt_version: TensorRT's version string (recorded in provenance).
        batch_size: the calibration batch size.
        spec: what every sample must look like (the model's inputs, dtypes and profile); a folder's files are all
            checked here, before calibrating, and every sample again as it is read.

    Raises:
        CalibrationError: no settings, neither data nor cache, a cache that does not match (lists differences), or a
            sample that does not fit the model (names the file).
    """
    check_settings(settings)
    preprocess = Preprocess(**_preprocess_kwargs(settings.preprocess))
    source = open_source(settings.source, loaded_model.proto, preprocess) if settings.source is not None else None
    if source is not None and spec is not None:
        check_source(source, spec)
        spec = SampleSpec(spec.inputs, spec.dtypes, spec.ranges)  # the shapes seen by the check are not kept
    provenance = Provenance(
        onnx_sha256=loaded_model.sha256,
        tensorrt=trt_version,
        algorithm=settings.algorithm,
        preprocess=_effective_preprocess(source, preprocess),
        data_digest=source.identity() if source is not None else None,
        batch_size=batch_size,
        max_samples=settings.max_samples,
    )
    cached = None
    if settings.cache_path:
        # Without data only the model, TensorRT and algorithm can be compared.
        fields = None if source is not None else WITHOUT_DATA_FIELDS
        cached = load_cache(settings.cache_path, provenance, force=settings.force, fields=fields)
    return CalibrationSession(settings, source, batch_size, provenance, cached, spec)


def check_settings(settings, loaded_model=None) -> None:
    """What a CPU can tell of calibration settings before any work: there is data or a cache to calibrate from,
    and a data folder (given ``loaded_model``) holds files of a kind it takes for that model. Reads no sample.

    Raises:
        CalibrationError: no settings, neither data nor an existing cache, or a folder with no usable files.
    """
    if settings is None or (settings.source is None and not settings.cache_path):
        raise CalibrationError(
            "INT8 needs calibration data: give an image folder or .npy/.npz files, and optionally a calibration "
            "cache, or a Q/DQ model.",
            field="calibration.source",
        )
    if settings.source is None and not Path(settings.cache_path).exists():
        raise CalibrationError(
            f"Calibration cache '{settings.cache_path}' does not exist and no calibration data was given.",
            field="calibration.source",
        )
    if loaded_model is not None and isinstance(settings.source, (str, Path)):
        open_source(settings.source, loaded_model.proto, Preprocess(**_preprocess_kwargs(settings.preprocess)))


def _preprocess_kwargs(data: dict | None) -> dict:
    data = dict(data or {})
    for key in ("size", "mean", "std"):
        if key in data and data[key] is not None:
            data[key] = tuple(data[key])
    return data


def _effective_preprocess(source, preprocess: Preprocess) -> dict | None:
    settings = getattr(source, "settings", None)
    if settings is not None:
        return settings.to_dict()
    return None if source is None else {"arrays": True}
