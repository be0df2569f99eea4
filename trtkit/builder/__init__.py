"""ONNX model in, engine bytes out: network, config, profiles, precision, timing cache, manifest.

``from trtkit.builder import build, BuildConfig, parse_shapes`` gives the main entry points (loaded on first use).
"""

from __future__ import annotations

from trtkit._lazy import lazy_exports

_EXPORTS = {
    "build": "trtkit.builder.api",
    "BuildConfig": "trtkit.builder.config",
    "CalibrationSettings": "trtkit.builder.config",
    "Profile": "trtkit.builder.profiles",
    "parse_shapes": "trtkit.builder.profiles",
    "BuildResult": "trtkit.builder.result",
    "shape_tensor_inputs": "trtkit.builder.builder",
}


__getattr__ = lazy_exports(__name__, _EXPORTS, globals())
