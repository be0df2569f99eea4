"""The pieces every compatibility rewrite shares: the :class:`Rewrite` record, its statuses, the
:class:`ParserTarget` it rewrites for, and the model's main opset (see :mod:`trtkit.builder.rewrites`)."""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, field
from typing import Callable

from trtkit import _version_compat as compat
from trtkit.builder.op_support import added_after_8, max_documented_opset, unsupported_as_of_10_15

APPLIED, FAILED, SKIPPED = "applied", "failed", "skipped"
_ASSUMED_VERSION = (8, 6)
# onnx-tensorrt's importers of broadcasting ops (Gemm, Add, PRelu...) assert `ctx->getOpsetVersion() >= 7 && "Pre-opset
# 7 broadcasting is unsupported in this version of the ONNX parser"`, in every TensorRT version trtkit supports
MIN_PARSER_OPSET = 7


@dataclass
class Rewrite:
    """One change made to the model (or one that was tried and skipped).

    Attributes:
        rewrite: which rewrite (``symbolic-dims``, ``int64-io``, ``float64-io``, ``expand-function``, ``decompose``,
            ``castlike``, ``opset``, ``attribute-inputs``, ``int8-io``/``int16-io``/``uint16-io``/``uint32-io``/
            ``uint64-io``, ``external-data``, ``fold-constants``).
        where: the node or tensor changed.
        what: what was done.
        why: which parser limit it works around.
        status: ``applied``, ``failed`` (it raised; the model is as before it) or ``skipped`` (not possible here).
    """

    rewrite: str
    where: str
    what: str
    why: str
    status: str = APPLIED

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Rewrite:
        return cls(**{k: data[k] for k in ("rewrite", "where", "what", "why", "status") if k in data})

    def __str__(self) -> str:
        mark = "" if self.status == APPLIED else f" [{self.status}]"
        return f"{self.rewrite}{mark} at {self.where}: {self.what} ({self.why})"


@dataclass(frozen=True)
class ParserTarget:
    """What the ONNX parser the model is prepared for can take.

    Attributes:
        label: ``TensorRT 8.6.0`` or ``TensorRT 8.6 (assumed: TensorRT not installed)``.
        max_opset: highest ai.onnx opset the parser documents (``None``: unknown, no conversion).
        min_opset: lowest ai.onnx opset the parser reads (``None``: no lower limit); models below it are converted up.
        int64_io: engines can take and return INT64 tensors.
        supports_op: ``op_type -> bool | None`` (``None``: unknown); the installed parser's answer where there is
            one, else the static support tables.
        data_types: the ONNX element type names (``FLOAT``, ``BFLOAT16``...) a network can hold (``None``: unknown,
            not checked); see :mod:`trtkit.builder.rewrites.dtypes`.
    """

    label: str
    max_opset: int | None
    int64_io: bool
    supports_op: Callable | None = field(compare=False, repr=False, default=None)
    min_opset: int | None = MIN_PARSER_OPSET
    data_types: frozenset | None = None

    def supported(self, op_type: str, opset: int) -> bool:
        """Whether the parser is known to import ``op_type`` (unknown counts as supported: never rewrite blindly)."""
        answer = self.supports_op(op_type) if self.supports_op is not None else None
        if answer is None:
            answer = _statically_supported(op_type, self.max_opset or opset)
        return answer is not False

    @classmethod
    def from_trt(cls, trt, parser=None) -> ParserTarget:
        """The target for a ``tensorrt`` module (the fake too); ``parser`` answers op support when given."""
        version = compat.version(trt)
        ask = (lambda op: compat.parser_supports_operator(parser, op)) if parser is not None else None
        return cls(
            f"TensorRT {compat.version_string(trt)}",
            max_documented_opset(version),
            compat.has_int64_io(trt),
            ask if ask is not None else (lambda op: _statically_supported_for(op, version)),
            data_types=_data_types(trt),
        )

    @classmethod
    def assumed(cls) -> ParserTarget:
        """TensorRT 8.6's parser as its support table documents it (used when TensorRT is not installed)."""
        return cls(
            "TensorRT 8.6 (assumed: TensorRT is not installed)",
            max_documented_opset(_ASSUMED_VERSION),
            False,
            lambda op: _statically_supported_for(op, _ASSUMED_VERSION),
            data_types=_data_types(None),
        )


def _data_types(trt) -> frozenset:
    return ALWAYS_TYPES if trt is None else types_of(trt)


# ONNX element types every TensorRT trtkit supports can hold (INT64: 8.6's parser narrows it to INT32; DOUBLE: its
# weights become FLOAT32, and float64 graph I/O is rewritten)
ALWAYS_TYPES = frozenset({"FLOAT", "FLOAT16", "INT8", "INT32", "INT64", "BOOL", "UINT8", "DOUBLE"})
# ONNX element type -> trt.DataType member that holds it, from TensorRT 10 (8.6's parser converts none of them)
TYPES_FROM_10 = {"BFLOAT16": "BF16", "FLOAT8E4M3FN": "FP8", "INT4": "INT4", "FLOAT4E2M1": "FP4", "FLOAT8E8M0": "E8M0"}


def types_of(trt) -> frozenset:
    """The ONNX element type names a network of the ``tensorrt`` module ``trt`` can hold."""
    if compat.version(trt)[:1] < (10,):
        return ALWAYS_TYPES
    members = getattr(trt, "DataType", None)
    return ALWAYS_TYPES | {onnx_name for onnx_name, member in TYPES_FROM_10.items() if hasattr(members, member)}


def _statically_supported_for(op_type: str, version: tuple):
    if op_type in unsupported_as_of_10_15():
        return False
    if tuple(version[:1]) < (10,) and op_type in added_after_8():
        return False
    return None


def _statically_supported(op_type: str, max_opset: int) -> bool | None:
    """An op first defined in an opset above the parser's range is one the parser cannot know."""
    first = _first_opsets().get(op_type)
    return None if first is None else first <= max_opset


@functools.lru_cache(maxsize=1)
def _first_opsets() -> dict:
    """ai.onnx op type -> the opset that first defined it."""
    import onnx

    first: dict = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.domain in ("", "ai.onnx"):
            first[schema.name] = min(first.get(schema.name, schema.since_version), schema.since_version)
    return first


def main_opset(proto) -> int:
    return max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=0)


def value_types(proto, subgraphs: bool = False) -> dict:
    """``{tensor: onnx.TypeProto}`` for every value onnx shape inference, the graph's declarations and its
    initializers know (inference that fails leaves the declared types); ``subgraphs``: the values of ``If``/``Loop``/
    ``Scan`` bodies too."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False)
    except Exception:  # noqa: BLE001 - without inference, the declared types are all there is
        inferred = proto
    types: dict = {}
    graphs = [inferred.graph]
    while graphs:
        graph = graphs.pop()
        for v in [*graph.input, *graph.value_info, *graph.output]:
            types.setdefault(v.name, v.type)
        for init in graph.initializer:
            types.setdefault(init.name, onnx.helper.make_tensor_type_proto(init.data_type, list(init.dims)))
        if subgraphs:
            graphs += [a.g for n in graph.node for a in n.attribute if a.HasField("g")]
            graphs += [g for n in graph.node for a in n.attribute for g in a.graphs]
    return types
