"""``CastLike`` on parsers without it: a ``Cast`` to the element type its second input has.

``CastLike(x, target)`` (opset 15) casts ``x`` to ``target``'s element type; torch.onnx's dynamo exporter and ONNX's own
function bodies write it, and TensorRT 8.6's parser has no importer for it. Where the target's element type is known (an
initializer, a graph input, a declared value, or shape inference), the node becomes ``Cast(x, to=<that type>)``, which
means the same. Nodes in ``If``/``Loop``/``Scan`` bodies are rewritten too, named ``<index of the node holding
it>/<index in the subgraph>``.
"""

from __future__ import annotations

from trtkit.builder.rewrites.base import SKIPPED, Rewrite, main_opset, value_types


def rewrite(proto, target) -> list:
    """Replace each ``CastLike`` (subgraphs too) whose target type is known by a ``Cast``; name the others."""
    import onnx

    opset = main_opset(proto)
    nodes = [(i, n) for i, n in _nodes(proto.graph) if n.op_type == "CastLike" and (n.domain or "") in ("", "ai.onnx")]
    if not nodes or target.supported("CastLike", opset):
        return []
    why = f"{target.label}'s parser has no importer for CastLike"
    types = value_types(proto, subgraphs=True)
    changes: list = []
    for index, node in nodes:
        where = f"node '{node.name or f'#{index}'}' (CastLike)"
        like = node.input[1] if len(node.input) > 1 else ""
        known = types.get(like)
        elem = known.tensor_type.elem_type if known is not None and known.HasField("tensor_type") else 0
        if not elem:
            what = f"left: the element type of its target '{like}' is not known (not declared, not inferable)"
            changes.append(Rewrite("castlike", where, what, why, SKIPPED))
            continue
        # saturate (opset 19) only acts on float8 targets; kept there alone, so a later opset conversion stays valid
        float8 = onnx.TensorProto.DataType.Name(elem).startswith("FLOAT8")
        saturate = [a for a in node.attribute if a.name == "saturate" and float8]
        del node.input[1:]
        node.op_type = "Cast"
        del node.attribute[:]
        node.attribute.extend([onnx.helper.make_attribute("to", elem), *saturate])
        name = onnx.TensorProto.DataType.Name(elem)
        changes.append(Rewrite("castlike", where, f"replaced by Cast(to={name}), the type of '{like}'", why))
    return changes


def _nodes(graph, prefix: str = ""):
    """``(where, node)`` for every node of ``graph`` and of the subgraphs of its nodes."""
    for index, node in enumerate(graph.node):
        yield f"{prefix}{index}", node
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                yield from _nodes(sub, f"{prefix}{index}/")
