"""trtkit: ONNX to fast, correct TensorRT engines, run from Python with nothing in the way.

Importing trtkit imports neither TensorRT nor cuda-python: public names load their module on first access.
"""

from __future__ import annotations

__version__ = "0.1.0"

from trtkit._lazy import lazy_exports  # noqa: E402  (light: no heavy imports)
from trtkit.errors import TrtkitError  # noqa: E402

# public name -> module that defines it
_EXPORTS = {
    "TrtRunner": "trtkit.runtime.runner",
    "build": "trtkit.builder.api",
    "BuildConfig": "trtkit.builder.config",
    "Profile": "trtkit.builder.profiles",
    "parse_shapes": "trtkit.builder.profiles",
    "load_engine": "trtkit.runtime.engine",
    "prepare": "trtkit.builder.prepare",
}

__all__ = ["TrtkitError", "__version__", *_EXPORTS]

__getattr__ = lazy_exports(__name__, _EXPORTS, globals())
