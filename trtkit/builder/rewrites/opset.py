"""An opset outside the parser's range: onnx's version converter, else a failure naming the range.

Above the range (a newer exporter), the model is converted down to the highest opset the parser documents. Below it
(opset 1-6 models, from exporters that wrote the old ``broadcast`` attribute), it is converted up to the lowest opset
the parser reads (the converter turns the old forms, such as ``broadcast=1``, into the newer ones). A converted model
that onnx's checker refuses where it took the original is not used: the original is kept and the step named failed.
"""

from __future__ import annotations

from trtkit.builder.rewrites.base import FAILED, Rewrite, main_opset
from trtkit.errors import first_line


def rewrite(proto, target) -> list:
    """Convert the model down to ``target.max_opset`` or up to ``target.min_opset`` when it is outside them."""
    opset = main_opset(proto)
    if target.max_opset is not None and opset > target.max_opset:
        why = f"{target.label}'s parser documents ai.onnx opsets up to {target.max_opset}; the model uses {opset}"
        advice = f"re-export the model at opset {target.max_opset} or lower, or use a newer TensorRT"
        return [_convert(proto, opset, target.max_opset, why, advice)]
    if target.min_opset is not None and 0 < opset < target.min_opset:
        why = f"{target.label}'s parser reads ai.onnx opsets from {target.min_opset}; the model uses {opset}"
        advice = f"re-export the model at opset {target.min_opset} or higher"
        return [_convert(proto, opset, target.min_opset, why, advice)]
    return []


def _convert(proto, opset: int, to: int, why: str, advice: str) -> Rewrite:
    """``proto`` converted in place to opset ``to``; the :class:`Rewrite` says so, or is ``FAILED`` naming why."""
    import onnx.version_converter

    try:
        converted = onnx.version_converter.convert_version(proto, to)
    except Exception as exc:  # noqa: BLE001 - the converter raises RuntimeError or its own assertion types
        what = f"could not convert opset {opset} to {to} with onnx's version converter ({first_line(exc)}); {advice}"
        return Rewrite("opset", "model", what, why, FAILED)
    _drop_defaults(converted, opset, to)
    invalid = _newly_invalid(proto, converted)
    if invalid:
        what = (
            f"could not convert opset {opset} to {to}: onnx's version converter gave an invalid model "
            f"({invalid}); {advice}"
        )
        return Rewrite("opset", "model", what, why, FAILED)
    functions = list(proto.functions)
    proto.CopyFrom(converted)
    if functions and not proto.functions:  # the converter drops model-local functions
        proto.functions.extend(functions)
    return Rewrite("opset", "model", f"converted from opset {opset} to {to} with onnx's version converter", why)


def _drop_defaults(model, opset: int, to: int) -> None:
    """Drop the attributes the converter keeps that the opset-``to`` op lacks, where they hold their opset-``opset``
    default (dynamo's ``noop_with_empty_axes=0`` on every Reduce*): the older op computes what the default says."""
    import onnx
    from onnx import helper

    for node in [n for n in model.graph.node if n.domain in ("", "ai.onnx")]:
        try:
            old, new = (onnx.defs.get_schema(node.op_type, v).attributes for v in (opset, to))
        except onnx.defs.SchemaError:
            continue
        for attr in [a for a in node.attribute if a.name in old and a.name not in new]:
            default = old[attr.name].default_value
            if default.name and helper.get_attribute_value(attr) == helper.get_attribute_value(default):
                node.attribute.remove(attr)


def _newly_invalid(original, converted) -> str | None:
    """What onnx's checker finds wrong in ``converted`` when it finds nothing wrong in ``original``: the converter
    keeps attributes the older opset does not have (AveragePool-19's ``dilations``, Cast-19's ``saturate``), which
    a parser of that opset would silently ignore."""
    import onnx

    try:
        onnx.checker.check_model(converted)
        return None
    except Exception as exc:  # noqa: BLE001 - onnx raises ValidationError or its C++ types
        problem = first_line(exc)
    try:
        onnx.checker.check_model(original)
    except Exception:  # noqa: BLE001 - the model was not valid to begin with: nothing to compare with
        return None
    return problem
