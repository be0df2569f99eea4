"""Ops the parser lacks but ONNX defines as a function of other ops: expand them with the schema's function body.

Newer normalization and activation ops (``Mish``, ``GroupNormalization``, ``LayerNormalization``, ``Gelu``...) have a
function body in their ONNX schema. Where the installed parser has no importer for such an op but has one for every
op of its body, the node is replaced by the body: the schema's function becomes a model-local function that onnx's
inliner then expands in place, so the result is what ONNX itself says the op means.

A body may use other function-bodied ops the parser lacks (``SoftmaxCrossEntropyLoss`` uses
``NegativeLogLikelihoodLoss``, ``SwiGLU`` uses ``Swish``): those are expanded in the next round, and if one is left
that cannot be, the model is given back as it was. Attributes the node leaves at their schema default are written
on it first, since a body reads them by reference (``HannWindow``'s ``Cast(to=@output_datatype)``). Nodes in later
rounds are named by their index in the graph the earlier rounds made.
"""

from __future__ import annotations

from trtkit.builder.rewrites.base import APPLIED, SKIPPED, Rewrite, main_opset, value_types

_DOMAIN = "trtkit.expand"


_MAX_ROUNDS = 4  # a body may use function-bodied ops (SoftmaxCrossEntropyLoss uses NegativeLogLikelihoodLoss)


def rewrite(proto, target) -> list:
    """Expand each node of an unsupported function-bodied op whose body uses only supported ops.

    A body op that is itself unsupported but function-bodied counts as supported when its own expansion, in a later
    round, leaves only supported ops; if some such op is left in the end, the whole rewrite is undone and named.
    """
    import onnx

    original = onnx.ModelProto()
    original.CopyFrom(proto)
    before = _op_types(proto)
    changes: list = []
    for _ in range(_MAX_ROUNDS):
        found = _expand_round(proto, target)
        changes += [c for c in found if c not in changes]  # a node left in one round is named once, not per round
        if not any(c.status == APPLIED for c in found):
            break
    opset = main_opset(proto)
    left = sorted(op for op in _op_types(proto) - before if not target.supported(op, opset) and op != "CastLike")
    if left:
        proto.CopyFrom(original)
        why = f"{target.label}'s parser has no importer for {', '.join(left)}"
        what = f"not expanded: the function bodies left {', '.join(left)}, which this parser lacks and cannot expand"
        return [Rewrite("expand-function", "model", what, why, SKIPPED)]
    return changes


def _expand_round(proto, target) -> list:
    """One pass over the main graph: every expandable node becomes its body (inlined); returns what was done."""
    import onnx.inliner

    opset = main_opset(proto)
    changes: list = []
    names: list = []
    types: dict = {}
    for index, node in enumerate(proto.graph.node):
        if (node.domain or "") not in ("", "ai.onnx") or node.op_type == "CastLike":  # castlike's own rewrite
            continue
        if target.supported(node.op_type, opset):
            continue
        where = f"node '{node.name or f'#{index}'}' ({node.op_type})"
        why = f"{target.label}'s parser has no importer for {node.op_type}"
        types = types or value_types(proto)  # before any node is renamed: inference must know every op
        body = _function_body(node, types, opset)
        if body is None:
            continue
        ops = sorted({n.op_type for n in body.node})
        # CastLike in a body is no obstacle: the castlike rewrite, next in line, makes it a Cast; nor is an op
        # with a function body of its own, expanded in the next round
        missing = [
            op for op in ops if not target.supported(op, opset) and op != "CastLike" and not _has_body(op, opset)
        ]
        if missing:
            changes.append(
                Rewrite(
                    "expand-function",
                    where,
                    f"not expanded: its function body uses {', '.join(missing)}, which this parser lacks too",
                    why,
                    SKIPPED,
                )
            )
            continue
        _add_default_attributes(node, opset)
        # one local function per node: context-dependent bodies differ with the node's attributes and input types
        body.name, body.domain = f"{node.op_type}_{index}_{len(proto.functions)}", _DOMAIN
        node.op_type, node.domain = body.name, _DOMAIN
        proto.functions.append(body)
        names.append((_DOMAIN, body.name))
        changes.append(Rewrite("expand-function", where, f"replaced by its ONNX function body ({', '.join(ops)})", why))
    if not names:
        return changes
    if not any(o.domain == _DOMAIN for o in proto.opset_import):
        proto.opset_import.append(onnx.helper.make_opsetid(_DOMAIN, 1))
    proto.CopyFrom(onnx.inliner.inline_selected_functions(proto, names, exclude=False))
    keep = [o for o in proto.opset_import if o.domain != _DOMAIN]
    del proto.opset_import[:]
    proto.opset_import.extend(keep)
    return changes


def _op_types(proto) -> set:
    return {n.op_type for n in proto.graph.node if (n.domain or "") in ("", "ai.onnx")}


def _has_body(op_type: str, opset: int) -> bool:
    import onnx

    try:
        schema = onnx.defs.get_schema(op_type, opset, "")
    except onnx.defs.SchemaError:
        return False
    return bool(schema.has_function or schema.has_context_dependent_function)  # type: ignore[attr-defined]


def _add_default_attributes(node, opset: int) -> None:
    """Give ``node`` every attribute its schema defaults that it leaves out: a body refers to attributes by name
    (HannWindow's ``Cast(to=@output_datatype)``), and the inliner drops a reference the node does not set."""
    import onnx

    schema = onnx.defs.get_schema(node.op_type, opset, node.domain or "")
    have = {a.name for a in node.attribute}
    for name, attr in schema.attributes.items():
        default = attr.default_value
        if name not in have and default is not None and default.type != onnx.AttributeProto.UNDEFINED:
            node.attribute.append(default)


def _function_body(node, types: dict, opset: int):
    """The schema's function for ``node`` at the model's opset, as a ``FunctionProto`` (``None``: it has none)."""
    import onnx

    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain or "")
    except onnx.defs.SchemaError:
        return None
    if schema.has_function:  # type: ignore[attr-defined]  # (onnx's stubs lack the function accessors)
        function = onnx.FunctionProto()
        version = _body_version(schema.function_opset_versions, opset)  # type: ignore[attr-defined]
        body = schema.get_function_with_opset_version(version)  # type: ignore[attr-defined]
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
    # the body at the model's own opset, as onnx's own "_expanded" test models have it (the inliner refuses two)
    keep = [o for o in function.opset_import if o.domain not in ("", "ai.onnx")]
    del function.opset_import[:]
    function.opset_import.extend([*keep, onnx.helper.make_opsetid("", opset)])
    return function


def _context_function(schema, node, types: dict, opset: int):
    """Context-dependent bodies (LayerNormalization...) depend on the inputs' element types."""
    import onnx

    input_types = []
    for name in node.input:
        if not name:  # an optional input left out: onnx's builders take an empty type for it
            input_types.append(onnx.TypeProto().SerializeToString())
            continue
        if name not in types:
            return None
        input_types.append(types[name].SerializeToString())
    version = _body_version(schema.context_dependent_function_opset_versions, opset)
    data = schema.get_context_dependent_function_with_opset_version(version, node.SerializeToString(), input_types)
    function = onnx.FunctionProto()
    function.ParseFromString(data)
    return function


def _body_version(versions, opset: int) -> int:
    """The opset of the newest body registered at or below the model's (context-dependent bodies are looked up at
    exactly the opset they were registered for: SoftmaxCrossEntropyLoss's at 13 in a model of opset 17)."""
    older = [v for v in versions if v <= opset]
    return max(older) if older else opset
