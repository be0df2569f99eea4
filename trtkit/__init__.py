"""trtkit: ONNX to fast, correct TensorRT engines, run from Python with nothing in the way.

Importing trtkit imports neither TensorRT nor cuda-python: public names load their module on first access.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

from trtkit.errors import TrtkitError  # noqa: E402  (light: no heavy imports)

# public name -> module that defines it
_EXPORTS = {
    "TrtRunner": "trtkit.runtime.runner",
    "build": "trtkit.builder.api",
    "build_engine": "trtkit.builder.api",
    "BuildConfig": "trtkit.builder.config",
    "Profile": "trtkit.builder.profiles",
    "parse_shapes": "trtkit.builder.profiles",
    "load_engine": "trtkit.runtime.engine",
    "prepare": "trtkit.builder.prepare",
}

__all__ = ["TrtkitError", "__version__", *_EXPORTS]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'trtkit' has no attribute '{name}'")
    # ``build_engine`` is the older name of ``trtkit.build``; both stay public.
    value = getattr(importlib.import_module(module), "build" if name == "build_engine" else name)
    globals()[name] = value
    return value
