"""What evaluation runs: an engine (through trtkit's runner) or an ONNX model (through the parity reference).

``open_model`` gives one shape to both: ``infer(feed) -> outputs``, the image input's name, its ``(H, W)`` and the
largest batch it takes.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from trtkit.errors import InputError

DEFAULT_MAX_BATCH = 64
LETTERBOX_PLACES = ("auto", "gpu", "cpu")


@dataclass
class Model:
    """A model ready to evaluate.

    Attributes:
        infer: ``{input name: array} -> {output name: array}``.
        input_name: the image input.
        input_shape: its shape, ``(N, C, H, W)`` (``(N, H, W, C)`` for a uint8 input: an engine built with
            ``input_uint8_nhwc``), the batch possibly symbolic.
        max_batch: the largest batch ``infer`` takes.
        kind: ``"engine"``, ``"onnx"`` or ``"callable"``.
        description: for reports (a path, usually).
        input_dtype: the numpy dtype the image input takes (``None``: float32, or whatever ``infer`` casts from).
        runner: the engine's ``TrtRunner`` (``None`` for other kinds): what the GPU letterbox queues its work on.
        outputs: output name → shape (``None``: not known before ``infer`` runs).
    """

    infer: Callable
    input_name: str
    input_shape: tuple
    max_batch: int = DEFAULT_MAX_BATCH
    kind: str = "callable"
    description: str = "<callable>"
    input_dtype: Any = None
    runner: Any = None
    outputs: dict | None = None

    @property
    def layout(self) -> str:
        """``"NHWC"`` for a uint8 image input (pixels as they are), else ``"NCHW"``."""
        return "NHWC" if self.input_dtype is not None and np.dtype(self.input_dtype) == np.uint8 else "NCHW"

    @property
    def input_size(self) -> tuple[int, int]:
        """``(H, W)`` of the image input.

        Raises:
            InputError: the input is not NCHW with fixed height and width.
        """
        shape = tuple(self.input_shape)
        hw = shape[1:3] if self.layout == "NHWC" else shape[2:]
        if len(shape) != 4 or not all(isinstance(d, int) and d > 0 for d in hw):
            raise InputError(
                f"Input '{self.input_name}' of {self.description} has shape {shape}; evaluation needs an "
                f"{self.layout} image input with a fixed height and width."
            )
        return int(hw[0]), int(hw[1])

    def letterbox(self, *, reuse: bool = False, **norm):
        """A :class:`trtkit.detection.Letterbox` making this model's input batches (its layout and dtype; ``norm``:
        its ``mean`` and ``std``).

        Raises:
            InputError: the input is not an image input with a fixed height and width.
        """
        from trtkit.detection import Letterbox

        # float batches are made in float32 whatever the input's float type (``infer`` casts)
        dtype = np.uint8 if self.layout == "NHWC" else np.float32
        return Letterbox.for_input(self.input_shape, dtype, reuse=reuse, **norm)

    def pick_letterbox(self, where: str = "auto", *, reuse: bool = False):
        """The letterbox for this model's input and why it is that one: ``(letterbox, reason)``.

        Args:
            where: ``"gpu"``: :class:`trtkit.runtime.letterbox.DeviceLetterbox` (resize, pad and conversion on the
                GPU, in the engine's stream; its batches are device arrays); ``"cpu"``: :meth:`letterbox` (numpy);
                ``"auto"``: the GPU one where it can load, else the numpy one.
            reuse: for the numpy letterbox (:meth:`letterbox`).

        The chosen letterbox's ``where`` is ``"gpu"`` or ``"cpu"``; ``reason`` says why the numpy one was taken
        (``None`` for the GPU one).

        Raises:
            InputError: ``where`` is unknown; ``"gpu"`` was asked for and cannot be had (the message says why); the
                input is not an image input (:meth:`letterbox`).
        """
        if where not in LETTERBOX_PLACES:
            raise InputError(f"Letterbox place '{where}' is not known; use one of: {', '.join(LETTERBOX_PLACES)}.")
        reason = "asked for the numpy letterbox"
        if where != "cpu":
            if self.runner is None:
                reason = f"{self.description} does not run through TensorRT"
            else:
                from trtkit.runtime.letterbox import device_letterbox

                gpu, reason = device_letterbox(self.runner, self.input_name)
                if gpu is not None:
                    return gpu, None
            if where == "gpu":
                raise InputError(f"The GPU letterbox cannot run for {self.description}: {reason}.")
        return self.letterbox(reuse=reuse), reason


def is_onnx(target) -> bool:
    try:
        import onnx
    except ImportError:  # pragma: no cover - onnx is a dependency
        return False
    if isinstance(target, onnx.ModelProto):
        return True
    return isinstance(target, (str, os.PathLike)) and Path(target).suffix.lower() == ".onnx"


@contextlib.contextmanager
def open_model(target, *, runner_options: dict | None = None):
    """Yield a :class:`Model` for an engine file, an ONNX file or ``ModelProto``, or a :class:`Model` itself.

    Raises:
        InputError: the model has no single image input.
        EngineError, ModelError: the engine or ONNX file cannot be loaded.
    """
    if isinstance(target, Model):
        yield target
    elif is_onnx(target):
        yield onnx_model(target)
    else:
        with engine_model(target, runner_options or {}) as model:
            yield model


def onnx_model(target) -> Model:
    """The ONNX model on the CPU: onnxruntime where installed, onnx's reference evaluator otherwise."""
    from onnx import helper

    from trtkit.parity.reference import OnnxReference, default_backend, describe_model, load_model

    model = load_model(target)
    initializers = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    if len(inputs) != 1:
        raise InputError(
            f"Evaluation needs a model with one image input; {describe_model(target)} has "
            f"{len(inputs)}: {', '.join(i.name for i in inputs)}."
        )
    dims = _sized(_dims(inputs[0]), model)
    max_batch = dims[0] if dims and isinstance(dims[0], int) else DEFAULT_MAX_BATCH
    backend = default_backend()
    if backend == "onnx-reference":
        logging.getLogger("trtkit").warning(
            "onnxruntime is not installed: %s runs in onnx's reference evaluator, which is slow on real models "
            "(pip install 'trtkit[eval]' installs onnxruntime)",
            describe_model(target),
        )
    reference = OnnxReference(model, backend=backend)
    elem = inputs[0].type.tensor_type.elem_type
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem)) if elem else None
    description = f"{describe_model(target)} ({backend})"
    outputs = {o.name: _dims(o) for o in model.graph.output}
    infer: Callable = reference
    if dtype is not None and dtype.kind == "f" and dtype != np.float32:  # float batches come as float32 (letterbox)
        infer = lambda feed: reference({k: np.asarray(v, dtype) for k, v in feed.items()})  # noqa: E731
    return Model(infer, inputs[0].name, dims, max_batch, "onnx", description, dtype, outputs=outputs)


def _sized(dims: tuple, model) -> tuple:
    """An NCHW input's symbolic height and width from the ``imgsz`` metadata of ultralytics' dynamic exports."""
    from trtkit.model import image_size

    size = image_size(model)
    if len(dims) != 4 or size is None or all(isinstance(d, int) and d > 0 for d in dims[2:]):
        return dims
    return (*dims[:2], *size)


def _dims(value) -> tuple:
    dims = value.type.tensor_type.shape.dim
    return tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims)


@contextlib.contextmanager
def engine_model(target, runner_options: dict):
    """An engine file, its bytes or an open ``TrtRunner``, through the parity engine session."""
    from trtkit.parity.engine import describe_engine, open_engine

    with open_engine(target, runner_options=runner_options) as session:
        profile = session.profile or {}
        if len(profile) != 1:
            raise InputError(
                f"Evaluation needs an engine with one image input; {describe_engine(target)} has "
                f"{len(profile) or 'no known'} inputs: {', '.join(profile) or '-'}."
            )
        name, (_, _, max_shape) = next(iter(profile.items()))
        dtype = (session.input_dtypes or {}).get(name)
        yield Model(
            session.infer,
            name,
            tuple(max_shape),
            int(max_shape[0]),
            "engine",
            describe_engine(target),
            dtype,
            session.runner,
            {spec.name: spec.shape for spec in session.runner.output_specs} if session.runner else None,
        )
