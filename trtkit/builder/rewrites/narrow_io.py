"""Narrow and unsigned integer graph inputs/outputs no TensorRT engine takes: the engine's INT32 along their path.

No TensorRT from 8.6 to 11.4 has INT16, UINT16, UINT32 or UINT64 tensors, and an INT8 network input or output needs
Q/DQ; since the parser cannot ``Cast`` to those types either, Casts at the boundary alone would leave the graph
unparsable. So every tensor of such a type (I/O, what is computed from it, initializers, ``Constant`` values, ``Cast``
results) becomes the engine type that holds it: INT32, or INT64 for UINT32/UINT64 where the engine has INT64 I/O.
That is done only where every op on the path gives the same values in the wider type:

- exact ops (data movement, ``Max``/``Min``, comparisons, ``Where``, ``Clip``, ``Div``/``Mod``, ``ReduceMax``/
  ``ReduceMin``, ``ArgMax``/``ArgMin``, ``TopK``, ``Cast``, ``Pow``'s exponent);
- modular ops (``Add``, ``Sub``, ``Mul``, ``Neg``): the wide result equals the narrow one modulo 2**bits, so such a
  value may flow only through other modular or data-movement ops to a graph output, where the runner's conversion
  back to the model's dtype takes that modulus; and only where the engine type is at least as wide as the model's.

The rewritten model must pass onnx's checker with strict shape inference, or it is left as it was (skipped, saying
why). UINT8 is left alone (every TensorRT takes it). The manifest keeps the model's dtypes, and the runner converts,
refusing (naming the tensor) a value that does not fit the engine's type.
"""

from __future__ import annotations

from trtkit.builder.rewrites.base import SKIPPED, Rewrite, value_types
from trtkit.errors import first_line

MODEL_DTYPES = ("int8", "int16", "uint16", "uint32", "uint64")
# the Rewrite name of each: the dtype it is for, like int64-io and float64-io
REWRITES = {f"{d}-io": d for d in MODEL_DTYPES}
_MOVE = frozenset(
    "Identity Reshape Transpose Squeeze Unsqueeze Flatten Concat Split Slice Gather GatherElements GatherND Expand "
    "Tile Pad".split()
)
_EXACT = _MOVE | frozenset(
    "Max Min Equal Greater Less GreaterOrEqual LessOrEqual Where Clip Div Mod ReduceMax ReduceMin ArgMax ArgMin TopK "
    "Shape Size Cast Pow".split()
)
_MODULAR = frozenset({"Add", "Sub", "Mul", "Neg"})


class _Blocked(Exception):
    """The path of a narrow tensor holds something that would not compute the same values in the engine's type."""


def engine_dtype(dtype: str, int64_io: bool) -> str:
    """The engine's integer type for a model ``dtype``: the narrowest it has that holds every value, else INT32/64."""
    return "int64" if dtype in ("uint32", "uint64") and int64_io else "int32"


def rewrite(proto, target) -> list:
    """Retype every tensor of a narrow/unsigned integer type when the graph takes or returns one."""
    import onnx

    graph = proto.graph
    qdq = any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in graph.node)
    narrow = {_onnx_type(d): d for d in MODEL_DTYPES if not (d == "int8" and qdq)}
    initializers = {t.name for t in graph.initializer}
    boundary = [(v, "input") for v in graph.input if v.name not in initializers and _elem(v.type) in narrow]
    boundary += [(v, "output") for v in graph.output if _elem(v.type) in narrow]
    if not boundary:
        return []
    work = onnx.ModelProto()
    work.CopyFrom(proto)
    try:
        ops = _Retype(work, narrow, target.int64_io).run()
        reason = _refusal(work)
    except _Blocked as exc:
        reason = str(exc)
    if reason:
        return [_change(v, where, target, f"left {_upper(v)}: {reason}", SKIPPED) for v, where in boundary]
    proto.CopyFrom(work)
    changes = []
    for value, where in boundary:
        dtype = narrow[_elem(value.type)]
        engine = engine_dtype(dtype, target.int64_io).upper()
        verb = "takes" if where == "input" else "returns"
        what = f"{verb} {engine} for the model's {dtype.upper()}; ops that now see {engine}: {', '.join(ops) or 'none'}"
        changes.append(_change(value, where, target, what))
    return changes


def _refusal(proto) -> str | None:
    """Why onnx's checker with strict shape inference refuses ``proto`` (``None``: it passes)."""
    import onnx

    try:
        onnx.checker.check_model(proto, full_check=True)
    except Exception as exc:  # noqa: BLE001 - the checker's and inference's own error types
        return f"onnx's checker refuses the retyped model ({first_line(exc)})"
    return None


def _change(value, where: str, target, what: str, status: str = "applied") -> Rewrite:
    dtype = {_onnx_type(d): d for d in MODEL_DTYPES}[_elem(value.type)]
    if dtype == "int8":
        why = "TensorRT takes INT8 network inputs/outputs only in a network with Q/DQ, and this one has none"
    else:
        why = f"no TensorRT has {dtype.upper()} tensors ({target.label}'s parser refuses them)"
    return Rewrite(f"{dtype}-io", f"{where} '{value.name}'", what, why, status)


class _Retype:
    """One pass over the graph in node order, retyping narrow tensors or raising :class:`_Blocked` naming why."""

    def __init__(self, proto, narrow: dict, int64_io: bool):
        self.proto, self.narrow, self.int64_io = proto, narrow, int64_io
        self.types = value_types(proto)
        self.retyped: dict = {}  # tensor -> the model's dtype
        self.modular: set = set()  # tensors equal to the model's values only modulo 2**bits
        self.ops: set = set()

    def run(self) -> list:
        graph = self.proto.graph
        for init in graph.initializer:
            if init.data_type in self.narrow:
                self.retyped[init.name] = self.narrow[init.data_type]
                self._convert_tensor(init, f"initializer '{init.name}'")
        for value in graph.input:
            if _elem(value.type) in self.narrow:
                self.retyped[value.name] = self.narrow[_elem(value.type)]
        for index, node in enumerate(graph.node):
            self._node(node, f"node '{node.name or f'#{index}'}' ({node.op_type})")
        for value in graph.output:
            if _elem(value.type) in self.narrow and value.name not in self.retyped:
                raise _Blocked(f"output '{value.name}' is computed by an op this rewrite does not follow")
        self._outer_scope_reads(graph)
        for value in [*graph.input, *graph.output, *graph.value_info]:
            if value.name in self.retyped and _elem(value.type) in self.narrow:
                value.type.tensor_type.elem_type = _onnx_type(self._engine(self.retyped[value.name]))
        return sorted(self.ops)

    def _engine(self, dtype: str) -> str:
        return engine_dtype(dtype, self.int64_io)

    def _dtype(self, name: str):
        known = self.types.get(name)
        return self.narrow.get(_elem(known)) if known is not None else None

    def _node(self, node, where: str) -> None:
        reads = [i for i in node.input if i in self.retyped]
        produced = [(o, self._dtype(o)) for o in node.output if self._dtype(o)]
        if node.op_type == "Constant" and produced:
            for attr in node.attribute:
                if attr.name == "value":
                    self._convert_tensor(attr.t, where)
            self.retyped[node.output[0]] = produced[0][1]
            return
        if node.op_type == "Cast" and produced:  # a Cast to a narrow type: to the engine's type instead
            for attr in node.attribute:
                if attr.name == "to":
                    attr.i = _onnx_type(self._engine(produced[0][1]))
        elif not reads:
            if produced:
                raise _Blocked(f"{where} makes the {produced[0][1].upper()} '{produced[0][0]}' from other types")
            return
        self._check(node, where, reads)
        self.ops.add(node.op_type)
        modular = node.op_type in _MODULAR or any(i in self.modular for i in reads)
        for name, dtype in produced:
            self.retyped[name] = dtype
            if modular:
                self.modular.add(name)

    def _check(self, node, where: str, reads: list) -> None:
        dtype = self.retyped[reads[0]] if reads else None
        if (node.domain or "") not in ("", "ai.onnx") or node.op_type not in _EXACT | _MODULAR:
            raise _Blocked(f"{where} reads {dtype.upper() if dtype else 'it'} and may compute other values in INT32")
        if any(a.HasField("g") or len(a.graphs) for a in node.attribute):
            raise _Blocked(f"{where} has a subgraph")
        if node.op_type in _MODULAR and dtype and _bits(self._engine(dtype)) < _bits(dtype):
            raise _Blocked(f"{where} wraps around at {dtype.upper()}'s width, wider than {self._engine(dtype).upper()}")
        if any(i in self.modular for i in reads) and node.op_type not in _MODULAR | _MOVE:
            raise _Blocked(f"{where} reads a value equal to the model's only modulo 2**bits (an Add, Sub or Mul)")

    def _convert_tensor(self, tensor, where: str) -> None:
        import numpy as np
        from onnx import numpy_helper

        values = numpy_helper.to_array(tensor)
        engine = np.dtype(self._engine(self.narrow[tensor.data_type]))
        info = np.iinfo(engine)
        if values.size and (int(values.min()) < info.min or int(values.max()) > info.max):
            raise _Blocked(f"{where} holds values beyond {engine.name.upper()}")
        tensor.CopyFrom(numpy_helper.from_array(values.astype(engine), tensor.name))

    def _outer_scope_reads(self, graph) -> None:
        """A subgraph that reads a retyped tensor of the graph around it would see another type."""
        for node in graph.node:
            for attr in node.attribute:
                for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                    read = {i for n in sub.node for i in n.input} & set(self.retyped)
                    if read:
                        raise _Blocked(f"a subgraph of node '{node.name}' reads '{sorted(read)[0]}'")
                    self._outer_scope_reads(sub)


def _onnx_type(dtype: str) -> int:
    import numpy as np
    from onnx import helper

    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _elem(type_proto) -> int:
    return type_proto.tensor_type.elem_type if type_proto.HasField("tensor_type") else 0


def _upper(value) -> str:
    from onnx import TensorProto

    return TensorProto.DataType.Name(_elem(value.type))


def _bits(dtype: str) -> int:
    import numpy as np

    return np.dtype(dtype).itemsize * 8
