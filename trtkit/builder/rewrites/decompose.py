"""Ops the parser lacks that have no ONNX function body but an exact form in ops it has.

Each decomposition replaces one node by a few nodes that compute the same values bit for bit (no arithmetic of their
own, only selection), and only where the form is known to hold for that node (its opset's semantics, static sizes
where TensorRT wants constants); otherwise the node is named and left.

- ``Hardmax(x, axis)`` (opset 13 and later: one axis) is 1 at the first maximum along ``axis`` and 0 elsewhere:
  ``OneHot(ArgMax(x, axis, keepdims=0), depth=x.shape[axis], values=[0, 1], axis)``; ``ArgMax`` picks the first
  maximum too. The depth must be static (TensorRT's ``OneHot`` takes it as a constant).
"""

from __future__ import annotations

from trtkit.builder.rewrites.base import SKIPPED, Rewrite, main_opset, value_types


def rewrite(proto, target) -> list:
    """Decompose each main-graph node of an op in :data:`DECOMPOSITIONS` that the parser lacks."""
    opset = main_opset(proto)
    changes: list = []
    types: dict = {}
    new_nodes: list = []
    for index, node in enumerate(proto.graph.node):
        make = DECOMPOSITIONS.get(node.op_type)
        if make is None or (node.domain or "") not in ("", "ai.onnx") or target.supported(node.op_type, opset):
            new_nodes.append(node)
            continue
        types = types or value_types(proto)
        where = f"node '{node.name or f'#{index}'}' ({node.op_type})"
        why = f"{target.label}'s parser has no importer for {node.op_type}"
        result = make(proto, node, types, opset, f"{node.name or node.op_type}_{index}__trtkit")
        if isinstance(result, str):
            changes.append(Rewrite("decompose", where, f"left: {result}", why, SKIPPED))
            new_nodes.append(node)
            continue
        nodes, what = result
        new_nodes += nodes
        changes.append(Rewrite("decompose", where, what, why))
    if any(c.status != SKIPPED for c in changes):
        del proto.graph.node[:]
        proto.graph.node.extend(new_nodes)
    return changes


def _hardmax(proto, node, types: dict, opset: int, prefix: str):
    """``[nodes], what`` for a Hardmax, or why it cannot be decomposed."""
    import numpy as np
    from onnx import helper, numpy_helper

    if opset < 13:
        return f"Hardmax before opset 13 works on the input flattened to 2-D at axis (opset {opset})"
    axis = next((a.i for a in node.attribute if a.name == "axis"), -1)
    known = types.get(node.input[0])
    if known is None or not known.HasField("tensor_type") or not known.tensor_type.HasField("shape"):
        return f"the shape of '{node.input[0]}' is not known"
    dims = known.tensor_type.shape.dim
    rank = len(dims)
    if not -rank <= axis < rank:
        return f"axis {axis} is outside the rank {rank} of '{node.input[0]}'"
    dim = dims[axis]
    if not dim.HasField("dim_value"):
        return f"axis {axis} of '{node.input[0]}' is not static (TensorRT's OneHot takes its depth as a constant)"
    dtype = helper.tensor_dtype_to_np_dtype(known.tensor_type.elem_type)
    depth, values = f"{prefix}_depth", f"{prefix}_values"
    proto.graph.initializer.extend(
        [
            numpy_helper.from_array(np.array(dim.dim_value, dtype=np.int64), depth),
            numpy_helper.from_array(np.array([0, 1], dtype=dtype), values),
        ]
    )
    argmax = f"{prefix}_argmax"
    nodes = [
        helper.make_node("ArgMax", [node.input[0]], [argmax], name=f"{prefix}_argmax", axis=axis, keepdims=0),
        helper.make_node("OneHot", [argmax, depth, values], [node.output[0]], name=f"{prefix}_onehot", axis=axis),
    ]
    return nodes, f"replaced by OneHot(ArgMax(axis={axis}), depth={dim.dim_value}) (1 at the first maximum)"


DECOMPOSITIONS = {"Hardmax": _hardmax}
