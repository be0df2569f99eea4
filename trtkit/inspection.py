"""What is inside an ONNX model or an engine: I/O, shapes, profiles, layers and their precisions (data only)."""

from __future__ import annotations

from collections import Counter

from trtkit import _version_compat as compat
from trtkit.model import model_inputs, value_dims
from trtkit.runtime.engine import engine_information


def describe_onnx(loaded) -> dict:
    """I/O, opset and op counts of a :class:`~trtkit.model.LoadedModel`."""
    import onnx

    graph = loaded.proto.graph
    inputs = model_inputs(loaded.proto)
    in_types = {v.name: v.type.tensor_type.elem_type for v in graph.input}
    return {
        "kind": "onnx",
        "name": loaded.name,
        "sha256": loaded.sha256,
        "opset": loaded.opset,
        "ir_version": loaded.proto.ir_version,
        "producer": f"{loaded.proto.producer_name} {loaded.proto.producer_version}".strip(),
        "inputs": [
            {"name": n, "dtype": _onnx_dtype(onnx, in_types.get(n)), "shape": _dims(d)} for n, d in inputs.items()
        ],
        "outputs": [
            {"name": v.name, "dtype": _onnx_dtype(onnx, v.type.tensor_type.elem_type), "shape": _dims(value_dims(v))}
            for v in graph.output
        ],
        "nodes": len(graph.node),
        "initializers": len(graph.initializer),
        "ops": dict(Counter(n.op_type for n in graph.node).most_common()),
    }


def _onnx_dtype(onnx, elem_type) -> str:
    if not elem_type:
        return "?"
    return onnx.helper.tensor_dtype_to_np_dtype(elem_type).name


def _dims(dims) -> list:
    return [d if isinstance(d, int) and d > 0 else (d or "?") for d in dims]


def describe_engine(engine, trt) -> dict:
    """I/O tensors, profiles and per-layer precisions of a deserialized ``ICudaEngine``."""
    tensors = []
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        mode = engine.get_tensor_mode(name)
        tensors.append(
            {
                "name": name,
                "mode": compat.enum_name(mode),
                "dtype": compat.enum_name(engine.get_tensor_dtype(name)),
                "shape": list(engine.get_tensor_shape(name)),
            }
        )
    profiles = []
    for p in range(engine.num_optimization_profiles):
        shapes = {}
        for t in tensors:
            if t["mode"] == "INPUT" and engine.is_shape_inference_io(t["name"]):  # a shape tensor: its values
                lo, opt, hi = compat.profile_shape_values(engine, t["name"], p)
                shapes[t["name"]] = {"min": list(lo), "opt": list(opt), "max": list(hi), "values": True}
            elif t["mode"] == "INPUT" and -1 in t["shape"]:
                lo, opt, hi = engine.get_tensor_profile_shape(t["name"], p)
                shapes[t["name"]] = {"min": list(lo), "opt": list(opt), "max": list(hi)}
        profiles.append(shapes)
    layers = []
    if hasattr(engine, "create_engine_inspector"):
        layers = compat.inspector_layers(engine_information(trt, engine))
    return {
        "kind": "engine",
        "io": tensors,
        "profiles": profiles,
        "device_memory_bytes": compat.device_memory_size(engine),
        "num_layers": engine.num_layers if hasattr(engine, "num_layers") else len(layers),
        "layers": [
            {"name": layer.name, "type": layer.layer_type, "precision": layer.precision, "tactic": layer.tactic}
            for layer in layers
        ],
        "layers_by_precision": dict(Counter(layer.precision or "unknown" for layer in layers)) if layers else {},
    }
