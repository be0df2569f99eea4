"""ONNX model in, engine bytes out: network, config, profiles, precision, timing cache, manifest.

``from trtkit.builder import build, BuildConfig, parse_shapes`` gives the main entry points (loaded on first use).
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "build": "trtkit.builder.api",
    "BuildConfig": "trtkit.builder.config",
    "CalibrationSettings": "trtkit.builder.config",
    "Profile": "trtkit.builder.profiles",
    "parse_shapes": "trtkit.builder.profiles",
    "BuildResult": "trtkit.builder.builder",
}


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'trtkit.builder' has no attribute '{name}'")
    return getattr(importlib.import_module(module), name)
