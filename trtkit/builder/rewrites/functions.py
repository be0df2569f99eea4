"""Ops the parser lacks but ONNX defines as a function of other ops: expand them with the schema's function body.

Newer normalization and activation ops (``Mish``, ``GroupNormalization``, ``LayerNormalization``, ``Gelu``...) have a
function body in their ONNX schema. Where the installed parser has no importer for such an op but has one for every
op of its body, the node is replaced by the body: the schema's function becomes a model-local function that onnx's
inliner then expands in place, so the result is what ONNX itself says the op means.
"""

from __future__ import annotations

from trtkit.builder.rewrites.base import Rewrite, main_opset, value_types

_DOMAIN = "trtkit.expand"


def rewrite(proto, target) -> list:
    """Expand each node of an unsupported function-bodied op whose body uses only supported ops."""
    import onnx.inliner

    opset = main_opset(proto)
    changes: list = []
    names: list = []
    types: dict = {}
    for index, node in enumerate(proto.graph.node):
        if (node.domain or "") not in ("", "ai.onnx") or target.supported(node.op_type, opset):
            continue
        where = f"node '{node.name or f'#{index}'}' ({node.op_type})"
        why = f"{target.label}'s parser has no importer for {node.op_type}"
        types = types or value_types(proto)  # before any node is renamed: inference must know every op
        body = _function_body(node, types, opset)
        if body is None:
            continue
        ops = sorted({n.op_type for n in body.node})
        # CastLike in a body is no obstacle: the castlike rewrite, next in line, makes it a Cast
        missing = [op for op in ops if not target.supported(op, opset) and op != "CastLike"]
        if missing:
            changes.append(
                Rewrite(
                    "expand-function",
                    where,
                    f"not expanded: its function body uses {', '.join(missing)}, which this parser lacks too",
                    why,
                    "skipped",
                )
            )
            continue
        # one local function per node: context-dependent bodies differ with the node's attributes and input types
        body.name, body.domain = f"{node.op_type}_{index}", _DOMAIN
        node.op_type, node.domain = body.name, _DOMAIN
        proto.functions.append(body)
        names.append((_DOMAIN, body.name))
        changes.append(Rewrite("expand-function", where, f"replaced by its ONNX function body ({', '.join(ops)})", why))
    if not names:
        return changes
    proto.opset_import.append(onnx.helper.make_opsetid(_DOMAIN, 1))
    proto.CopyFrom(onnx.inliner.inline_selected_functions(proto, names, exclude=False))
    keep = [o for o in proto.opset_import if o.domain != _DOMAIN]
    del proto.opset_import[:]
    proto.opset_import.extend(keep)
    return changes


def _function_body(node, types: dict, opset: int):
    """The schema's function for ``node`` at the model's opset, as a ``FunctionProto`` (``None``: it has none)."""
    import onnx

    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain or "")
    except onnx.defs.SchemaError:
        return None
    if schema.has_function:  # type: ignore[attr-defined]  # (onnx's stubs lack the function accessors)
        function = onnx.FunctionProto()
        body = schema.get_function_with_opset_version(opset)  # type: ignore[attr-defined]
        if isinstance(body, bytes):
            function.ParseFromString(body)
        else:
            function.CopyFrom(body or schema.function_body)
    elif schema.has_context_dependent_function:  # type: ignore[attr-defined]
        function = _context_function(schema, node, types, opset)
        if function is None:
            return None
    else:
        return None
    if not any(o.domain in ("", "ai.onnx") for o in function.opset_import):
        function.opset_import.append(onnx.helper.make_opsetid("", opset))
    return function


def _context_function(schema, node, types: dict, opset: int):
    """Context-dependent bodies (LayerNormalization...) depend on the inputs' element types."""
    import onnx

    input_types = []
    for name in node.input:
        if name not in types:
            return None
        input_types.append(types[name].SerializeToString())
    data = schema.get_context_dependent_function_with_opset_version(opset, node.SerializeToString(), input_types)
    function = onnx.FunctionProto()
    function.ParseFromString(data)
    return function
