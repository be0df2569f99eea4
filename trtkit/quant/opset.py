"""Raising a model's ONNX opset to 19, the first where QuantizeLinear/DequantizeLinear take FP16/BF16 scales.

A strongly typed Q/DQ network whose other layers run in FP16 needs FP16 scales (a DequantizeLinear's output type is
its scale's type). Between opsets 13 and 19 the only change that alters how an existing model reads is opset 18's
move of ``axes`` from an attribute to an input on the Reduce ops other than ReduceSum; this module rewrites exactly
that and raises the opset. Everything else of 18/19 only adds optional attributes, inputs or types.
"""

from __future__ import annotations

import numpy as np

from trtkit.errors import ModelError

TARGET = 19
# the Reduce ops whose ``axes`` opset 18 moved from an attribute to an input
REDUCE_AXES_AT_18 = frozenset(
    {
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "ReduceMax",
        "ReduceMean",
        "ReduceMin",
        "ReduceProd",
        "ReduceSumSquare",
    }
)


def default_opset(model) -> int:
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)


def upgrade_opset(model, target: int = TARGET):
    """A copy of ``model`` at opset ``target`` (19), with Reduce ``axes`` attributes moved to inputs.

    Raises:
        ModelError: the model's opset is below 13 or the model has subgraphs (If/Loop/Scan), which are not rewritten.
    """
    import onnx

    current = default_opset(model)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    if current >= target:
        return out
    if current < 13:
        raise ModelError(f"Cannot raise opset {current} to {target}: re-export the model with opset 13 or later.")
    if any(n.op_type in ("If", "Loop", "Scan") for n in out.graph.node):
        raise ModelError(f"Cannot raise opset {current} to {target}: the model has If/Loop/Scan subgraphs.")
    for node in out.graph.node:
        if node.op_type in REDUCE_AXES_AT_18:
            _axes_to_input(out.graph, node)
    for entry in out.opset_import:
        if entry.domain in ("", "ai.onnx"):
            entry.version = target
    out.ir_version = max(out.ir_version, 9)
    return out


def _axes_to_input(graph, node) -> None:
    from onnx import numpy_helper

    axes = next((a for a in node.attribute if a.name == "axes"), None)
    if axes is None:
        return
    name = f"{node.name or node.output[0]}_axes"
    graph.initializer.append(numpy_helper.from_array(np.asarray(list(axes.ints), dtype=np.int64), name))
    node.attribute.remove(axes)
    if len(node.input) == 1:
        node.input.append(name)
