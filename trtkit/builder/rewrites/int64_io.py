"""INT64 graph inputs and outputs on TensorRT without INT64 I/O (8.6): Casts at the boundary, INT32 outside.

TensorRT 8.6 engines cannot take or return INT64 tensors (token ids, indices, ``ArgMax`` results), and its parser
refuses such a graph input. The rewrite makes each INT64 graph input INT32 and casts it to INT64 right after, and each
INT64 output INT32 through a Cast before it, so the rest of the graph is unchanged. :func:`original_dtypes` lists
what changed; the manifest keeps it so that :class:`~trtkit.runtime.runner.TrtRunner` can take and return the
model's own dtypes.
"""

from __future__ import annotations

from trtkit.builder.rewrites.base import Rewrite

_WHY = "this TensorRT has no INT64 engine inputs/outputs"
SUFFIX = "__trtkit_int64"


def rewrite(proto, target) -> list:
    """Insert the boundary Casts (nothing when ``target.int64_io``)."""
    from onnx import TensorProto

    if target.int64_io:
        return []
    initializers = {t.name for t in proto.graph.initializer}
    inputs = [v for v in proto.graph.input if v.name not in initializers and _is_int64(v)]
    outputs = [v for v in proto.graph.output if _is_int64(v)]
    through = {v.name for v in inputs} & {v.name for v in outputs}  # an input returned as is: nothing to cast
    changes = [
        Rewrite("int64-io", f"tensor '{name}'", "left INT64: it is both a graph input and output", _WHY, "skipped")
        for name in sorted(through)
    ]
    boundary = [(v, "input", _cast_input, "takes INT32, cast to INT64 inside the graph") for v in inputs]
    boundary += [(v, "output", _cast_output, "returns INT32, cast from INT64 inside the graph") for v in outputs]
    for value, kind, cast, what in boundary:
        if value.name in through:
            continue
        cast(proto, value.name)
        value.type.tensor_type.elem_type = TensorProto.INT32
        changes.append(Rewrite("int64-io", f"{kind} '{value.name}'", what, _WHY))
    return changes


def original_dtypes(changes: list) -> dict:
    """``{tensor: "int64"}`` for the inputs/outputs :func:`rewrite` made INT32."""
    return {c.where.split("'")[1]: "int64" for c in changes if c.rewrite == "int64-io" and c.status == "applied"}


def _is_int64(value) -> bool:
    from onnx import TensorProto

    return value.type.HasField("tensor_type") and value.type.tensor_type.elem_type == TensorProto.INT64


def _cast_input(proto, name: str) -> None:
    """Consumers of input ``name`` read ``name + SUFFIX``, which a Cast to INT64 computes from ``name``."""
    from onnx import TensorProto, helper

    inner = name + SUFFIX
    _rename_uses(proto.graph, name, inner)
    proto.graph.node.insert(0, helper.make_node("Cast", [name], [inner], name=f"{name}_to_int64", to=TensorProto.INT64))


def _cast_output(proto, name: str) -> None:
    """The producer of output ``name`` writes ``name + SUFFIX``; a Cast to INT32 writes ``name``."""
    from onnx import TensorProto, helper

    inner = name + SUFFIX
    _rename_uses(proto.graph, name, inner)
    for node in proto.graph.node:
        node.output[:] = [inner if o == name else o for o in node.output]
    proto.graph.node.append(helper.make_node("Cast", [inner], [name], name=f"{name}_to_int32", to=TensorProto.INT32))


def _rename_uses(graph, old: str, new: str) -> None:
    """Node inputs reading ``old`` read ``new``, in subgraphs too (unless a subgraph defines its own ``old``)."""
    for node in graph.node:
        node.input[:] = [new if i == old else i for i in node.input]
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                if not any(v.name == old for v in sub.input) and old not in {o for n in sub.node for o in n.output}:
                    _rename_uses(sub, old, new)
