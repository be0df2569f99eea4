"""The ONNX model's own outputs on CPU: ONNX Runtime where it is installed, else onnx's ReferenceEvaluator.

ONNX Runtime is never required: the reference evaluator ships with ``onnx``. It is slow (pure numpy, one node at a
time) and fails on some real models that ONNX Runtime runs, so :func:`default_backend` takes ONNX Runtime where it is
installed (``pip install 'trtkit[eval]'``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

import numpy as np

from trtkit.errors import ModelError, first_line
from trtkit.model import onnxruntime_session

BACKENDS = ("onnx-reference", "onnxruntime")
# what a failure in onnx's evaluator adds: DETR exports, for one, trip its GatherElements (numpy.choose's 64 arrays)
ONNXRUNTIME_FIX = (
    "; onnxruntime runs models onnx's evaluator cannot (numpy limits, ops of older opsets): pip install "
    "'trtkit[eval]' and take the onnxruntime reference"
)


def default_backend() -> str:
    """ "onnxruntime" where the package is installed, else "onnx-reference"."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return "onnx-reference"
    return "onnxruntime"


def load_model(model):
    """An ``onnx.ModelProto`` from a path, bytes or a ModelProto (external data is loaded beside a path).

    Raises:
        ModelError: the file does not exist or is not a readable ONNX model.
    """
    import onnx

    if isinstance(model, onnx.ModelProto):
        return model
    from trtkit.model import load_model as load_checked

    # the builder's loader: empty files, empty graphs and non-ONNX files are named as such
    return load_checked(model if not isinstance(model, os.PathLike) else Path(os.fspath(model)), check=False).proto


def describe_model(model) -> str:
    """A short description of a model argument for reports: its path, or the kind of object."""
    if isinstance(model, (str, os.PathLike)):
        return str(model)
    return "<bytes>" if isinstance(model, (bytes, bytearray, memoryview)) else "<ModelProto>"


class OnnxReference:
    """Runs an ONNX model on CPU: a callable ``feed -> {output name: array}`` in the graph's output order.

    Args:
        model: path, bytes or ``onnx.ModelProto``.
        backend: "onnx-reference" (``onnx.reference.ReferenceEvaluator``, always available), "onnxruntime"
            (CPU execution provider; needs the package) or None for :func:`default_backend`.

    Raises:
        ModelError: the model cannot be read or the evaluator refuses it.
        DependencyError: onnxruntime was asked for and is not installed.
    """

    def __init__(self, model, *, backend: str | None = None):
        backend = backend or default_backend()
        if backend not in BACKENDS:
            raise ModelError(f"Unknown reference backend '{backend}'; use one of: {', '.join(BACKENDS)}.")
        self.backend = backend
        self.model = load_model(model)
        self.output_names = [o.name for o in self.model.graph.output]
        self._session = self._make_session()

    def _make_session(self):
        if self.backend == "onnxruntime":
            return onnxruntime_session(
                self.model,
                "The onnxruntime reference backend needs `pip install onnxruntime`; or use the default "
                "'onnx-reference' backend, which needs nothing more.",
            )
        from onnx.reference import ReferenceEvaluator

        try:
            return ReferenceEvaluator(self.model)
        except Exception as exc:  # the evaluator raises plain exceptions for unsupported ops
            raise ModelError(f"onnx's reference evaluator cannot run this model: {exc}") from exc

    def __call__(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the model on one feed.

        Raises:
            ModelError: the backend failed on these inputs (the message carries the backend's reason).
        """
        try:
            values = self._session.run(self.output_names, dict(feed))
        except Exception as exc:
            fix = "" if self.backend == "onnxruntime" else ONNXRUNTIME_FIX
            raise ModelError(f"The ONNX model failed to run in {self.backend}: {first_line(exc)}{fix}") from exc
        return {name: np.asarray(value) for name, value in zip(self.output_names, values)}
