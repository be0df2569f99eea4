"""Reading ONNX models from a path, bytes or ``onnx.ModelProto``, with errors that say what is wrong.

Also the one reading of an ONNX value's dimensions (:func:`value_dims`, :func:`model_inputs`): an ``int`` for a fixed
dimension, the ``dim_param`` name (a ``str``) or ``None`` for a dynamic one. Everything in trtkit and calibrators that
needs a model's input shapes reads them here.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from trtkit.errors import ModelError

if TYPE_CHECKING:
    import onnx


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


def _load_path(path: Path, external_data: bool = True):
    if not path.exists():
        raise ModelError(f"ONNX model '{path}' does not exist")
    if path.is_dir():
        raise ModelError(f"'{path}' is a folder; give the path of an .onnx file")
    proto = _decode(path.read_bytes(), f"'{path}'")
    missing = [name for name in external_data_files(proto) if not (path.parent / name).is_file()]
    if missing:
        raise ModelError(
            f"'{path}': its external data file(s) {', '.join(repr(m) for m in missing)} are missing; "
            f"keep them in '{path.parent}' beside the model"
        )
    if not external_data:
        return proto
    import onnx

    try:
        if has_external_data(proto):
            onnx.load_external_data_for_model(proto, str(path.parent))
    except (OSError, ValueError, onnx.checker.ValidationError) as exc:
        raise ModelError(f"'{path}': cannot read its external data ({exc}); keep the data files beside it") from exc
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
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ModelError(f"{where} fails ONNX's checker: {first}") from exc


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


def model_inputs(proto) -> dict:
    """Graph inputs that are not initializers: name → dims (int for fixed, str or None for dynamic)."""
    initializers = {t.name for t in proto.graph.initializer}
    return {value.name: value_dims(value) for value in proto.graph.input if value.name not in initializers}


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
