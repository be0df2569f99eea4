"""Lazy imports: heavy, optional dependencies with errors that say how to install them, and packages whose public
names load their module on first access (:func:`lazy_exports`)."""

from __future__ import annotations

import importlib
from functools import lru_cache

from trtkit.errors import DependencyError

_CUDA_PYTHON = (
    "cuda-python is not installed. Run `pip install 'cuda-python>=12.6'` (12.x for CUDA 12 drivers, "
    "13.x needs Python >= 3.11 and a CUDA 13 driver)."
)
_HINTS = {
    "tensorrt": (
        "TensorRT's Python package is not installed. Install the build matching your CUDA driver, e.g. "
        "`pip install tensorrt` (or `pip install 'trtkit[tensorrt]'`); `trtkit doctor` checks the setup."
    ),
    "cuda.bindings.runtime": _CUDA_PYTHON,
    "cuda.bindings.driver": _CUDA_PYTHON,
}


@lru_cache(maxsize=None)
def import_module(name: str):
    """Import ``name`` on first use; raise :class:`DependencyError` with an install hint if it is missing."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        hint = _HINTS.get(name, f"Install the package that provides `{name}`.")
        raise DependencyError(f"{hint} (import of `{name}` failed: {exc})") from exc


def tensorrt():
    """The ``tensorrt`` module (imported on first call)."""
    return import_module("tensorrt")


def _cuda_python(name: str, legacy: str):
    """``name`` from cuda-python >= 12.6, else its pre-12.6 location ``legacy``."""
    try:
        return import_module(name)
    except DependencyError as missing:
        try:
            return importlib.import_module(legacy)
        except ImportError:
            raise missing from None


def cudart():
    """cuda-python's runtime bindings, ``cuda.bindings.runtime`` (``cuda.cudart`` on cuda-python < 12.6)."""
    return _cuda_python("cuda.bindings.runtime", "cuda.cudart")


def cuda_driver():
    """cuda-python's driver bindings, ``cuda.bindings.driver`` (falls back to ``cuda.cuda`` on cuda-python < 12.6)."""
    return _cuda_python("cuda.bindings.driver", "cuda.cuda")


def lazy_exports(package: str, exports: dict, namespace: dict):
    """A package's module ``__getattr__`` that imports a public name's module on first access and keeps the value.

    Args:
        package: the package's name (for the ``AttributeError`` of an unknown name).
        exports: public name -> module that defines it.
        namespace: the package's ``globals()``, where a loaded value is kept.
    """

    def __getattr__(name: str):
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module '{package}' has no attribute '{name}'")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
