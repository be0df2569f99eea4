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

from trtkit.builder.rewrites import attributes, castlike, decompose, dims, functions, int64_io, narrow_io, opset
from trtkit.builder.rewrites.base import APPLIED, FAILED, SKIPPED, ParserTarget, Rewrite, main_opset
from trtkit.errors import first_line

__all__ = [
    "APPLIED",
    "FAILED",
    "SKIPPED",
    "ParserTarget",
    "Rewrite",
    "after_folding_steps",
    "apply_rewrites",
    "default_steps",
    "main_opset",
]


def apply_rewrites(proto, target: ParserTarget, steps=None) -> tuple:
    """Run the compatibility rewrites on ``proto``; returns ``(proto, [Rewrite])``.

    ``proto`` itself is never changed: each step works on a copy, kept only if the step succeeded.

    Args:
        proto: an ``onnx.ModelProto``.
        target: the parser to prepare for.
        steps: ``[(name, function)]`` to run instead of :data:`STEPS` (tests).
    """
    import onnx

    def copy(model):
        work = onnx.ModelProto()
        work.CopyFrom(model)
        return work

    report: list = []
    work = None
    for name, step in steps if steps is not None else default_steps():
        # a copy that the previous step left as it was serves the next one (a large model's copy is not free;
        # comparing costs a fraction of copying)
        work = copy(proto) if work is None else work
        try:
            changes = step(work, target)
        except Exception as exc:  # noqa: BLE001 - a failing rewrite is named and skipped, never fatal by itself
            report.append(Rewrite(name, "model", "not applied: the rewrite raised", first_line(exc), FAILED))
            work = None
            continue
        report += changes
        if any(c.status == APPLIED for c in changes):
            proto, work = work, None
        elif work != proto:  # changed without applying anything: dropped, like a failed step's
            work = None
    return proto, report


def default_steps() -> list:
    """The rewrites in the order they run: names before shapes, functions and decompositions before the opset changes
    and CastLike."""
    return [
        ("symbolic-dims", dims.rewrite),
        ("expand-function", functions.rewrite),
        ("decompose", decompose.rewrite),
        ("castlike", castlike.rewrite),  # after expand-function: function bodies use CastLike
        ("opset", opset.rewrite),
        ("int64-io", int64_io.rewrite),
        ("narrow-int-io", narrow_io.rewrite),
    ]


def after_folding_steps() -> list:
    """The rewrites :func:`trtkit.prepare` runs after constant folding: the opset-17 attribute forms of opset-18
    inputs. Folding evaluates Reduce/Pad/Split in the model's own opset (an opset-18 node with an ``axes`` attribute
    is not valid ONNX, so nothing could fold it), and it turns computed ``axes``/``pads`` into the constants this
    rewrite needs."""
    return [("attribute-inputs", attributes.rewrite)]
