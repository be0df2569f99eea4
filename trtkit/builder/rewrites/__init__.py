"""Compatibility rewrites: ONNX-level changes that let TensorRT's parser take models real exporters write.

Each rewrite is a function ``(proto, target) -> list[Rewrite]`` that edits an ``onnx.ModelProto`` in place and names
every change it made (what, where, why). They need onnx only, never TensorRT: :class:`ParserTarget` says what the
parser can do, from the installed TensorRT (:func:`ParserTarget.from_trt`) or, without one, from what TensorRT 8.6's
parser documents (:func:`ParserTarget.assumed`), the oldest trtkit supports, so the rewritten model suits every
version.

:func:`apply_rewrites` runs them in order on a copy per rewrite: a rewrite that raises is skipped (the model stays as
it was before it) and named in the list with ``status="failed"``; it is never fatal by itself.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, field
from typing import Callable

APPLIED, FAILED, SKIPPED = "applied", "failed", "skipped"
_ASSUMED_VERSION = (8, 6)


@dataclass
class Rewrite:
    """One change made to the model (or one that was tried and skipped).

    Attributes:
        rewrite: which rewrite (``symbolic-dims``, ``int64-io``, ``expand-function``, ``opset``,
            ``attribute-inputs``, ``external-data``, ``fold-constants``).
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
        int64_io: engines can take and return INT64 tensors.
        supports_op: ``op_type -> bool | None`` (``None``: unknown); the installed parser's answer where there is
            one, else the static support tables.
    """

    label: str
    max_opset: int | None
    int64_io: bool
    supports_op: Callable | None = field(compare=False, repr=False, default=None)

    def supported(self, op_type: str, opset: int) -> bool:
        """Whether the parser is known to import ``op_type`` (unknown counts as supported: never rewrite blindly)."""
        answer = self.supports_op(op_type) if self.supports_op is not None else None
        if answer is None:
            answer = _statically_supported(op_type, self.max_opset or opset)
        return answer is not False

    @classmethod
    def from_trt(cls, trt, parser=None) -> ParserTarget:
        """The target for a ``tensorrt`` module (the fake too); ``parser`` answers op support when given."""
        from trtkit import _version_compat as compat
        from trtkit.builder.opcheck import max_documented_opset

        version = compat.version(trt)
        ask = (lambda op: compat.parser_supports_operator(parser, op)) if parser is not None else None
        return cls(f"TensorRT {compat.version_string(trt)}", max_documented_opset(version), compat.has_int64_io(trt),
                   ask if ask is not None else (lambda op: _statically_supported_for(op, version)))

    @classmethod
    def assumed(cls) -> ParserTarget:
        """TensorRT 8.6's parser as its support table documents it (used when TensorRT is not installed)."""
        from trtkit.builder.opcheck import max_documented_opset

        return cls("TensorRT 8.6 (assumed: TensorRT is not installed)", max_documented_opset(_ASSUMED_VERSION),
                   False, lambda op: _statically_supported_for(op, _ASSUMED_VERSION))


def _statically_supported_for(op_type: str, version: tuple):
    from trtkit.builder.opcheck import added_after_8, unsupported_as_of_10_15

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


def apply_rewrites(proto, target: ParserTarget, steps=None) -> tuple:
    """Run the compatibility rewrites on ``proto``; returns ``(proto, [Rewrite])``.

    ``proto`` itself is never changed: each step works on a copy, kept only if the step succeeded.

    Args:
        proto: an ``onnx.ModelProto``.
        target: the parser to prepare for.
        steps: ``[(name, function)]`` to run instead of :data:`STEPS` (tests).
    """
    import onnx

    report: list = []
    for name, step in steps if steps is not None else default_steps():
        work = onnx.ModelProto()
        work.CopyFrom(proto)
        try:
            changes = step(work, target)
        except Exception as exc:  # noqa: BLE001 - a failing rewrite is named and skipped, never fatal by itself
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            report.append(Rewrite(name, "model", "not applied: the rewrite raised", first[:300], FAILED))
            continue
        report += changes
        if any(c.status == APPLIED for c in changes):
            proto = work
    return proto, report


def default_steps() -> list:
    """The rewrites in the order they run: names before shapes, functions before the opset changes."""
    from trtkit.builder.rewrites import attributes, dims, functions, int64_io, opset

    return [("symbolic-dims", dims.rewrite), ("expand-function", functions.rewrite), ("opset", opset.rewrite),
            ("attribute-inputs", attributes.rewrite), ("int64-io", int64_io.rewrite)]


def main_opset(proto) -> int:
    return max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=0)
