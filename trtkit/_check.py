"""Argument checks for public entry points: each raises :class:`~trtkit.errors.UsageError` naming the argument
(``field``) and what it accepts (``accepted``), instead of letting a wrong type surface later as an AttributeError,
a TypeError or a silently wrong value (``"yes"`` taken as True, ``"CUDNN"`` split into letters)."""

from __future__ import annotations

import os

from trtkit.errors import UsageError


def fail(field: str, value, accepted: str):
    raise UsageError(f"{field} must be {accepted}, not {_show(value)}", field=field, accepted=accepted)


def boolean(field: str, value) -> bool:
    if not isinstance(value, bool):
        fail(field, value, "True or False")
    return value


def integer(field: str, value, *, low: int | None = None, high: int | None = None, optional: bool = False):
    """An int (not a bool) within ``low..high``; ``None`` passes when ``optional``."""
    if value is None and optional:
        return None
    accepted = _range_text("an integer", low, high)
    if isinstance(value, bool) or not isinstance(value, int) and not _is_numpy(value, "iu"):
        fail(field, value, accepted)
    value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        fail(field, value, accepted)
    return value


def number(
    field: str,
    value,
    *,
    low: float | None = None,
    high: float | None = None,
    optional: bool = False,
    above: float | None = None,
):
    """An int or float within ``low..high`` (and strictly above ``above``); ``None`` passes when ``optional``."""
    if value is None and optional:
        return None
    accepted = _range_text(
        f"a number above {above}" if above is not None else "a number",
        low,
        high,
        joint=" and" if above is not None else "",
    )
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not _is_numpy(value, "iuf"):
        fail(field, value, accepted)
    value = float(value)
    if (
        value != value
        or (low is not None and value < low)
        or (high is not None and value > high)
        or (above is not None and value <= above)
    ):
        fail(field, value, accepted)
    return value


def choice(field: str, value, allowed) -> str:
    if not isinstance(value, str) or value not in allowed:
        fail(field, value, "one of " + ", ".join(repr(a) for a in allowed))
    return value


def path(field: str, value, *, optional: bool = False):
    """A non-empty ``str`` or ``os.PathLike``; ``None`` passes when ``optional``."""
    if value is None and optional:
        return None
    accepted = "a file path (str or pathlib.Path)"
    if not isinstance(value, (str, os.PathLike)) or str(os.fspath(value)) == "":
        fail(field, value, accepted)
    return value


def paths(field: str, value) -> tuple:
    """A tuple of path strings from a list/tuple of non-empty ``str`` or ``os.PathLike``."""
    if isinstance(value, (str, bytes, os.PathLike)) or not isinstance(value, (list, tuple)):
        fail(field, value, "a list of file paths")
    return tuple(os.fspath(path(field, v)) for v in value)


def names(field: str, value, *, optional: bool = False):
    """A tuple of non-empty strings from a list/tuple of them (a bare string is refused: it would split into
    letters); ``None`` passes when ``optional``."""
    if value is None and optional:
        return None
    accepted = "a list or tuple of names (str)"
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, set, frozenset)):
        fail(field, value, accepted)
    if not all(isinstance(v, str) and v.strip() for v in value):
        fail(field, value, accepted)
    return tuple(value)


def instance(field: str, value, kinds, accepted: str, *, optional: bool = False):
    if value is None and optional:
        return None
    if not isinstance(value, kinds):
        fail(field, value, accepted)
    return value


def callable_(field: str, value, *, optional: bool = True):
    if value is None and optional:
        return None
    if not callable(value):
        fail(field, value, "a function")
    return value


def _range_text(kind: str, low, high, joint: str = "") -> str:
    if low is not None and high is not None:
        return f"{kind} from {low} to {high}"
    if low is not None:
        return f"{kind}{joint} >= {low}"
    if high is not None:
        return f"{kind}{joint} <= {high}"
    return kind


def _is_numpy(value, kinds: str) -> bool:
    return type(value).__module__ == "numpy" and hasattr(value, "dtype") and value.dtype.kind in kinds


def _show(value) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return text if type(value) in (int, float, str, bool, type(None)) else f"{text} ({type(value).__name__})"
