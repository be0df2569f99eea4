"""The model's own dtypes at the runner's edge, where the engine's differ (INT64 on TensorRT 8.6, FLOAT64 on all,
INT8/INT16/UINT16/UINT32/UINT64 on all).

When the build's boundary rewrites (:mod:`trtkit.builder.rewrites.int64_io`, :mod:`~trtkit.builder.rewrites.narrow_io`)
made an INT64 input or output INT32, a FLOAT64 one FLOAT32, or a UINT16 one INT32, the manifest records the original
dtype (``prepare.original_dtypes``). :class:`ModelDtypes` lets :class:`~trtkit.runtime.runner.TrtRunner` take and
return what the ONNX model takes and returns: inputs are converted to the engine's dtype, refused naming the tensor
when a value does not fit, and outputs converted back.
"""

from __future__ import annotations

import numpy as np

from trtkit.errors import InputError
from trtkit.manifest import read_manifest

_FLOAT32_MAX = float(np.finfo(np.float32).max)


class ModelDtypes:
    """Conversions between the model's dtypes (``{tensor: dtype name}``) and the engine's."""

    def __init__(self, original: dict):
        self.original = {name: np.dtype(dtype) for name, dtype in original.items()}

    @classmethod
    def from_manifest(cls, manifest) -> ModelDtypes | None:
        """From an engine's manifest (``None``: no manifest, or nothing to convert)."""
        original = ((manifest.prepare if manifest is not None else None) or {}).get("original_dtypes") or {}
        return cls(original) if original else None

    def to_engine(self, feed, input_specs) -> dict:
        """``feed`` with each model-dtype array the engine takes in another dtype converted (others as given).

        Raises:
            InputError: a value of an integer input does not fit in the engine's integer type (INT64 or UINT32 in
                INT32), or a finite value of a FLOAT64 input is beyond FLOAT32's range.
        """
        converted = None
        for spec in input_specs:
            wanted = self.original.get(spec.name)
            value = feed.get(spec.name) if hasattr(feed, "get") else None
            if wanted is None or not isinstance(value, np.ndarray) or value.dtype != wanted:
                continue
            if converted is None:
                converted = dict(feed)
            converted[spec.name] = _narrow(spec.name, value, np.dtype(spec.dtype))
        return feed if converted is None else converted

    def to_model(self, outputs: dict) -> dict:
        """Host outputs back in the model's dtypes (device outputs are left in the engine's)."""
        for name, wanted in self.original.items():
            value = outputs.get(name)
            if isinstance(value, np.ndarray) and value.dtype != wanted:
                outputs[name] = value.astype(wanted)
        return outputs


def _narrow(name: str, value: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if dtype.kind == "i" and value.dtype.kind in "iu" and value.size:
        info = np.iinfo(dtype)
        low, high = int(value.min()), int(value.max())
        if low < info.min or high > info.max:
            bad = high if high > info.max else low
            model = value.dtype.name.upper()
            why = "TensorRT without INT64 I/O" if model == "INT64" else f"TensorRT has no {model} I/O"
            raise InputError(
                f"Input '{name}': value {bad} does not fit in {dtype.name.upper()}, which this engine takes for the "
                f"model's {model} ({why}); values must be in [{info.min}, {info.max}]"
            )
    if dtype == np.float32 and value.dtype == np.float64 and value.size:
        finite = value[np.isfinite(value)]
        bad = finite[np.abs(finite) > _FLOAT32_MAX]
        if bad.size:
            raise InputError(
                f"Input '{name}': value {float(bad.flat[0])!r} is beyond FLOAT32's range, which this engine takes "
                f"for the model's FLOAT64 (TensorRT has no FP64 I/O); finite values must be within "
                f"[{-_FLOAT32_MAX:.8g}, {_FLOAT32_MAX:.8g}]"
            )
    return np.ascontiguousarray(value, dtype=dtype)


def engine_manifest(source):
    """The manifest beside an engine file (``None``: the source is not a file, or has no manifest)."""
    import os

    return read_manifest(source) if isinstance(source, (str, os.PathLike)) else None


def with_manifest_values(specs: dict, manifest) -> dict:
    """``specs`` with the min/opt/max values of each shape-tensor input that TensorRT reports short taken from the
    manifest's profiles instead (TensorRT 8.6's bindings report none for a 0-d shape tensor; the build recorded
    what it set). Specs the manifest cannot complete are left as they are."""
    import dataclasses

    build = getattr(manifest, "build", None)
    profiles = (build.profiles if build is not None else None) or []
    if not profiles:
        return specs
    fixed = dict(specs)
    for name, spec in specs.items():
        count = int(np.prod(spec.shape, dtype=np.int64))
        if not spec.is_shape_tensor or all(len(x) == count for v in spec.values for x in v):
            continue
        try:
            values = tuple(
                tuple(tuple(int(d) for d in profiles[p][name][k]) for k in ("min", "opt", "max"))
                for p in range(len(spec.values))
            )
        except (IndexError, KeyError, TypeError, ValueError):
            continue
        if all(len(x) == count for v in values for x in v):
            fixed[name] = dataclasses.replace(spec, values=values)
    return fixed
