"""Validation of the inputs given to a runner: names, dtypes, shapes within the active profile.

Everything here runs before anything is enqueued, and every message names the input, what came and what the engine
accepts, e.g. ``Input 'images': shape (1, 3, 640, 641) is outside profile 0 (min (1, 3, 640, 640), max (8, 3, 640,
640))``.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

import numpy as np

from trtkit.errors import InputError
from trtkit.runtime.buffers import device_input


def validate_feed(feed, specs: tuple, index: dict, profile: int, known: set | None = None) -> list:
    """Check ``feed`` against the engine's input ``specs`` (``index``: name → position).

    ``known``: ``(name, shape)`` pairs already found inside ``profile`` (a caller's cache, filled here), so a shape
    seen before skips the range check.

    Returns:
        ``[(numpy array or None, DeviceInput or None)]`` per input, in engine order.

    Raises:
        InputError: not a mapping, a missing/unknown input, a wrong dtype, or a shape outside ``profile``.
    """
    if not isinstance(feed, Mapping):
        raise InputError(
            f"infer expects a dict of input name -> array, got {type(feed).__name__}; the "
            f"engine's inputs are {_names(specs)}"
        )
    if feed.keys() != index.keys():
        _raise_name_error(feed, specs, index)
    return [check_input(spec, feed[spec.name], profile, known) for spec in specs]


def _names(specs) -> str:
    return ", ".join(f"'{s.name}'" for s in specs)


def _closest(name: str, candidates: list) -> str | None:
    """The candidate ``name`` was probably meant to be (case-insensitive), or None."""
    lowered = {c.lower(): c for c in candidates}
    match = difflib.get_close_matches(name.lower(), list(lowered), n=1)
    return lowered[match[0]] if match else None


def _raise_name_error(feed, specs, index) -> None:
    expected = [s.name for s in specs]
    unknown = [n for n in feed if n not in index]
    missing = [n for n in expected if n not in feed]
    parts = []
    for name in unknown:
        close = _closest(str(name), missing or expected)
        parts.append(f"unknown input '{name}'" + (f" (did you mean '{close}'?)" if close else ""))
    if missing:
        parts.append("missing input(s) " + ", ".join(f"'{n}'" for n in missing))
    text = "; ".join(parts)
    raise InputError(f"{text[:1].upper()}{text[1:]}; the engine's inputs are {_names(specs)}")


def check_input(spec, value, profile: int, known: set | None = None) -> tuple:
    """``(array, None)`` for host data, ``(None, DeviceInput)`` for device data; raises on dtype or shape."""
    dev = None if type(value) is np.ndarray else device_input(spec.name, value)  # the common case first
    if dev is not None:
        array, shape, dtype = None, dev.shape, dev.dtype
    else:
        array = value if isinstance(value, np.ndarray) else np.asarray(value)
        shape, dtype = array.shape, array.dtype
    if dtype != spec.dtype:
        raise InputError(
            f"Input '{spec.name}': dtype {dtype}, expected {spec.dtype} (convert with .astype(numpy.{spec.dtype.name}))"
        )
    if known is not None and (spec.name, shape) in known:
        return array, dev
    lo, _, hi = spec.profiles[profile]
    if len(shape) != len(lo) or any(not a <= d <= b for a, d, b in zip(lo, shape, hi)):
        what = f"has rank {len(shape)}, expected rank {len(lo)};" if len(shape) != len(lo) else "is outside"
        raise InputError(
            f"Input '{spec.name}': shape {tuple(shape)} {what} profile {profile} (min {tuple(lo)}, max {tuple(hi)})"
        )
    if known is not None:
        known.add((spec.name, shape))
    return array, dev


def check_shape_values(spec, value, profile: int) -> tuple:
    """The values of shape-tensor input ``spec`` given as ``value`` (a numpy array or list), checked against its
    dtype, its shape and ``profile``'s min and max values.

    Raises:
        InputError: a device array (TensorRT reads shape tensors on the host), a wrong dtype or shape, or values
            outside the profile (the message names the input and the range).
    """
    count = int(np.prod(spec.shape, dtype=np.int64))
    what = f"a shape tensor of {count} {spec.dtype.name} value(s)"
    if type(value) is not np.ndarray and device_input(spec.name, value) is not None:
        raise InputError(
            f"Input '{spec.name}' is {what}: TensorRT reads its values on the host, so give them as a numpy array, "
            f"not a device array"
        )
    array = np.asarray(value)
    if array.dtype != spec.dtype:
        raise InputError(
            f"Input '{spec.name}' ({what}): dtype {array.dtype}, expected {spec.dtype} (convert with "
            f".astype(numpy.{spec.dtype.name}))"
        )
    if array.shape != tuple(spec.shape):
        raise InputError(f"Input '{spec.name}': shape {array.shape}, expected {tuple(spec.shape)} ({what})")
    values = tuple(int(v) for v in array.reshape(-1))
    lo, _, hi = spec.values[profile]
    if any(not a <= v <= b for a, v, b in zip(lo, values, hi)):
        raise InputError(
            f"Input '{spec.name}': values {values} are outside profile {profile} (min {tuple(lo)}, max {tuple(hi)}); "
            f"it is {what}"
        )
    return values
