"""``input_uint8_nhwc``: the image normalization moved into the engine, so it takes the decoded pixels themselves.

An image model's input is usually ``(N, 3, H, W)`` float in 0..1, which the CPU makes from ``(N, H, W, 3)`` uint8
pixels: a cast, a scale and a transpose over every value, and a host-to-device copy four times the pixels' size.
Prepended to the graph instead (``Cast``, ``Mul`` by ``1/255``, ``Transpose`` to NCHW), that work runs on the GPU and
the engine takes ``(N, H, W, 3)`` uint8 under the input's own name (TensorRT takes UINT8 inputs that feed a Cast).

The arithmetic is the CPU's: ``float32(x) * float32(1/255)``, so the engine sees the values
:class:`trtkit.detection.Letterbox` computes on the CPU for a float input.
"""

from __future__ import annotations

import numpy as np

from trtkit.builder.rewrites.base import Rewrite
from trtkit.errors import ModelError

REWRITE = "uint8-nhwc-input"
SCALE = 1.0 / 255.0
_FLOATS = {1: np.float32, 10: np.float16, 11: np.float64}  # TensorProto FLOAT, FLOAT16, DOUBLE


def image_input(proto) -> tuple:
    """``(input ValueInfoProto, its dims)`` of the model's one float ``(N, 3, H, W)`` input.

    Raises:
        ModelError: the model has not exactly one graph input, or it is not a 4-D float input with 3 channels
            (the message says what was found).
    """
    from trtkit.model import value_dims

    initializers = {t.name for t in proto.graph.initializer}
    inputs = [v for v in proto.graph.input if v.name not in initializers]
    found = ", ".join(f"'{v.name}' {_describe(v)}" for v in inputs) or "none"
    need = "input_uint8_nhwc needs one float image input (N, 3, H, W)"
    if len(inputs) != 1:
        raise ModelError(f"{need}; the model has {len(inputs)} inputs: {found}.", field="input_uint8_nhwc")
    value = inputs[0]
    dims = value_dims(value)
    if value.type.tensor_type.elem_type not in _FLOATS or len(dims) != 4 or dims[1] != 3:
        raise ModelError(f"{need}; found {found}.", field="input_uint8_nhwc")
    if value.name in {o.name for o in proto.graph.output}:
        raise ModelError(f"{need}; input '{value.name}' is also a graph output.", field="input_uint8_nhwc")
    return value, dims


def nhwc_dims(dims) -> list:
    """``(N, C, H, W)`` dims → the uint8 input's ``(N, H, W, C)``."""
    return [dims[0], dims[2], dims[3], dims[1]]


def add_uint8_nhwc_input(proto) -> tuple:
    """A copy of ``proto`` whose image input is ``(N, H, W, 3)`` uint8, cast, scaled by 1/255 and transposed inside.

    Returns:
        ``(model, Rewrite)``: the new ``onnx.ModelProto`` and the record of what was done (for the manifest).

    Raises:
        ModelError: the model has no single float ``(N, 3, H, W)`` input (:func:`image_input`).
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    value, dims = image_input(proto)
    name = value.name
    float_type = value.type.tensor_type.elem_type
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    graph = model.graph
    inner = _fresh(graph, f"{name}__trtkit_nchw")
    cast, scaled, scale = (_fresh(graph, f"{name}__trtkit_{s}") for s in ("float", "scaled", "scale"))
    for node in graph.node:
        node.input[:] = [inner if i == name else i for i in node.input]
    graph.initializer.append(numpy_helper.from_array(np.array(SCALE, _FLOATS[float_type]), scale))
    prefix = [
        helper.make_node("Cast", [name], [cast], name=f"{name}__trtkit_cast", to=float_type),
        helper.make_node("Mul", [cast, scale], [scaled], name=f"{name}__trtkit_mul"),
        helper.make_node("Transpose", [scaled], [inner], name=f"{name}__trtkit_transpose", perm=[0, 3, 1, 2]),
    ]
    nodes = prefix + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    new_input = helper.make_tensor_value_info(name, TensorProto.UINT8, nhwc_dims(dims))
    index = [v.name for v in graph.input].index(name)
    graph.input[index].CopyFrom(new_input)
    shape = "x".join(str(d) if isinstance(d, int) else (d or "?") for d in nhwc_dims(dims))
    record = Rewrite(
        REWRITE,
        f"input '{name}'",
        f"takes ({shape}) uint8 pixels: Cast to {TensorProto.DataType.Name(float_type)}, Mul by 1/255, Transpose "
        "to NCHW inside the engine",
        "asked for: the normalization runs on the GPU and a quarter of the bytes cross to it",
    )
    return model, record


def _fresh(graph, base: str) -> str:
    taken = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    taken |= {o for node in graph.node for o in node.output}
    name, n = base, 0
    while name in taken:
        n += 1
        name = f"{base}_{n}"
    return name


def _describe(value) -> str:
    from onnx import TensorProto

    from trtkit.model import value_dims

    dims = value_dims(value)
    elem = value.type.tensor_type.elem_type
    shape = "(" + ", ".join(str(d) if d is not None else "?" for d in dims) + ")"
    return f"{TensorProto.DataType.Name(elem) if elem else 'untyped'} {shape}"
