"""ONNX model in, engine bytes out: network, config, profiles, precision, timing cache, manifest.

``from trtkit.build import build, BuildConfig, parse_shapes`` gives the main entry points (loaded on first use).
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "build": "trtkit.build.api",
    "BuildConfig": "trtkit.build.config",
    "CalibrationSettings": "trtkit.build.config",
    "Profile": "trtkit.build.profiles",
    "parse_shapes": "trtkit.build.profiles",
    "BuildResult": "trtkit.build.builder",
}


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'trtkit.build' has no attribute '{name}'")
    return getattr(importlib.import_module(module), name)
