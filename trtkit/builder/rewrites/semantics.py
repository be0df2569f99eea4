"""Nodes an older parser would import with other semantics: a wrong engine, not a parse error.

When a model's opset is above the parser's and onnx's version converter could not bring it down (see
:mod:`trtkit.builder.rewrites.opset`), the parser still reads each node in the newest form it knows and ignores
inputs and attributes that came later. For most ops that is harmless; for these it changes the result:

- ``ReduceMean``/``ReduceMax``/... (opset 18): ``axes`` became an input. A parser of opset 17 ignores the input and
  reduces over every axis; ``noop_with_empty_axes=1`` without axes (identity) becomes a full reduction too.
- ``Pad`` (opset 18): a non-constant ``axes`` input, ignored, pads the wrong axes.
- ``ScatterND``/``ScatterElements`` (opset 18): ``reduction='min'``/``'max'`` are ignored (plain overwrite).
- ``Resize`` (opsets 18, 19): ``antialias=1``, ``keep_aspect_ratio_policy`` other than ``stretch``, an ``axes``
  attribute, and ``coordinate_transformation_mode='half_pixel_symmetric'`` are ignored.
- ``GridSample`` (opset 20): the modes were renamed (``linear``, ``cubic``); an opset-16 parser does not know them.
- ``AveragePool`` (opset 19): ``dilations`` are ignored.

And one difference of TensorRT 8.6's own (parsers of opset 17 and below): a pool with ``ceil_mode=1`` whose last
window would start in the right padding. ONNX (like PyTorch) drops that window; TensorRT rounds the output size up
without that rule, so the engine's output has another shape.

Constant ``axes`` inputs are put back as attributes by :mod:`trtkit.builder.rewrites.attributes` before this runs;
what is left is what no rewrite can express in the parser's opset: :func:`find` names each so the build refuses it
with the node, the op and what to change.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from trtkit.builder.rewrites.base import main_opset, value_types
from trtkit.quant.opset import REDUCE_AXES_AT_18


@dataclass(frozen=True)
class Hazard:
    """One node the parser would import with other semantics than the model's."""

    node: str
    op_type: str
    what: str
    advice: str

    def to_json(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        return f"node '{self.node}' ({self.op_type}): {self.what}; {self.advice}"


def find(proto, target) -> list:
    """Every :class:`Hazard` of ``proto`` for a parser of ``target`` (none when the parser's range is unknown).

    Two kinds: the later forms listed above (for a model whose opset is above the parser's), and, for every model,
    attributes and inputs that the op's schema at the opset the parser reads does not have (onnx's version converter
    keeps AveragePool-19's ``dilations`` or ReduceMax-18's ``noop_with_empty_axes`` when it converts to opset 17)
    unless their value is the one that changes nothing.
    """
    top = target.max_opset
    if top is None:
        return []
    parser_opset = min(main_opset(proto), top)
    constants = {t.name for t in proto.graph.initializer}
    constants |= {o for n in proto.graph.node if n.op_type == "Constant" for o in n.output}
    empty = _statically_empty(proto)
    found: list = []
    types = None
    for index, node in enumerate(proto.graph.node):
        if (node.domain or "") not in ("", "ai.onnx"):
            continue
        name = node.name or f"#{index}"
        later = [(what, since) for what, since in _differences(node, constants, empty) if since > parser_opset]
        for what, since in later or _unknown_to_parser(node, parser_opset, empty):
            found.append(Hazard(name, node.op_type, what, _advice(since, parser_opset, target.label)))
        if node.op_type in _POOLS and top <= 17 and _int(_attr(node, "ceil_mode")) == 1:
            types = types if types is not None else value_types(proto)  # shape inference once, and only for these
            found += [Hazard(name, node.op_type, what, _POOL_ADVICE) for what in _last_window_in_padding(types, node)]
    return found


_POOLS = frozenset({"AveragePool", "MaxPool", "LpPool"})
_POOL_ADVICE = (
    "TensorRT 8.6 keeps that window (its round-up output size), so the engine's output has another shape; export "
    "with ceil_mode=0 and the padding that gives the size wanted"
)


def _attr(node, name: str):
    return next((a for a in node.attribute if a.name == name), None)


def _last_window_in_padding(types: dict, node):
    """With ``ceil_mode=1``, ONNX (like PyTorch) drops an output window that would start in the right padding; for
    each spatial axis of a static input where that happens, what the difference is."""
    if (_text(_attr(node, "auto_pad")) or "NOTSET") != "NOTSET":
        return
    kind = types.get(node.input[0])
    dims = [d.dim_value if d.HasField("dim_value") else None for d in kind.tensor_type.shape.dim] if kind else []
    kernel = list(_attr(node, "kernel_shape").ints) if _attr(node, "kernel_shape") else []
    spatial = [d for d in dims[2:] if d is not None]
    if not kernel or len(spatial) != len(kernel) or len(spatial) != len(dims[2:]):
        return  # not a pool of a static spatial input
    n = len(kernel)
    strides = list(_attr(node, "strides").ints) if _attr(node, "strides") else [1] * n
    dilations = list(_attr(node, "dilations").ints) if _attr(node, "dilations") else [1] * n
    pads = list(_attr(node, "pads").ints) if _attr(node, "pads") else [0] * (2 * n)
    for axis in range(n):
        size, k, s, d, begin, end = (
            spatial[axis],
            kernel[axis],
            strides[axis],
            dilations[axis],
            pads[axis],
            pads[n + axis],
        )
        rounded_up = -(-(size + begin + end - ((k - 1) * d + 1)) // s) + 1
        if (rounded_up - 1) * s >= size + begin:
            yield (
                f"ceil_mode=1 and the last window along axis {axis + 2} starts in the padding: ONNX gives "
                f"{rounded_up - 1} output(s) there, TensorRT {rounded_up}"
            )


def _statically_empty(proto) -> set:
    """Graph inputs and values whose declared shape holds no element (e.g. ``axes`` of shape ``[0]``)."""
    empty = set()
    for value in [*proto.graph.input, *proto.graph.value_info]:
        dims = value.type.tensor_type.shape.dim
        if value.type.HasField("tensor_type") and any(d.HasField("dim_value") and d.dim_value == 0 for d in dims):
            empty.add(value.name)
    return empty


def _unknown_to_parser(node, opset: int, empty: frozenset | set = frozenset()):
    """Attributes and inputs of ``node`` that its op's schema at ``opset`` does not have, with a value that matters
    (an input declared with no element is taken as absent)."""
    import onnx.defs

    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
    except onnx.defs.SchemaError:
        return
    later = _newest_schema(node.op_type)
    for attr in node.attribute:
        if attr.name not in schema.attributes and not _neutral(attr, later):
            yield f"attribute '{attr.name}' is not in {node.op_type}-{schema.since_version}'s schema", opset + 1
    declared = schema.inputs
    variadic = bool(declared) and declared[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic
    if not variadic:
        for position, tensor in enumerate(node.input[len(declared) :], start=len(declared)):
            if tensor and tensor not in empty and _shown(tensor) not in empty:
                yield (
                    (
                        f"input {position + 1} '{_shown(tensor)}' is not in {node.op_type}-{schema.since_version}'s "
                        f"schema"
                    ),
                    opset + 1,
                )


def _newest_schema(op_type: str):
    import onnx.defs

    try:
        return onnx.defs.get_schema(op_type, "")
    except onnx.defs.SchemaError:
        return None


def _neutral(attr, schema) -> bool:
    """An attribute set to what its absence means: ``dilations`` of ones, or the newest schema's default."""
    from onnx import helper

    value = helper.get_attribute_value(attr)
    if attr.name == "dilations":
        return all(d == 1 for d in value)
    if schema is None or attr.name not in schema.attributes:
        return False
    default = schema.attributes[attr.name].default_value
    if default is None or default.type == 0:
        return False
    return helper.get_attribute_value(default) == value


def _advice(since: int, top: int, label: str) -> str:
    return (
        f"{label}'s parser reads opset {top} and ignores what later opsets added, so the engine would compute "
        f"something else; re-export the model at opset {top} without it, or use a TensorRT whose parser reads "
        f"opset {since}"
    )


def _differences(node, constants: set, empty: frozenset | set = frozenset()):
    """``(what the parser would get wrong, the opset that added it)`` for ``node``."""
    attrs = {a.name: a for a in node.attribute}
    op = node.op_type
    if op in REDUCE_AXES_AT_18:
        axes = node.input[1] if len(node.input) > 1 else ""
        none = not axes or axes in empty or _shown(axes) in empty  # no axes, or an input that holds none
        if axes and not none and axes not in constants:
            yield f"its axes come from '{_shown(axes)}', not a constant: the parser would reduce over every axis", 18
        if none and _int(attrs.get("noop_with_empty_axes")) == 1:
            yield "noop_with_empty_axes=1 without axes (an identity): the parser would reduce over every axis", 18
    elif op == "Pad" and len(node.input) > 3 and node.input[3] and node.input[3] not in constants:
        yield f"its axes come from '{node.input[3]}', not a constant: the parser would pad other axes", 18
    elif op in ("ScatterND", "ScatterElements") and _text(attrs.get("reduction")) in ("min", "max"):
        yield f"reduction='{_text(attrs.get('reduction'))}': the parser would overwrite instead", 18
    elif op == "Resize":
        if _int(attrs.get("antialias")) == 1:
            yield "antialias=1: the parser would resize without the antialiasing filter", 18
        policy = _text(attrs.get("keep_aspect_ratio_policy"))
        if policy not in (None, "stretch"):
            yield f"keep_aspect_ratio_policy='{policy}': the parser would stretch to the sizes given", 18
        if "axes" in attrs:
            yield "an axes attribute: the parser would read scales/sizes for every axis", 18
        if _text(attrs.get("coordinate_transformation_mode")) == "half_pixel_symmetric":
            yield "coordinate_transformation_mode='half_pixel_symmetric': the parser does not know it", 19
    elif op == "GridSample" and _text(attrs.get("mode")) in ("linear", "cubic"):
        yield f"mode='{_text(attrs.get('mode'))}' (opset 20's name): the parser knows 'bilinear'/'bicubic'", 20
    elif op == "AveragePool" and any(d != 1 for d in (attrs["dilations"].ints if "dilations" in attrs else ())):
        yield "dilations other than 1: the parser would pool without them", 19


def _int(attr) -> int | None:
    return None if attr is None else int(attr.i)


def _text(attr) -> str | None:
    return None if attr is None else attr.s.decode("utf-8", "replace")


def _shown(tensor: str) -> str:
    """The model's own name of a tensor the INT64 boundary rewrite renamed."""
    return tensor.removesuffix("__trtkit_int64")
