"""Load serialized engines (with the manifest check) and describe their I/O tensors.

engine = load_engine("model.engine")          # refuses an engine built for another TensorRT / GPU
specs = io_specs(engine)                       # name -> TensorSpec (dtype, shape, profile ranges)
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trtkit import _version_compat as compat
from trtkit import manifest as mf
from trtkit._lazy import tensorrt
from trtkit._version_compat import enum_name
from trtkit.errors import EngineError, UnsupportedError
from trtkit.log import make_trt_logger

logger = logging.getLogger("trtkit")

# TensorRT data types by member name (values differ between versions), and their numpy equivalents.
_NUMPY_DTYPES = {
    "FLOAT": np.float32,
    "HALF": np.float16,
    "INT8": np.int8,
    "INT32": np.int32,
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "INT64": np.int64,
}

_RUNTIMES: dict = {}
_RUNTIME_LOCK = threading.Lock()


def numpy_dtype(trt_dtype) -> np.dtype:
    """The numpy dtype of a ``trt.DataType``.

    Raises:
        UnsupportedError: the type has no numpy equivalent (BF16, FP8, INT4).
    """
    name = enum_name(trt_dtype)
    if name not in _NUMPY_DTYPES:
        raise UnsupportedError(
            f"Tensors of TensorRT type {name} have no numpy equivalent; keep the engine's I/O in FP32/FP16/INT32 "
            f"(e.g. build with FP32 inputs and outputs) to run it from numpy"
        )
    return np.dtype(_NUMPY_DTYPES[name])


@dataclass(frozen=True)
class TensorSpec:
    """One I/O tensor of an engine.

    Attributes:
        name: tensor name.
        is_input: True for inputs.
        dtype: numpy dtype.
        shape: the engine's shape, ``-1`` for dynamic dimensions.
        profiles: for inputs, ``(min, opt, max)`` per optimization profile.
        values: for a shape-tensor input (``is_shape_inference_io``: its values become shapes, and TensorRT reads
            them from host memory), the ``(min, opt, max)`` values per optimization profile; else ``()``.
    """

    name: str
    is_input: bool
    dtype: np.dtype
    shape: tuple
    profiles: tuple = field(default=())
    values: tuple = field(default=())

    @property
    def is_shape_tensor(self) -> bool:
        """Whether this input is a shape tensor (its ``values`` are given per profile)."""
        return bool(self.values)

    def profile_range(self, profile: int) -> tuple:
        """``(min, opt, max)`` of this input in ``profile``."""
        return self.profiles[profile]


def io_specs(engine, trt=None) -> dict:
    """Every I/O tensor of ``engine`` by name, inputs first in engine order.

    Raises:
        UnsupportedError: a tensor's type has no numpy equivalent.
    """
    trt = trt or _trt()
    specs = {}
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        is_input = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
        shape = tuple(int(d) for d in engine.get_tensor_shape(name))
        profiles: tuple = ()
        values: tuple = ()
        if is_input:
            count = engine.num_optimization_profiles
            profiles = tuple(_profile_range(engine, name, shape, p) for p in range(count))
            if engine.is_shape_inference_io(name):
                values = tuple(compat.profile_shape_values(engine, name, p) for p in range(count))
        dtype = numpy_dtype(engine.get_tensor_dtype(name))
        specs[name] = TensorSpec(name, is_input, dtype, shape, profiles, values)
    return dict(sorted(specs.items(), key=lambda item: not item[1].is_input))


def _profile_range(engine, name: str, shape: tuple, profile: int) -> tuple:
    if -1 not in shape:
        return (shape, shape, shape)
    return tuple(tuple(int(d) for d in dims) for dims in engine.get_tensor_profile_shape(name, profile))


def _trt():
    return tensorrt()


def shared_runtime(trt):
    """One ``trt.Runtime`` per TensorRT module, kept for the life of the process (engines must not outlive it)."""
    with _RUNTIME_LOCK:
        entry = _RUNTIMES.get(id(trt))
        if entry is None or entry[0] is not trt:
            trt_logger = make_trt_logger(trt)
            try:
                runtime = trt.Runtime(trt_logger)
            except TypeError as exc:  # pybind11 "factory function returned nullptr": no usable GPU/driver
                raise EngineError(
                    f"TensorRT could not create its runtime ({exc}); is a CUDA GPU and driver available? "
                    f"Run `trtkit doctor`"
                ) from exc
            entry = (trt, runtime, trt_logger)
            _RUNTIMES[id(trt)] = entry
        return entry[1], entry[2]


def read_engine_bytes(path) -> bytes:
    """The bytes of an engine file.

    Raises:
        EngineError: the file is missing, unreadable or empty.
    """
    path = Path(path)
    check_engine_file(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise EngineError(f"Engine file '{path}' cannot be read: {exc.strerror or exc}") from exc
    if not data:
        raise EngineError(f"Engine file '{path}' is empty; rebuild it with `trtkit build`")
    return data


_ONNX_SUFFIXES = (".onnx",)


def check_engine_file(path) -> None:
    """Refuse, without TensorRT, a path that cannot hold an engine: missing, a folder, empty, or an ONNX model.

    Raises:
        EngineError: which of those it is, and what to give instead.
    """
    path = Path(path)
    if path.is_dir():
        raise EngineError(f"Engine file '{path}' is a folder; give the engine file built by `trtkit build`")
    if not path.exists():
        raise EngineError(f"Engine file '{path}' does not exist; build one with `trtkit build`")
    if path.suffix.lower() in _ONNX_SUFFIXES:
        raise EngineError(
            f"'{path}' is an ONNX model, not an engine; build an engine from it with `trtkit build {path}`"
        )
    try:
        empty = path.stat().st_size == 0
    except OSError as exc:
        raise EngineError(f"Engine file '{path}' cannot be read: {exc.strerror or exc}") from exc
    if empty:
        raise EngineError(f"Engine file '{path}' is empty; rebuild it with `trtkit build`")


def check_engine_manifest(path, *, allow_mismatch: bool = False, trt=None) -> list:
    """Compare the manifest beside ``path`` with this machine (see :mod:`trtkit.manifest`).

    Returns:
        The mismatches found (only when ``allow_mismatch``; each is also logged as a warning).

    Raises:
        EngineError: the engine was built for another TensorRT version or GPU, and ``allow_mismatch`` is false.
    """
    manifest = mf.read_manifest(path)
    if not manifest:
        return []
    current = mf.environment(trt) if trt is not None else None
    found = mf.check_manifest(manifest, engine_path=path, current=current, allow_mismatch=allow_mismatch)
    for item in found:
        logger.warning("Engine '%s' was built for %s; loading it anyway as asked", path, item)
    return found


def load_plugin_libraries(plugins, *, trt=None) -> None:
    """Load plugin libraries (``.so``) into this process, then TensorRT's own plugins, so that engines holding their
    plugin layers deserialize (see :func:`trtkit._version_compat.load_plugin_libraries`).

    Raises:
        UsageError: a path is not a file (before TensorRT is imported).
        DependencyError: a library does not load (the loader's reason quoted).
    """
    from trtkit import _check

    paths = _check.paths("plugins", plugins)
    compat.check_plugin_files(paths)
    trt = trt or _trt()
    compat.load_plugin_libraries(trt, shared_runtime(trt)[1], paths)


def deserialize(data: bytes, *, trt=None, where: str = "The engine", plugins=()):
    """Deserialize engine bytes into a ``trt.ICudaEngine`` (after loading the ``plugins`` libraries).

    Raises:
        EngineError: TensorRT refused the bytes; the message quotes TensorRT's reason.
        UsageError, DependencyError: a plugin library is missing or does not load.
    """
    trt = trt or _trt()
    if plugins:
        load_plugin_libraries(plugins, trt=trt)
    runtime, trt_logger = shared_runtime(trt)
    seen = len(trt_logger.messages)
    engine = runtime.deserialize_cuda_engine(bytes(data))
    if engine is None and not compat.plugins_loaded(trt) and compat.load_plugins(trt, trt_logger):
        # an engine with plugin layers (e.g. EfficientNMS_TRT) needs TensorRT's plugin registry filled
        seen = len(trt_logger.messages)
        engine = runtime.deserialize_cuda_engine(bytes(data))
    if engine is None:
        reasons = [msg for sev, msg in trt_logger.messages[seen:] if sev in ("ERROR", "INTERNAL_ERROR")]
        said = f" TensorRT said: {reasons[-1]}" if reasons else ""
        raise EngineError(
            f"{where} could not be deserialized: the file is corrupt, not an engine, or was built by another "
            f"TensorRT version. Rebuild it with `trtkit build`.{said}"
        )
    return engine


def load_engine(path_or_bytes, *, check_manifest: bool = True, allow_mismatch: bool = False, plugins=(), trt=None):
    """Load a serialized engine from a file or bytes.

    Args:
        path_or_bytes: an engine file path, or the engine's bytes.
        check_manifest: for a file, compare the manifest beside it (``<engine>.manifest.json``) with this machine.
        allow_mismatch: load even when the manifest names another TensorRT version or GPU (logs a warning).
        plugins: paths of plugin libraries to load first (:func:`load_plugin_libraries`).
        trt: the ``tensorrt`` module (default: the installed one; tests pass a fake).

    Returns:
        The ``trt.ICudaEngine``.

    Raises:
        UsageError: an argument of the wrong type.
        EngineError: the file is missing/empty/corrupt, or the manifest does not match this machine.
    """
    from trtkit import _check

    _check.boolean("check_manifest", check_manifest)
    _check.boolean("allow_mismatch", allow_mismatch)
    plugins = _check.paths("plugins", plugins)
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        return deserialize(bytes(path_or_bytes), trt=trt, plugins=plugins)
    if not isinstance(path_or_bytes, (str, os.PathLike)) or not str(path_or_bytes):
        _check.fail("path_or_bytes", path_or_bytes, "an engine file path or the engine's bytes")
    data = read_engine_bytes(path_or_bytes)
    if check_manifest:
        check_engine_manifest(path_or_bytes, allow_mismatch=allow_mismatch, trt=trt)
    return deserialize(data, trt=trt, where=f"Engine '{path_or_bytes}'", plugins=plugins)


def engine_information(trt, engine, *, profile: int = 0, context=None) -> str:
    """The engine inspector's JSON.

    For an engine with dynamic shapes TensorRT reports tensor formats (hence layer precisions) only when the inspector
    has an execution context with every input shape set: ``context`` when given (a runner's, its shapes set), else
    one made at ``profile``'s opt shapes (and opt values of shape-tensor inputs, in host memory kept until the
    information is read).
    """
    inspector = engine.create_engine_inspector()
    context, values = (context, []) if context is not None else _context_at_opt_shapes(trt, engine, profile)
    if context is not None:
        inspector.execution_context = context
    info = inspector.get_engine_information(trt.LayerInformationFormat.JSON)
    del context, values  # only after the information is read
    return info


def _context_at_opt_shapes(trt, engine, profile: int) -> tuple:
    """``(context, host arrays of the shape-tensor values it reads)``, or ``(None, [])`` for a static engine or
    where TensorRT refuses a step."""
    names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
    inputs = [n for n in names if compat.enum_name(engine.get_tensor_mode(n)) == "INPUT"]
    shape_inputs = [n for n in inputs if engine.is_shape_inference_io(n)]
    dynamic = [n for n in inputs if -1 in tuple(engine.get_tensor_shape(n)) and n not in shape_inputs]
    if not dynamic and not shape_inputs:
        return None, []
    context = compat.create_execution_context(trt, engine)
    if context is None:
        return None, []
    if profile and not context.set_optimization_profile_async(profile, 0):
        return None, []
    for name in dynamic:
        _, opt, _ = engine.get_tensor_profile_shape(name, profile)
        if not context.set_input_shape(name, tuple(opt)):
            return None, []
    values = []
    for name in shape_inputs:
        _, opt, _ = compat.profile_shape_values(engine, name, profile)
        values.append(np.array(opt, numpy_dtype(engine.get_tensor_dtype(name))))
        if not context.set_tensor_address(name, values[-1].ctypes.data):
            return None, []
    return context, values
