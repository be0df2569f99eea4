"""Tensors of a type TensorRT has no counterpart for, named by node before the parser is asked.

TensorRT's parser refuses a BFLOAT16, FLOAT8, INT4, UINT16 or STRING tensor with ``convertDtype ... Failed to convert
ONNX data type`` and no node at all (8.6 reports index -1). :func:`find` looks at every value onnx shape inference
knows, the initializers and every ``Cast``'s target, and names the first nodes that produce or read each such type,
so the error says where the model has to change. The graph's own inputs and outputs of the narrow integer types are
:mod:`~trtkit.builder.rewrites.narrow_io`'s work; what it left is named here too.
"""

from __future__ import annotations

from trtkit.builder.rewrites.base import value_types
from trtkit.builder.rewrites.semantics import Hazard

_PER_TYPE = 2  # nodes named per type


def find(proto, target) -> list:
    """A :class:`~trtkit.builder.rewrites.semantics.Hazard` per node (the first few per type) that makes or reads a
    tensor of a type ``target.data_types`` lacks (none when the target does not say which types it has)."""
    import onnx

    allowed = target.data_types
    if allowed is None or not _declared_types(proto) - allowed:
        return []  # every type a tensor gets comes from these: no shape inference for the common model
    types = value_types(proto)
    named: dict = {}
    found = []
    for index, node in enumerate(proto.graph.node):
        used = [(t, "reads") for t in node.input if t] + [(t, "makes") for t in node.output if t]
        candidates = [(types[t].tensor_type.elem_type, verb, t) for t, verb in used if t in types]
        if node.op_type == "Cast":
            to = next((a.i for a in node.attribute if a.name == "to"), None)
            candidates += [(to, "casts to", None)] if to is not None else []
        for elem, verb, tensor in candidates:
            name = onnx.TensorProto.DataType.Name(elem) if elem else None
            if name is None or name == "UNDEFINED" or name in allowed or named.get(name, 0) >= _PER_TYPE:
                continue
            named[name] = named.get(name, 0) + 1
            what = (
                f"{verb} {name}" + (f" ('{tensor}')" if tensor else "") + f", a type {target.label} has no tensor for"
            )
            advice = "convert it in the model (e.g. to FLOAT, FLOAT16 or INT32) before building"
            found.append(Hazard(node.name or f"#{index}", node.op_type, what, advice))
            break
    return found


def _declared_types(proto) -> set:
    """The element type names the graph states: its inputs, outputs and value infos, initializers, ``Constant``
    values and every ``to``/``dtype``/``output_dtype`` attribute (``Cast``, ``EyeLike``, ``QuantizeLinear``...);
    inference only propagates these."""
    import onnx

    graph = proto.graph
    codes = {v.type.tensor_type.elem_type for v in [*graph.input, *graph.output, *graph.value_info]}
    codes |= {t.data_type for t in graph.initializer}
    for node in graph.node:
        for attr in node.attribute:
            if attr.name in ("to", "dtype", "output_dtype") and attr.type == onnx.AttributeProto.INT:
                codes.add(attr.i)
            elif attr.type == onnx.AttributeProto.TENSOR:
                codes.add(attr.t.data_type)
            elif attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
                return {"(subgraph)"}  # bodies hold their own: look at every inferred value
    return {onnx.TensorProto.DataType.Name(c) for c in codes if c}
