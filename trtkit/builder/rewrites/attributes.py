"""Opset-18 ``Reduce*``/``Pad``/``Split`` inputs given back as attributes, and GridSample-20's mode names as
GridSample-16's, for parsers that read the older forms.

Opset 18 moved ``axes`` of ``ReduceMean``/``ReduceMax``/... from an attribute to an input, added an ``axes`` input to
``Pad`` and a ``num_outputs`` attribute to ``Split``. A parser that knows opsets only up to 17 reads the attribute
forms: it ignores the ``axes`` input and reduces over every axis, or pads the wrong axes. When the model's opset is
still above the parser's (the version converter failed on some other node), nodes whose inputs are constants are put
back in the opset-17 form; others are named and left.
"""

from __future__ import annotations

from trtkit.builder.rewrites.base import SKIPPED, Rewrite, main_opset
from trtkit.quant.opset import REDUCE_AXES_AT_18


def rewrite(proto, target) -> list:
    """Rewrite opset-18 input forms into attributes where the parser's range ends below 18, and GridSample-20's
    mode names into GridSample-16's where it ends below 20."""
    opset = main_opset(proto)
    if target.max_opset is None or opset <= target.max_opset:
        return []
    constants = _constants(proto)
    why = f"{target.label}'s parser reads the opset-{target.max_opset} attribute form"
    changes = []
    inputs_at_18 = opset >= 18 and target.max_opset < 18
    for index, node in enumerate(proto.graph.node):
        where = f"node '{node.name or f'#{index}'}' ({node.op_type})"
        if node.op_type == "GridSample" and opset >= 20 and target.max_opset < 20:
            change = _grid_sample(proto, node, where, why)
            changes += [change] if change is not None else []
        elif not inputs_at_18:
            continue
        elif node.op_type in REDUCE_AXES_AT_18 and len(node.input) > 1 and node.input[1]:
            changes.append(_reduce(node, constants, where, why))
        elif node.op_type == "Pad" and len(node.input) > 3 and node.input[3]:
            changes.append(_pad(proto, node, constants, where, why))
        elif node.op_type == "Split" and any(a.name == "num_outputs" for a in node.attribute):
            changes.append(_split(proto, node, where, why))
    return changes


def _reduce(node, constants: dict, where: str, why: str) -> Rewrite:
    from onnx import helper

    axes = constants.get(node.input[1])
    if axes is None:
        return Rewrite("attribute-inputs", where, f"left as is: axes '{node.input[1]}' is not a constant", why, SKIPPED)
    node.attribute.append(helper.make_attribute("axes", [int(a) for a in axes.reshape(-1)]))
    del node.input[1:]
    return Rewrite("attribute-inputs", where, f"axes input -> attribute {list(int(a) for a in axes.reshape(-1))}", why)


# GridSample-20 renamed the modes (and took N-D inputs); for 4-D inputs the two versions compute the same
_GRID_SAMPLE_MODES_16 = {"linear": "bilinear", "cubic": "bicubic"}


def _grid_sample(proto, node, where: str, why: str) -> Rewrite | None:
    """``GridSample(mode='linear'|'cubic')`` of a 4-D input -> GridSample-16's ``'bilinear'|'bicubic'``."""
    from onnx import helper

    mode = next((a for a in node.attribute if a.name == "mode"), None)
    name = mode.s.decode() if mode is not None else "linear"  # GridSample-20's default is 'linear'
    if name not in _GRID_SAMPLE_MODES_16:
        return None
    dims = _dims_of(proto, node.input[0])
    if dims is None or len(dims) != 4:
        rank = "unknown" if dims is None else len(dims)
        return Rewrite(
            "attribute-inputs",
            where,
            f"left as is: mode '{name}' on an input of rank {rank} (GridSample-16 takes 4-D inputs only)",
            why,
            SKIPPED,
        )
    keep = [a for a in node.attribute if a.name != "mode"]
    del node.attribute[:]
    node.attribute.extend([*keep, helper.make_attribute("mode", _GRID_SAMPLE_MODES_16[name])])
    return Rewrite(
        "attribute-inputs",
        where,
        f"mode '{name}' -> '{_GRID_SAMPLE_MODES_16[name]}' (GridSample-16's "
        "name for the same interpolation on 4-D inputs)",
        why,
    )


def _pad(proto, node, constants: dict, where: str, why: str) -> Rewrite:
    """``Pad(x, pads, value, axes)`` -> ``Pad(x, full_pads, value)`` with zeros on the axes not listed."""
    import numpy as np
    from onnx import numpy_helper

    pads, axes = constants.get(node.input[1]), constants.get(node.input[3])
    dims = _dims_of(proto, node.input[0])
    rank = None if dims is None else len(dims)
    if pads is None or axes is None or rank is None:
        return Rewrite(
            "attribute-inputs", where, "left as is: pads/axes are not constants or the rank is unknown", why, SKIPPED
        )
    axes = [int(a) + (rank if a < 0 else 0) for a in axes.reshape(-1)]
    full = np.zeros(2 * rank, dtype=np.int64)
    for i, axis in enumerate(axes):
        full[axis], full[rank + axis] = pads[i], pads[len(axes) + i]
    name = f"{node.input[1]}_all_axes"
    proto.graph.initializer.append(numpy_helper.from_array(full, name))
    node.input[1] = name
    del node.input[3:]
    return Rewrite("attribute-inputs", where, f"pads over axes {axes} -> pads over all {rank} axes", why)


def _split(proto, node, where: str, why: str) -> Rewrite:
    """``Split(num_outputs=n)`` -> ``Split(x, split)`` with the sizes opset 18 defines, when the axis is static."""
    import numpy as np
    from onnx import numpy_helper

    n = next(a.i for a in node.attribute if a.name == "num_outputs")
    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
    dims = _dims_of(proto, node.input[0])
    size = dims[axis] if dims is not None and -len(dims) <= axis < len(dims) else None
    if not isinstance(size, int):
        return Rewrite("attribute-inputs", where, "left as is: the split axis is not static", why, SKIPPED)
    chunk = -(-size // n)
    sizes = [min(chunk, size - i * chunk) for i in range(n)]
    name = f"{node.output[0]}_split_sizes"
    proto.graph.initializer.append(numpy_helper.from_array(np.array(sizes, dtype=np.int64), name))
    keep = [a for a in node.attribute if a.name != "num_outputs"]
    del node.attribute[:]
    node.attribute.extend(keep)
    del node.input[1:]
    node.input.append(name)
    return Rewrite("attribute-inputs", where, f"num_outputs={n} -> split sizes {sizes}", why)


def _constants(proto) -> dict:
    from onnx import numpy_helper

    values = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer if not t.external_data}
    for node in proto.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            values[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return values


def _dims_of(proto, name: str):
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False)
    except Exception:  # noqa: BLE001 - unknown shape: the node is left as is
        return None
    for value in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        if value.name == name and value.type.tensor_type.HasField("shape"):
            return [d.dim_value if d.HasField("dim_value") else None for d in value.type.tensor_type.shape.dim]
    return None
