"""Convert an ONNX model to FP16 (or BF16) for strongly typed TensorRT builds.

A strongly typed network (the only kind in TensorRT 11) runs each layer in the type its tensors have, so FP16 must
be in the model itself. This converter:

- turns FP32 initializers, ``Constant`` values and internal tensors into FP16 (values beyond ±65504 are clipped, with
  a warning naming each clipped initializer);
- keeps ops that overflow or lose too much in FP16 in FP32 (the block list: large reductions, ``Pow``, ``Exp``,
  normalizations, NMS, ...), with ``Cast`` nodes around them, and keeps the inputs ONNX requires to be FP32 (the
  ``scales`` of ``Resize``) and a ``Div`` feeding a ``Log`` (``inverse_sigmoid``'s quotient exceeds ±65504);
- keeps shape arithmetic (computed only from ``Shape``/``Size``) in FP32, where FP16 would round sizes above 2048;
- optionally keeps the graph inputs and outputs FP32 (``keep_io_types``), casting at the boundary.

The returned :class:`Conversion` lists (and logs) every node kept in FP32 and every clipped initializer.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from trtkit.errors import ModelError

if TYPE_CHECKING:
    import onnx

logger = logging.getLogger("trtkit")

FP16_MAX = 65504.0

# Ops kept in FP32 by default: they overflow (sums of many values, powers, exponentials), need the range of FP32
# (normalizations with large activations, NMS/RoI geometry), or hold subgraphs this converter does not rewrite.
DEFAULT_FP32_OPS = frozenset(
    {
        "Pow",
        "Exp",
        "Log",
        "Sqrt",
        "Reciprocal",
        "ReduceSum",
        "ReduceSumSquare",
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "ReduceProd",
        "CumSum",
        "Einsum",
        "LayerNormalization",
        "GroupNormalization",
        "InstanceNormalization",
        "LpNormalization",
        "NonMaxSuppression",
        "RoiAlign",
        "TopK",
        "Range",
        "RandomNormal",
        "RandomNormalLike",
        "RandomUniform",
        "RandomUniformLike",
        "EyeLike",
        "If",
        "Loop",
        "Scan",
    }
)
# Inputs that ONNX types as float32 regardless of the data type (by position).
FP32_ONLY_INPUTS = {"Resize": (1, 2), "Upsample": (1,)}
# Ops that start shape arithmetic.
_SHAPE_SOURCES = frozenset({"Shape", "Size"})


@dataclass
class Conversion:
    """Result of :func:`convert_float`.

    Attributes:
        model: the converted ``onnx.ModelProto``.
        dtype: ``"fp16"`` or ``"bf16"``.
        kept_fp32: names (with op types) of nodes left in FP32.
        clipped: names of initializers/constants whose values were clipped to the FP16 range.
        casts: number of Cast nodes inserted.
    """

    model: onnx.ModelProto
    dtype: str
    kept_fp32: list = field(default_factory=list)
    clipped: list = field(default_factory=list)
    casts: int = 0


def convert_to_fp16(model, **options) -> Conversion:
    """:func:`convert_float` to FP16."""
    return convert_float(model, dtype="fp16", **options)


def convert_to_bf16(model, **options) -> Conversion:
    """:func:`convert_float` to BF16 (same rules; no clipping is needed, BF16 has FP32's range)."""
    return convert_float(model, dtype="bf16", **options)


def convert_float(
    model,
    *,
    dtype: str = "fp16",
    keep_io_types: bool = True,
    fp32_ops=DEFAULT_FP32_OPS,
    fp32_nodes=(),
    keep_shape_math: bool = True,
) -> Conversion:
    """Convert an FP32 ONNX model's floating-point tensors to ``dtype``.

    Args:
        model: ``onnx.ModelProto`` (not modified; a converted copy is returned).
        dtype: ``"fp16"`` or ``"bf16"``.
        keep_io_types: keep FP32 graph inputs/outputs (Casts at the boundary).
        fp32_ops: op types kept in FP32.
        fp32_nodes: node names kept in FP32.
        keep_shape_math: keep nodes computed only from ``Shape``/``Size`` outputs in FP32.

    Returns:
        A :class:`Conversion`.

    Raises:
        ModelError: unknown ``dtype``, or the model's types cannot be inferred.
    """
    import onnx

    if dtype not in ("fp16", "bf16"):
        raise ModelError(f"Cannot convert a model to '{dtype}'; use fp16 or bf16.")
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    rewriter = _Rewriter(copy, dtype, keep_io_types, frozenset(fp32_ops), frozenset(fp32_nodes), keep_shape_math)
    conversion = rewriter.run()
    _log(conversion)
    return conversion


def _log(conv: Conversion) -> None:
    if conv.clipped:
        logger.warning(
            "%s conversion clipped values beyond ±%g in: %s", conv.dtype.upper(), FP16_MAX, ", ".join(conv.clipped)
        )
    if conv.kept_fp32:
        ops = Counter(entry.split(" (")[-1].rstrip(")") for entry in conv.kept_fp32)
        logger.info(
            "%s conversion kept %d node(s) in FP32: %s",
            conv.dtype.upper(),
            len(conv.kept_fp32),
            ", ".join(f"{op} x{n}" for op, n in sorted(ops.items())),
        )


# --- the rewrite ---------------------------------------------------------------------------------------------------


class _Rewriter:
    def __init__(self, model, dtype, keep_io, fp32_ops, fp32_nodes, keep_shape_math):
        from onnx import TensorProto

        self.model, self.graph = model, model.graph
        self.dtype = dtype
        self.low = TensorProto.FLOAT16 if dtype == "fp16" else TensorProto.BFLOAT16
        self.keep_io = keep_io
        self.fp32_ops, self.fp32_nodes, self.keep_shape_math = fp32_ops, fp32_nodes, keep_shape_math
        self.types = _infer_types(model)
        # Decisions use the types of the FP32 model; ``types`` is updated as tensors change.
        self.float_names = {name for name, t in self.types.items() if t == TensorProto.FLOAT}
        self.inits = {t.name: t for t in self.graph.initializer}
        self.native: dict[str, str] = {}  # float tensor → "fp32" or "low" as produced
        self.versions: dict[tuple[str, str], str] = {}
        self.new_nodes: list = []
        self.conv = Conversion(model, dtype)

    def is_float(self, name: str) -> bool:
        return name in self.float_names

    def run(self) -> Conversion:
        self._constants_to_initializers()
        blocked = self._blocked_nodes()
        self._rename_low_outputs(blocked)
        self._classify_inputs()
        for index, node in enumerate(list(self.graph.node)):
            self._convert_node(node, index in blocked)
        self._fix_outputs()
        self._finish()
        return self.conv

    def _blocked_nodes(self) -> set:
        shape_math = _shape_math_nodes(self.graph, self.inits) if self.keep_shape_math else set()
        # A quotient a Log reads stays FP32: inverse_sigmoid's x / (1 - x), clamped at 1e-5, reaches 1e5 (FP16: inf).
        logged = {n.input[0] for n in self.graph.node if n.op_type == "Log" and "Log" in self.fp32_ops}
        blocked = set()
        for index, node in enumerate(self.graph.node):
            quotient = node.op_type == "Div" and node.output[0] in logged
            if node.op_type in self.fp32_ops or node.name in self.fp32_nodes or index in shape_math or quotient:
                blocked.add(index)
                self.conv.kept_fp32.append(f"{node.name or node.output[0]} ({node.op_type})")
        return blocked

    def _rename_low_outputs(self, blocked) -> None:
        """Graph outputs produced in low precision get a Cast back to FP32 under their own name (keep_io_types)."""
        if not self.keep_io:
            return
        outputs = {o.name for o in self.graph.output if self.is_float(o.name)}
        for index, node in enumerate(self.graph.node):
            if index in blocked:
                continue
            for i, name in enumerate(node.output):
                if name in outputs:
                    inner = f"{name}__{self.dtype}"
                    node.output[i] = inner
                    self.types[inner] = self.types[name]
                    self.float_names.add(inner)
                    for consumer in self.graph.node:
                        for j, inp in enumerate(consumer.input):
                            if inp == name:
                                consumer.input[j] = inner

    def _classify_inputs(self) -> None:
        for value in self.graph.input:
            if value.name in self.inits or not self.is_float(value.name):
                continue
            if self.keep_io:
                self.native[value.name] = "fp32"
            else:
                self.native[value.name] = "low"
                value.type.tensor_type.elem_type = self.low

    def _constants_to_initializers(self) -> None:
        """Float ``Constant`` nodes become initializers, converted on demand like the others."""
        from onnx import TensorProto

        keep = []
        for node in self.graph.node:
            value = next((a.t for a in node.attribute if a.name == "value" and a.type == a.TENSOR), None)
            if node.op_type == "Constant" and value is not None and value.data_type == TensorProto.FLOAT:
                init = self.graph.initializer.add()
                init.CopyFrom(value)
                init.name = node.output[0]
                self.inits[init.name] = init
                self.types[init.name] = TensorProto.FLOAT
                self.float_names.add(init.name)
            else:
                keep.append(node)
        del self.graph.node[:]
        self.graph.node.extend(keep)

    def _convert_node(self, node, blocked: bool) -> None:
        want = "fp32" if blocked else "low"
        float_outputs = [name for name in node.output if self.is_float(name)]
        fp32_positions = FP32_ONLY_INPUTS.get(node.op_type, ())
        if not (node.op_type == "Cast" and not blocked):
            for i, name in enumerate(node.input):
                if self.is_float(name):
                    node.input[i] = self.version_of(name, "fp32" if i in fp32_positions else want)
        for inner, i in _outer_reads(node):  # subgraphs stay as they are: what they read of this graph is FP32
            if self.is_float(inner.input[i]):
                inner.input[i] = self.version_of(inner.input[i], "fp32")
        if not blocked:
            self._convert_attributes(node)
        for name in float_outputs:
            self.native[name] = want
            if want == "low":
                self.types[name] = self.low
        self.new_nodes.append(node)

    def _convert_attributes(self, node) -> None:
        from onnx import TensorProto

        for attr in node.attribute:
            if node.op_type == "Cast" and attr.name == "to" and attr.i == TensorProto.FLOAT:
                attr.i = self.low
            elif attr.type == attr.TENSOR and attr.t.data_type == TensorProto.FLOAT:
                attr.t.CopyFrom(self._lower_tensor(attr.t, node.name or node.output[0]))

    def version_of(self, name: str, want: str) -> str:
        """The name of ``name`` in precision ``want``, adding a converted initializer or a Cast once."""
        if name in self.inits:
            if want == "fp32":
                return name
            return self._low_initializer(name)
        have = self.native.get(name, "fp32")
        if have == want:
            return name
        key = (name, want)
        if key not in self.versions:
            self.versions[key] = self._cast(name, want)
        return self.versions[key]

    def _low_initializer(self, name: str) -> str:
        key = (name, "low")
        if key not in self.versions:
            lowered = self._lower_tensor(self.inits[name], name)
            lowered.name = f"{name}__{self.dtype}"
            self.graph.initializer.append(lowered)
            self.versions[key] = lowered.name
        return self.versions[key]

    def _lower_tensor(self, tensor, label: str):
        from onnx import numpy_helper

        values = numpy_helper.to_array(tensor).astype(np.float32)
        if self.dtype == "fp16":
            if values.size and np.abs(values[np.isfinite(values)]).max(initial=0.0) > FP16_MAX:
                self.conv.clipped.append(label)
            out = numpy_helper.from_array(np.clip(values, -FP16_MAX, FP16_MAX).astype(np.float16), tensor.name)
            return out
        return _bf16_tensor(values, tensor.name)

    def _cast(self, name: str, want: str) -> str:
        from onnx import TensorProto, helper

        target = TensorProto.FLOAT if want == "fp32" else self.low
        out = f"{name}__to_{'fp32' if want == 'fp32' else self.dtype}"
        self.new_nodes.append(helper.make_node("Cast", [name], [out], name=f"{out}_cast", to=target))
        self.types[out] = target
        self.native[out] = want
        self.conv.casts += 1
        return out

    def _fix_outputs(self) -> None:
        from onnx import helper

        for value in self.graph.output:
            inner = f"{value.name}__{self.dtype}"
            if self.keep_io and inner in self.native:
                self.new_nodes.append(
                    helper.make_node(
                        "Cast", [inner], [value.name], name=f"{value.name}_cast", to=value.type.tensor_type.elem_type
                    )
                )
                self.conv.casts += 1
            elif not self.keep_io and self.native.get(value.name) == "low":
                value.type.tensor_type.elem_type = self.low

    def _finish(self) -> None:
        del self.graph.node[:]
        self.graph.node.extend(_toposort(self.new_nodes, self.graph))
        used = {i for n in self.graph.node for i in [*n.input, *(m.input[j] for m, j in _outer_reads(n))]}
        keep = [t for t in self.graph.initializer if t.name in used or t.name in {o.name for o in self.graph.output}]
        del self.graph.initializer[:]
        self.graph.initializer.extend(keep)
        del self.graph.value_info[:]


def _bf16_tensor(values: np.ndarray, name: str):
    """A BFLOAT16 TensorProto from float32 values (round to nearest even), without needing ml_dtypes."""
    from onnx import TensorProto

    bits = values.astype(np.float32).view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    rounded = np.where(np.isnan(values), np.uint16(0x7FC0), rounded)
    tensor = TensorProto(name=name, data_type=TensorProto.BFLOAT16, dims=list(values.shape))
    tensor.raw_data = rounded.astype("<u2").tobytes()
    return tensor


def _infer_types(model) -> dict:
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception as exc:  # onnx raises several types here
        raise ModelError(f"Cannot infer the model's tensor types for precision conversion: {exc}") from exc
    g = inferred.graph
    types = {t.name: t.data_type for t in g.initializer}
    for value in list(g.input) + list(g.output) + list(g.value_info):
        if value.type.HasField("tensor_type"):
            types[value.name] = value.type.tensor_type.elem_type
    for node in g.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.type == attr.TENSOR:
                    types[node.output[0]] = attr.t.data_type
    return types


def _outer_reads(node, defined=frozenset()):
    """``(subgraph node, input index)`` of each input that ``node``'s subgraphs (nested ones too) read from outside."""
    for attr in node.attribute:
        for graph in [attr.g] if attr.type == attr.GRAPH else attr.graphs:
            inner = {o for n in graph.node for o in n.output} | {v.name for v in [*graph.input, *graph.initializer]}
            inner |= defined
            for n in graph.node:
                yield from ((n, i) for i, name in enumerate(n.input) if name and name not in inner)
                yield from _outer_reads(n, inner)


def _shape_math_nodes(graph, inits) -> set:
    """Indices of nodes whose inputs all come from Shape/Size (transitively) or constants, with at least one shape."""
    shape_like, constant = set(), set(inits)
    found = set()
    for index, node in enumerate(graph.node):
        if node.op_type in _SHAPE_SOURCES:
            shape_like.update(node.output)
            continue
        if node.op_type == "Constant":
            constant.update(node.output)
            continue
        inputs = [i for i in node.input if i]
        if inputs and all(i in shape_like or i in constant for i in inputs) and any(i in shape_like for i in inputs):
            shape_like.update(node.output)
            found.add(index)
    return found


def _toposort(nodes: list, graph) -> list:
    """Order nodes so every input is produced before use (inserted Casts follow their source)."""
    available = {v.name for v in graph.input} | {t.name for t in graph.initializer} | {""}
    pending, ordered = list(nodes), []
    while pending:
        progressed, rest = False, []
        for node in pending:
            if all(i in available for i in [*node.input, *(m.input[j] for m, j in _outer_reads(node))]):
                ordered.append(node)
                available.update(node.output)
                progressed = True
            else:
                rest.append(node)
        if not progressed:
            missing = sorted({i for n in rest for i in n.input if i not in available})[:5]
            raise ModelError(f"Precision conversion left inputs without a producer: {missing} (a trtkit bug?)")
        pending = rest
    return ordered
