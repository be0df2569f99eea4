"""INT64 and FLOAT64 graph inputs and outputs TensorRT cannot take: Casts at the boundary, INT32/FLOAT32 outside.

TensorRT 8.6 engines cannot take or return INT64 tensors (token ids, indices, ``ArgMax`` results), and its parser
refuses such a graph input. No TensorRT has FP64 tensors: the parser makes a DOUBLE graph input or output FLOAT32,
so an engine built from a model with double I/O refuses the model's own float64 arrays. The rewrite makes each such
graph input INT32 (FLOAT32) and casts it to INT64 (DOUBLE) right after, and each such output INT32 (FLOAT32) through
a Cast before it, so the rest of the graph is unchanged. :func:`original_dtypes` lists what changed; the manifest
keeps it so that :class:`~trtkit.runtime.runner.TrtRunner` can take and return the model's own dtypes.
"""

from __future__ import annotations

from dataclasses import dataclass

from trtkit.builder.rewrites import narrow_io
from trtkit.builder.rewrites.base import Rewrite


@dataclass(frozen=True)
class _Boundary:
    """One model dtype the engine takes and returns as another."""

    rewrite: str  # the Rewrite's name
    model: str  # the model's dtype, as numpy names it
    engine: str
    why: str

    @property
    def suffix(self) -> str:
        return f"__trtkit_{self.model}"


_INT64 = _Boundary("int64-io", "int64", "int32", "this TensorRT has no INT64 engine inputs/outputs")
_FLOAT64 = _Boundary(
    "float64-io",
    "float64",
    "float32",
    "TensorRT has no FP64 engine inputs/outputs; FLOAT32 keeps about 7 significant digits of a FLOAT64 value, as "
    "TensorRT's parser does with double weights anyway",
)


def rewrite(proto, target) -> list:
    """Insert the boundary Casts: for FLOAT64 always, for INT64 unless ``target.int64_io``."""
    kinds = [_FLOAT64] if target.int64_io else [_INT64, _FLOAT64]
    changes: list = []
    for kind in kinds:
        changes += _rewrite_kind(proto, kind)
    return changes


def _rewrite_kind(proto, kind: _Boundary) -> list:
    initializers = {t.name for t in proto.graph.initializer}
    inputs = [v for v in proto.graph.input if v.name not in initializers and _is(v, kind.model)]
    outputs = [v for v in proto.graph.output if _is(v, kind.model)]
    through = {v.name for v in inputs} & {v.name for v in outputs}  # an input returned as is: nothing to cast
    model, engine = kind.model.upper(), kind.engine.upper()
    changes = [
        Rewrite(
            kind.rewrite, f"tensor '{name}'", f"left {model}: it is both a graph input and output", kind.why, "skipped"
        )
        for name in sorted(through)
    ]
    boundary = [(v, "input", _cast_input, f"takes {engine}, cast to {model} inside the graph") for v in inputs]
    boundary += [(v, "output", _cast_output, f"returns {engine}, cast from {model} inside the graph") for v in outputs]
    for value, where, cast, what in boundary:
        if value.name in through:
            continue
        cast(proto, value.name, kind)
        value.type.tensor_type.elem_type = _onnx_type(kind.engine)
        changes.append(Rewrite(kind.rewrite, f"{where} '{value.name}'", what, kind.why))
    return changes


def original_dtypes(changes: list) -> dict:
    """``{tensor: model dtype}`` for the inputs/outputs this rewrite or :mod:`~trtkit.builder.rewrites.narrow_io`
    gave another dtype (``int64``, ``float64``, ``uint16``...)."""
    kinds = {k.rewrite: k.model for k in (_INT64, _FLOAT64)} | narrow_io.REWRITES
    return {c.where.split("'")[1]: kinds[c.rewrite] for c in changes if c.rewrite in kinds and c.status == "applied"}


def _onnx_type(dtype: str) -> int:
    import numpy as np
    from onnx import helper

    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _is(value, dtype: str) -> bool:
    return value.type.HasField("tensor_type") and value.type.tensor_type.elem_type == _onnx_type(dtype)


def _cast_input(proto, name: str, kind: _Boundary) -> None:
    """Consumers of input ``name`` read ``name + suffix``, which a Cast to the model's dtype computes from ``name``."""
    from onnx import helper

    inner = name + kind.suffix
    _rename_uses(proto.graph, name, inner)
    to = _onnx_type(kind.model)
    proto.graph.node.insert(0, helper.make_node("Cast", [name], [inner], name=f"{name}_to_{kind.model}", to=to))


def _cast_output(proto, name: str, kind: _Boundary) -> None:
    """The producer of output ``name`` writes ``name + suffix``; a Cast to the engine's dtype writes ``name``."""
    from onnx import helper

    inner = name + kind.suffix
    _rename_uses(proto.graph, name, inner)
    for node in proto.graph.node:
        node.output[:] = [inner if o == name else o for o in node.output]
    to = _onnx_type(kind.engine)
    proto.graph.node.append(helper.make_node("Cast", [inner], [name], name=f"{name}_to_{kind.engine}", to=to))


def _rename_uses(graph, old: str, new: str) -> None:
    """Node inputs reading ``old`` read ``new``, in subgraphs too (unless a subgraph defines its own ``old``)."""
    for node in graph.node:
        node.input[:] = [new if i == old else i for i in node.input]
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                if not any(v.name == old for v in sub.input) and old not in {o for n in sub.node for o in n.output}:
                    _rename_uses(sub, old, new)
