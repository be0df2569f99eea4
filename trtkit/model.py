"""Reading ONNX models from a path, bytes or ``onnx.ModelProto``, with errors that say what is wrong.

Also the one reading of an ONNX value's dimensions (:func:`value_dims`, :func:`model_inputs`): an ``int`` for a fixed
dimension, the ``dim_param`` name (a ``str``) or ``None`` for a dynamic one. Everything in trtkit and calibrators that
needs a model's input shapes reads them here.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from trtkit.errors import DependencyError, ModelError, first_line

if TYPE_CHECKING:
    import onnx

PROTOBUF_LIMIT = (2 << 30) - (16 << 20)  # bytes one serialized onnx.ModelProto can hold, less a margin


class LoadedModel:
    """An ONNX model with its serialized bytes (what TensorRT's parser reads) and where it came from.

    ``data`` is serialized from ``proto`` on first use when not given (checking a model's inputs needs only the
    proto; a large model's serialization is not free).
    """

    def __init__(self, proto: onnx.ModelProto, data: bytes | None = None, path: Path | None = None):
        self.proto, self._data, self.path = proto, data, path

    def __repr__(self) -> str:
        return f"LoadedModel(proto=<{self.name}>, path={self.path!r})"

    @property
    def data(self) -> bytes:
        if self._data is None:
            self._data = self.proto.SerializeToString()
        return self._data

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def name(self) -> str:
        return self.path.name if self.path else (self.proto.graph.name or "model")

    @property
    def opset(self) -> int:
        return max((o.version for o in self.proto.opset_import if o.domain in ("", "ai.onnx")), default=0)


def load_model(model, *, check: bool = True, external_data: bool = True) -> LoadedModel:
    """Load an ONNX model (external data included) and check it is well formed.

    Args:
        model: a path, the model's bytes, an ``onnx.ModelProto`` or a :class:`LoadedModel`.
        check: run ``onnx.checker`` (cheap structural checks).
        external_data: read external weights into memory; ``False`` keeps the references (models over 2 GB: the
            proto stays small and TensorRT's parser reads the weights itself, beside ``path``) after checking that
            every data file exists.

    Raises:
        ModelError: the file is missing, not ONNX, truncated, fails the checker, or names a missing data file.
    """
    import onnx

    if isinstance(model, LoadedModel):
        return model
    path = None
    if isinstance(model, (str, Path)):
        path = Path(model)
        proto = _load_path(path, external_data)
    elif isinstance(model, (bytes, bytearray, memoryview)):
        proto = _decode(bytes(model), "the given bytes")
    elif isinstance(model, onnx.ModelProto):
        proto = model
    else:
        raise ModelError(f"Expected an ONNX path, bytes or onnx.ModelProto; got {type(model).__name__}")
    where = f"'{path}'" if path else "the model"
    loaded = LoadedModel(proto, None, path)
    _check_structure(loaded, where, check and not has_external_data(proto))
    return loaded


def has_external_data(proto) -> bool:
    """Whether some initializer of ``proto`` still refers to an external data file."""
    import onnx

    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer)


def external_data_files(proto) -> list:
    """The data files (relative to the model) that ``proto``'s initializers refer to, in order of first use."""
    files = []
    for tensor in proto.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location" and entry.value not in files:
                files.append(entry.value)
    return files


def model_files(model, field: str = "model") -> dict:
    """``{field: path, "<field>'s external data": [paths]}``: the files reading ``model`` opens, for the output
    checks (:func:`trtkit._atomic.check_outputs`): the model's own file, and each external data file its
    initializers name (``location``). A file that does not read as ONNX names only itself (reading it fails later,
    with its own message); a model given as bytes or a proto names nothing.
    """
    if isinstance(model, LoadedModel):
        path, proto = model.path, model.proto
    elif isinstance(model, (str, os.PathLike)):
        path, proto = Path(model), None
    else:
        return {}
    if path is None:
        return {}
    if proto is None:
        try:
            proto = _decode(path.read_bytes(), f"'{path}'")
        except (OSError, ModelError):
            return {field: path}
    return {field: path, f"{field}'s external data": [path.parent / name for name in external_data_files(proto)]}


def load_external_data(proto, folder: Path, where: str) -> None:
    """Read ``proto``'s external weights from ``folder`` into it.

    Raises:
        ModelError: a data file is missing, or shorter than a tensor stored in it needs (truncated): names the
            tensor and the file.
    """
    import onnx

    check_external_data(proto, folder, where)  # onnx's own message names the tensor but not the file
    try:
        onnx.load_external_data_for_model(proto, str(folder))
    except (OSError, ValueError, onnx.checker.ValidationError) as exc:
        raise ModelError(f"{where}: cannot read its external data ({exc}); keep the data files beside it") from exc


def check_external_data(proto, folder: Path, where: str) -> None:
    """Every external data file ``proto`` names is in ``folder`` and long enough for each tensor stored in it.

    Raises:
        ModelError: naming the missing file, or the tensor and the file too short to hold it.
    """
    missing = [name for name in external_data_files(proto) if not (folder / name).is_file()]
    if missing:
        raise ModelError(
            f"{where}: its external data file(s) {', '.join(repr(m) for m in missing)} are missing; "
            f"keep them in '{folder}' beside the model"
        )
    for tensor in proto.graph.initializer:
        entries = {e.key: e.value for e in tensor.external_data}
        if "location" not in entries or "length" not in entries:  # onnx writes both
            continue
        size = (folder / entries["location"]).stat().st_size
        end = int(entries.get("offset") or 0) + int(entries["length"])
        if end > size:
            raise ModelError(
                f"{where}: tensor '{tensor.name}' needs bytes up to {end} of its external data file "
                f"'{entries['location']}', which has {size}; the file is truncated: copy it again beside the model"
            )


def _load_path(path: Path, external_data: bool = True):
    if not path.exists():
        raise ModelError(f"ONNX model '{path}' does not exist")
    if path.is_dir():
        raise ModelError(f"'{path}' is a folder; give the path of an .onnx file")
    proto = _decode(path.read_bytes(), f"'{path}'")
    if external_data and has_external_data(proto):
        load_external_data(proto, path.parent, f"'{path}'")
    else:
        check_external_data(proto, path.parent, f"'{path}'")
    return proto


def _decode(data: bytes, where: str):
    import onnx
    from google.protobuf.message import DecodeError

    if not data:
        raise ModelError(f"{where} is empty; expected an ONNX model")
    try:
        return onnx.load_from_string(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise ModelError(
            f"{where} is not a valid ONNX model (protobuf decoding failed: {exc}); is the file truncated or not ONNX?"
        ) from exc


def _check_structure(loaded: LoadedModel, where: str, check: bool) -> None:
    import onnx

    proto = loaded.proto
    if not proto.graph.node and not proto.graph.output:
        raise ModelError(f"{where} has an empty graph (no nodes, no outputs); is it truncated or not ONNX?")
    if not proto.opset_import:
        raise ModelError(f"{where} declares no opset; it is not a complete ONNX model")
    if check:
        try:
            onnx.checker.check_model(loaded.data)  # the bytes the model's users read too: serialized once
        except (onnx.checker.ValidationError, ValueError) as exc:
            raise ModelError(f"{where} fails ONNX's checker: {first_line(exc)}") from exc


def value_dims(value) -> list:
    """The dimensions of an ONNX ``ValueInfoProto``: int for fixed, the ``dim_param`` str or None for dynamic."""
    dims: list[int | str | None] = []
    for d in value.type.tensor_type.shape.dim:
        if d.HasField("dim_value") and d.dim_value > 0:
            dims.append(int(d.dim_value))
        else:
            dims.append(d.dim_param or None)
    return dims


def is_fixed(dim) -> bool:
    """Whether a dimension from :func:`value_dims` (or a profile's ``-1``) is a fixed size."""
    return isinstance(dim, int) and dim > 0


class SizedDim(str):
    """A dynamic dimension (its name) with the size the model's metadata gives it: ultralytics' dynamic exports
    record their ``imgsz``, the height and width a profile given only a batch takes (:func:`model_inputs`)."""

    size: int

    def __new__(cls, name: str, size: int):
        dim = super().__new__(cls, name)
        dim.size = size
        return dim

    def __getnewargs__(self):  # pickled into build children, copied: both rebuild it from these
        return (str(self), self.size)


def image_size(proto) -> tuple[int, int] | None:
    """(height, width) from the ``imgsz`` metadata of an ultralytics export (``640`` or ``[640, 640]``), else None."""
    import json

    text = next((p.value for p in proto.metadata_props if p.key == "imgsz"), None)
    try:
        size = json.loads(text or "null")
        height, width = (int(x) for x in ([size, size] if isinstance(size, int) else size))
    except (ValueError, TypeError):
        return None
    return (height, width) if height > 0 and width > 0 else None


def model_inputs(proto) -> dict:
    """Graph inputs that are not initializers: name → dims (int for fixed, str or None for dynamic). A 4-D input's
    dynamic height and width are :class:`SizedDim` where the model's metadata gives its image size."""
    initializers = {t.name for t in proto.graph.initializer}
    inputs = {value.name: value_dims(value) for value in proto.graph.input if value.name not in initializers}
    size = image_size(proto)
    for dims in inputs.values():
        if size and len(dims) == 4:
            dims[2:] = [d if is_fixed(d) else SizedDim(d or "?", n) for d, n in zip(dims[2:], size)]
    return inputs


def with_outputs(model, names: list):
    """A copy of ``model`` whose graph also outputs the tensors ``names``, typed and shaped by ONNX shape inference
    (a tensor inference cannot type is declared FLOAT without a shape; TensorRT infers it anyway). ``model`` is left
    as it was. Used by calibration's statistics engine and by parity's divergence localization."""
    import onnx
    from onnx import TensorProto, helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    try:
        inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
    except Exception:  # shapes are a courtesy: TensorRT infers them anyway
        inferred = {}
    existing = {o.name for o in out.graph.output}
    for name in names:
        if name in existing:
            continue
        value = out.graph.output.add()
        if name in inferred:
            value.CopyFrom(inferred[name])
        else:
            value.CopyFrom(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    return out


def onnxruntime_session(model, missing: str):
    """An ONNX Runtime CPU session that runs ``model`` (a ``ModelProto``) as written: graph optimizations fuse and
    reorder float math (and Q/DQ pairs), so they are off.

    Raises:
        DependencyError: onnxruntime is not installed; ``missing`` is the message (what needs it, what to do).
    """
    try:
        import onnxruntime
    except ImportError as exc:
        raise DependencyError(missing) from exc
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    return onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
