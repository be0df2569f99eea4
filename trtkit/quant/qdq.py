"""Explicit INT8: QuantizeLinear/DequantizeLinear placement following TensorRT's rules, and insertion.

Placement (:func:`plan_qdq`), as TensorRT's developer guide describes explicit quantization:

- Q/DQ go on the **inputs** of Conv, ConvTranspose, Gemm and MatMul, never on their outputs (TensorRT fuses a
  following Q into the layer and propagates Q/DQ across ReLU, pooling and other commuting ops).
- Weights are quantized per channel along the output-channel axis (Conv axis 0, ConvTranspose axis 1; Gemm/MatMul
  the axis of N only with ``per_channel_matmul``: per tensor by default, which every TensorRT version parses);
  activations per tensor. Symmetric, zero point 0.
- On a residual ``Add`` whose one input is a quantized convolution's only output (through a BatchNormalization
  of it alone, which TensorRT folds into the convolution), the *other* (skip) input is quantized too, so the
  convolution can fuse with the add (conv + add + relu in INT8).
- For YOLO-style backbones (:class:`QdqOptions`; ``trtkit build`` turns them on): residual adds behind a
  convolution's activation, Concats in one shared scale, and both inputs of such adds.
- Transformers, as NVIDIA's ModelOpt places them: the attention MatMuls get both activations quantized (Q and K^T;
  the Softmax output and V) and the projections and MLP layers their input (a LayerNormalization's output once, for
  all its readers); Softmax, normalizations (fused or decomposed) and residual adds get no Q/DQ of their own.
- Layers that cost accuracy more than they save time stay in higher precision: tiny convolutions (fewer weights
  than ``min_weight_elements``), the final layers (compute ops whose output reaches a graph output with no other
  compute op in between: the detection head, the classifier), and a DETR decoder's location layers (those that
  make or read the reference points and sampling locations of a GridSample, :func:`_location_layers`).

:func:`insert_qdq` applies a plan with amax values (from calibration or a TensorRT cache) and returns a new model.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trtkit.errors import CalibrationError, ModelError, UsageError
from trtkit.quant.fp16 import convert_to_fp16
from trtkit.quant.opset import upgrade_opset

logger = logging.getLogger("trtkit")

COMPUTE_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")
MIN_OPSET = 13  # per-channel QuantizeLinear (axis) needs opset 13
HEAD_REASON = "final layer (head) kept in higher precision"
HEAD_BRANCH_REASON = "head branch (within output_depth of an output) kept in higher precision"
CONCAT_REASON = "reads a Concat output (keep_concat_outputs)"
# where the location walk stops (shape and constant values); ops it passes through input 0 alone (later inputs:
# shapes or indices; a GridSample's: its grid, the sampled features not being locations)
SHAPE_SOURCES = frozenset({"Shape", "Size", "Constant", "ConstantOfShape"})
DATA_FIRST = frozenset({"Reshape", "Expand", "Slice", "Gather", "GatherElements", "Unsqueeze", "Squeeze", "GridSample"})
LOCATION_REASON = "reference points or sampling locations (DETR decoder) kept in higher precision"
# the first words of a skip reason → how PlanQdq.summary counts it
SKIP_KINDS = {
    "excluded by name": "excluded",
    "tiny": "tiny",
    HEAD_REASON.split(" (")[0]: "final layer",
    HEAD_BRANCH_REASON.split(" (")[0]: "head branch",
    CONCAT_REASON.split(" (")[0]: "concat output",
    "reference points": "location",
    "no activation input": "no activation input",
}


@dataclass(frozen=True)
class QdqOptions:
    """Settings of :func:`plan_qdq`.

    Attributes:
        per_channel_matmul: per-channel weight scales for Gemm/MatMul too (along N).
        quantize_residual: quantize the skip input of residual adds.
        keep_output_layers: keep the final compute layers (heads) in higher precision.
        output_depth: with ``keep_output_layers``, how many compute layers back from each output stay in higher
            precision: 1 keeps the final layers; 2 also the layer feeding each of them, and so on, each only while
            it feeds that one layer alone (a head branch stops below the feature its branches share).
        keep_concat_outputs: keep compute layers whose input is a Concat's output (the neck of a feature pyramid:
            an upsampled deep feature joined to a shallow one) in higher precision.
        min_weight_elements: convolutions/GEMMs with fewer weights stay in higher precision.
        exclude_nodes: node names never quantized.
        residual_through_activation: with ``quantize_residual``, an add's input made by a quantized convolution
            through a pointwise activation alone (Relu, LeakyRelu, Clip, SiLU ``x * Sigmoid(x)``, HardSwish) counts
            as the convolution's output: the other (skip) input is quantized.
        concat_shared_scale: quantize the activation inputs of every Concat whose output is quantized (and the input
            of a Resize/MaxPool feeding it), all with the output's one scale (:attr:`QdqPlan.scale_groups`), so they
            run in INT8 without a requantization.
        quantize_add_inputs: with ``residual_through_activation``, also quantize the add's input that a convolution
            makes through its activation: TensorRT fuses a residual only before an activation, so such an add is a
            pointwise layer of its own, in INT8 only when both its inputs are.
    """

    per_channel_matmul: bool = False
    quantize_residual: bool = True
    keep_output_layers: bool = True
    output_depth: int = 1
    keep_concat_outputs: bool = False
    min_weight_elements: int = 256
    exclude_nodes: frozenset = frozenset()
    residual_through_activation: bool = False
    concat_shared_scale: bool = False
    quantize_add_inputs: bool = False

    def __post_init__(self):
        if not isinstance(self.output_depth, int) or isinstance(self.output_depth, bool) or self.output_depth < 1:
            raise UsageError(
                f"output_depth must be an integer of at least 1 (the final layers); got {self.output_depth!r}",
                field="output_depth",
                accepted="an integer >= 1",
            )


@dataclass
class WeightQuant:
    """A weight initializer to quantize per channel (``axis``) or per tensor (``axis=None``)."""

    initializer: str
    axis: int | None


@dataclass
class QdqPlan:
    """Where Q/DQ go.

    Attributes:
        activations: tensor names quantized per tensor (each needs an amax from calibration).
        consumers: for each activation, the ``(node name, input index)`` pairs that read its dequantized value.
        weights: ``(node name, input index) → WeightQuant``.
        quantized: names of compute nodes whose inputs are quantized.
        skipped: compute node name → why it stays in higher precision.
        residual: ``(add node name, skip tensor name)`` pairs.
        scale_groups: activation tensor → the name of its group (``concat_shared_scale``): the tensors of one group
            share one scale, from the largest amax among them.
    """

    activations: list = field(default_factory=list)
    consumers: dict = field(default_factory=dict)
    weights: dict = field(default_factory=dict)
    quantized: list = field(default_factory=list)
    skipped: dict = field(default_factory=dict)
    residual: list = field(default_factory=list)
    scale_groups: dict = field(default_factory=dict)

    def add_activation(self, tensor: str, node: str, index: int) -> None:
        if tensor not in self.consumers:
            self.activations.append(tensor)
            self.consumers[tensor] = []
        if (node, index) not in self.consumers[tensor]:
            self.consumers[tensor].append((node, index))

    def summary(self) -> str:
        """E.g. ``40 layer(s) quantized, 9 kept in higher precision (6 final layer, 3 concat output), 0 residual
        add(s)``: the kept layers counted by why they are kept."""
        reasons: dict[str, int] = {}
        for reason in self.skipped.values():
            kind = next((k for prefix, k in SKIP_KINDS.items() if reason.startswith(prefix)), reason.split(" (")[0])
            reasons[kind] = reasons.get(kind, 0) + 1
        why = f" ({', '.join(f'{n} {k}' for k, n in reasons.items())})" if reasons else ""
        shared = len(set(self.scale_groups.values()))
        return (
            f"{len(self.quantized)} layer(s) quantized, {len(self.skipped)} kept in higher precision{why}, "
            f"{len(self.residual)} residual add(s)" + (f", {shared} shared-scale concat group(s)" if shared else "")
        )

    def shared_amax(self, amax: dict) -> dict:
        """``amax`` with each tensor of a scale group raised to the largest amax of its group."""
        largest: dict = {}
        for tensor, group in self.scale_groups.items():
            if tensor in amax:
                largest[group] = max(largest.get(group, 0.0), float(amax[tensor]))
        return {t: largest.get(self.scale_groups.get(t), a) if t in self.scale_groups else a for t, a in amax.items()}


class _Graph:
    """Producer/consumer lookups over an ONNX graph (node names are made unique first)."""

    def __init__(self, model):
        self.graph = model.graph
        self.inits = {t.name: t for t in self.graph.initializer}
        self.nodes = list(self.graph.node)
        self.order = {n.name: i for i, n in enumerate(self.nodes)}
        self.by_name = {n.name: n for n in self.nodes}
        self.producer = {out: n for n in self.nodes for out in n.output}
        self.consumers: dict[str, list] = {}
        for n in self.nodes:
            for name in n.input:
                self.consumers.setdefault(name, []).append(n)
        self.outputs = {o.name for o in self.graph.output}
        self.alias = initializer_aliases(self.nodes, self.inits)

    def is_weight(self, name: str) -> bool:
        return name in self.inits or name in self.alias

    def initializer(self, name: str) -> str:
        """The initializer a weight input reads: itself, or the one its ``Identity`` passes on."""
        return self.alias.get(name, name)

    def producer_op(self, name: str) -> str | None:
        node = self.producer.get(name)
        return node.op_type if node is not None else None


def initializer_aliases(nodes, inits) -> dict:
    """Tensor → initializer for each ``Identity`` of an initializer (torch's exporter passes shared weights so)."""
    return {n.output[0]: n.input[0] for n in nodes if n.op_type == "Identity" and n.input and n.input[0] in inits}


def ensure_node_names(model) -> None:
    """Give every unnamed node a unique name (placement refers to nodes by name)."""
    seen = set()
    for i, node in enumerate(model.graph.node):
        if not node.name or node.name in seen:
            node.name = f"{node.op_type}_{i}" if not node.name else f"{node.name}_{i}"
        seen.add(node.name)


def plan_qdq(model, options: QdqOptions | None = None) -> QdqPlan:
    """Decide where Q/DQ go in an FP32 ONNX model (see the module docstring for the rules).

    Args:
        model: ``onnx.ModelProto``; unnamed nodes are given names in place.
        options: placement settings.

    Returns:
        A :class:`QdqPlan`.

    Raises:
        ModelError: ``exclude_nodes`` names a node the model does not have.
    """
    options = options or QdqOptions()
    ensure_node_names(model)
    g = _Graph(model)
    _check_excluded(g, options.exclude_nodes)
    plan = QdqPlan()
    heads = _output_layers(g, options.output_depth) if options.keep_output_layers else {}
    heads.update(dict.fromkeys(_location_layers(g), 0))
    for node in g.nodes:
        if node.op_type not in COMPUTE_OPS:
            continue
        reason = _skip_reason(g, node, options, heads)
        if reason:
            plan.skipped[node.name] = reason
            continue
        _plan_compute(g, node, options, plan)
    if options.quantize_residual:
        _plan_residuals(g, plan, options.residual_through_activation, options.quantize_add_inputs)
    if options.concat_shared_scale:
        _plan_concats(g, plan)
    return plan


def _check_excluded(g: _Graph, names) -> None:
    import difflib

    compute = [n.name for n in g.nodes if n.op_type in COMPUTE_OPS]
    unknown = sorted(set(names) - {n.name for n in g.nodes})
    if not unknown:
        return
    hints = [
        f"'{name}'"
        + (f" (did you mean '{close[0]}'?)" if (close := difflib.get_close_matches(name, compute, 1)) else "")
        for name in unknown
    ]
    shown = ", ".join(compute[:12]) + (f", ... ({len(compute)} in all)" if len(compute) > 12 else "")
    raise ModelError(
        f"qdq_exclude names node(s) the model does not have: {', '.join(hints)}. Its Conv/Gemm/MatMul "
        f"nodes are: {shown}",
        field="qdq_exclude",
        accepted="names of the model's Conv/Gemm/MatMul nodes",
    )


def _skip_reason(g: _Graph, node, options: QdqOptions, heads: dict) -> str | None:
    if node.name in options.exclude_nodes:
        return "excluded by name"
    weight = next((g.inits[g.initializer(i)] for i in node.input[1:2] if g.is_weight(i)), None)
    if weight is not None and int(np.prod(weight.dims)) < options.min_weight_elements:
        return f"tiny ({int(np.prod(weight.dims))} weights < {options.min_weight_elements})"
    if node.name in heads:
        return (LOCATION_REASON, HEAD_REASON)[heads[node.name]] if heads[node.name] < 2 else HEAD_BRANCH_REASON
    if options.keep_concat_outputs and any(g.producer_op(i) == "Concat" for i in node.input[:1]):
        return CONCAT_REASON
    if not any(not g.is_weight(i) for i in node.input[:2]):
        return "no activation input"
    return None


def _plan_compute(g: _Graph, node, options: QdqOptions, plan: QdqPlan) -> None:
    for index, name in enumerate(node.input[:2]):
        if not name:
            continue
        if g.is_weight(name):
            per_channel = options.per_channel_matmul or node.op_type not in ("Gemm", "MatMul")
            axis = _weight_axis(g, node, name) if per_channel else None
            plan.weights[(node.name, index)] = WeightQuant(g.initializer(name), axis)
        else:
            plan.add_activation(name, node.name, index)
    plan.quantized.append(node.name)


def _weight_axis(g: _Graph, node, name: str) -> int | None:
    rank = len(g.inits[g.initializer(name)].dims)
    if node.op_type == "Conv":
        return 0
    if node.op_type == "ConvTranspose":
        return 1
    if node.op_type == "Gemm":
        trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
        return 0 if trans_b else 1
    if node.op_type == "MatMul" and node.input[1] == name and rank >= 2:
        return rank - 1
    return None


def _output_layers(g: _Graph, depth: int = 1) -> dict:
    """Compute node name → its depth (1: a graph output is reachable from it through non-compute nodes only; ``d``:
    it feeds one layer of depth ``d - 1`` and nothing else), up to ``depth``."""
    kept = dict.fromkeys(_compute_above(g, g.outputs), 1)
    layer = set(kept)
    for level in range(2, depth + 1):
        above = {p for name in layer for p in _compute_above(g, _activations(g, g.by_name[name]))} - kept.keys()
        layer = {p for p in above if _feeds_only(g, g.by_name[p], kept.keys())}
        kept.update(dict.fromkeys(layer, level))
    return kept


def _location_layers(g: _Graph) -> set:
    """The compute nodes that make the sampling grid of a GridSample (a deformable attention's offsets) or read the
    tensors it is made of (the reference points, e.g. a query-position MLP), through non-compute nodes."""
    path, stack = set(), [n.input[1] for n in g.nodes if n.op_type == "GridSample" and len(n.input) > 1]
    while stack:
        node = g.producer.get(tensor := stack.pop())
        if tensor in path or (node is not None and node.op_type in SHAPE_SOURCES):
            continue
        path.add(tensor)
        if node is not None and node.op_type not in COMPUTE_OPS:
            stack += [i for i in node.input[: 1 if node.op_type in DATA_FIRST else None] if i and not g.is_weight(i)]
    made = {g.producer[t].name for t in path if g.producer_op(t) in COMPUTE_OPS}
    readers, stack, seen = set(), list(path), set()
    while stack:
        tensor = stack.pop()
        for node in g.consumers.get(tensor, []):
            if node.op_type in COMPUTE_OPS:
                readers.add(node.name)
            elif node.name not in seen and tensor in node.input[: 1 if node.op_type in DATA_FIRST else None]:
                seen.add(node.name)
                stack += node.output
    return made | readers


def _activations(g: _Graph, node) -> list:
    return [i for i in node.input if i and not g.is_weight(i)]


def _compute_above(g: _Graph, tensors) -> set:
    """The compute nodes that produce ``tensors`` through non-compute nodes only."""
    found, stack, seen = set(), list(tensors), set()
    while stack:
        node = g.producer.get(stack.pop())
        if node is None or node.name in seen:
            continue
        seen.add(node.name)
        if node.op_type in COMPUTE_OPS:
            found.add(node.name)
        elif node.op_type not in SHAPE_SOURCES:  # a Shape reads no values: what feeds it is no head
            stack.extend(_activations(g, node))
    return found


def _feeds_only(g: _Graph, node, layers) -> bool:
    """``node``'s outputs reach exactly one compute node, of ``layers``, before any other compute node, and no graph
    output without it: a layer of one head branch, not a feature that branches share."""
    stack, seen, found = list(node.output), set(), set()
    while stack:
        tensor = stack.pop()
        if tensor in g.outputs:
            return False
        for consumer in g.consumers.get(tensor, []):
            if consumer.name in seen:
                continue
            seen.add(consumer.name)
            if consumer.op_type in COMPUTE_OPS:
                found.add(consumer.name)
            else:
                stack.extend(consumer.output)
    return len(found) == 1 and found <= set(layers)


def _plan_residuals(g: _Graph, plan: QdqPlan, through_activation: bool = False, both: bool = False) -> None:
    quantized = set(plan.quantized)
    for node in g.nodes:
        # a two-input Sum is an Add (older exports, onnx's own ResNet-50 data, write Sum)
        if node.op_type not in ("Add", "Sum") or len(node.input) != 2 or any(g.is_weight(i) for i in node.input):
            continue
        convs = {
            i: conv
            for i, name in enumerate(node.input)
            if (conv := _fusable_conv(g, name, quantized, through_activation)) is not None
        }
        if not convs:
            continue
        # The add fuses into the convolution that runs last; the other input is the skip branch.
        main = max(convs, key=lambda i: g.order[convs[i].name])
        skip = 1 - main
        plan.add_activation(node.input[skip], node.name, skip)
        plan.residual.append((node.name, node.input[skip]))
        # made through the activation (not the convolution's own output, nor its BatchNormalization's, which
        # TensorRT folds into it): the add cannot fuse into the convolution, so it gets its INT8 input too
        if both and _fusable_conv(g, node.input[main], quantized, through_activation=False) is None:
            plan.add_activation(node.input[main], node.name, main)


def _fusable_conv(g: _Graph, name: str, quantized: set, through_activation: bool):
    """The quantized convolution whose only output ``name`` is (or, with ``through_activation``, whose pointwise
    activation alone makes it), else ``None``."""
    if len(g.consumers.get(name, [])) != 1 or name in g.outputs:
        return None
    node = _through_batchnorm(g, g.producer.get(name))
    if node is not None and through_activation and node.op_type != "Conv":
        node = _through_batchnorm(g, _activation_source(g, node))
    if node is not None and node.op_type == "Conv" and node.name in quantized:
        return node
    return None


def _through_batchnorm(g: _Graph, node):
    """The Conv that a BatchNormalization ``node`` alone normalizes (TensorRT folds the two into one convolution, so
    an export that kept its BatchNormalization nodes has the same residual adds as one that folded them); else
    ``node``."""
    if node is None or node.op_type != "BatchNormalization":
        return node
    source = node.input[0]
    conv = g.producer.get(source)
    if conv is None or conv.op_type != "Conv" or len(g.consumers.get(source, [])) != 1 or source in g.outputs:
        return node
    return conv


POINTWISE_ACTIVATIONS = frozenset({"Relu", "LeakyRelu", "Clip", "HardSwish", "HardSigmoid", "Sigmoid", "Tanh"})


def _activation_source(g: _Graph, node):
    """The node whose output ``node`` activates, pointwise and alone: ``act(y)`` or SiLU ``y * Sigmoid(y)``, where
    nothing but the activation reads ``y``; else ``None``."""
    if node.op_type in POINTWISE_ACTIVATIONS:
        source = node.input[0]
        readers = {node.name}
    elif node.op_type == "Mul" and len(node.input) == 2:
        sigmoid = next((g.producer.get(i) for i in node.input if g.producer_op(i) == "Sigmoid"), None)
        if sigmoid is None or sigmoid.input[0] not in node.input or len(g.consumers.get(sigmoid.output[0], [])) != 1:
            return None
        source, readers = sigmoid.input[0], {node.name, sigmoid.name}
    else:
        return None
    if {c.name for c in g.consumers.get(source, [])} != readers or source in g.outputs:
        return None
    return g.producer.get(source)


# ops that move values without changing them: an INT8 tensor in gives the same INT8 tensor out, in one scale
SCALE_PRESERVING = frozenset({"Resize", "MaxPool", "Upsample"})


def _plan_concats(g: _Graph, plan: QdqPlan) -> None:
    """Each Concat whose output is quantized: its activation inputs quantized too, one scale for them and it (a
    tensor in two such Concats joins their groups). An input made by a Resize or MaxPool brings that op's input into
    the group, quantized for it, so the op runs in INT8 in the Concat's scale."""
    parent: dict = {}

    def root(t: str) -> str:
        while parent.setdefault(t, t) != t:
            t = parent[t]
        return t

    def join(tensor: str, reader: str, index: int, group: str) -> None:
        plan.add_activation(tensor, reader, index)
        parent[root(tensor)] = root(group)

    for node in g.nodes:
        if node.op_type != "Concat" or node.output[0] not in plan.consumers:
            continue
        for index, name in enumerate(node.input):
            made = g.producer_op(name) not in (None, "Constant")  # a graph input, or computed
            if not name or g.is_weight(name) or not (made or _is_input(g, name)):
                continue
            join(name, node.name, index, node.output[0])
            mover = g.producer.get(name)
            if mover is not None and mover.op_type in SCALE_PRESERVING and not g.is_weight(mover.input[0]):
                join(mover.input[0], mover.name, 0, node.output[0])
    for tensor in list(parent):
        plan.scale_groups[tensor] = root(tensor)


def _is_input(g: _Graph, name: str) -> bool:
    return name in {i.name for i in g.graph.input} and name not in g.inits


# --- insertion -----------------------------------------------------------------------------------------------------


def insert_qdq(
    model, amax: dict, plan: QdqPlan | None = None, options: QdqOptions | None = None, *, strict: bool = False
):
    """Insert Q/DQ pairs into a copy of ``model``.

    Args:
        model: the FP32 ``onnx.ModelProto`` (opset 13 or later).
        amax: activation tensor name → amax (absolute range), e.g. from calibration or
            :meth:`calibrators.cache.CalibrationTable.amaxes`.
        plan: placement (default: :func:`plan_qdq` with ``options``).
        options: placement settings when ``plan`` is not given.
        strict: raise when an activation has no amax (default: leave that tensor unquantized with a warning).

    Returns:
        ``(qdq_model, plan)``.

    Raises:
        ModelError: the model's opset is below 13.
        CalibrationError: ``strict`` and some amax values are missing (names them).
    """
    import onnx

    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if opset < MIN_OPSET:
        raise ModelError(
            f"Q/DQ insertion needs ONNX opset {MIN_OPSET} or later (per-channel scales); the model has "
            f"opset {opset}. Re-export it with a newer opset."
        )
    out = onnx.ModelProto()
    out.CopyFrom(model)
    plan = plan or plan_qdq(out, options)
    ensure_node_names(out)
    missing = [t for t in plan.activations if t not in amax]
    if missing and strict:
        raise CalibrationError(f"No amax for {len(missing)} tensor(s) to quantize: {', '.join(missing[:10])}.")
    if missing:
        logger.warning(
            "No calibration range for %d tensor(s); left unquantized: %s", len(missing), ", ".join(missing[:10])
        )
    _Inserter(out).apply(plan, plan.shared_amax(amax))
    return out, plan


class _Inserter:
    def __init__(self, model):
        self.model, self.graph = model, model.graph
        self.by_name = {n.name: n for n in self.graph.node}
        self.inits = {t.name: t for t in self.graph.initializer}
        self.alias = initializer_aliases(self.graph.node, self.inits)
        self.new_nodes: dict[str, list] = {}  # node name → Q/DQ nodes to place before it
        self.weight_dq: dict[tuple, str] = {}

    def apply(self, plan: QdqPlan, amax: dict) -> None:
        for tensor in plan.activations:
            if tensor not in amax:
                continue
            consumers = plan.consumers[tensor]
            dq = self._pair(
                tensor,
                np.float32(max(float(amax[tensor]), 1e-8) / 127.0),
                None,
                before=min(consumers, key=lambda c: list(self.by_name).index(c[0]))[0],
            )
            for node_name, index in consumers:
                self.by_name[node_name].input[index] = dq
        for (node_name, index), wq in plan.weights.items():
            node = self.by_name[node_name]
            if self.alias.get(node.input[index], node.input[index]) != wq.initializer:
                continue
            key = (wq.initializer, wq.axis)
            if key not in self.weight_dq:
                self.weight_dq[key] = self._pair(wq.initializer, self._weight_scale(wq), wq.axis, before=node_name)
            node.input[index] = self.weight_dq[key]
        self._reorder()

    def _weight_scale(self, wq: WeightQuant) -> np.ndarray:
        from onnx import numpy_helper

        w = np.abs(numpy_helper.to_array(self.inits[wq.initializer]).astype(np.float32))
        if wq.axis is None:
            return np.float32(max(float(w.max()), 1e-8) / 127.0)
        other = tuple(a for a in range(w.ndim) if a != wq.axis)
        return (np.maximum(w.max(axis=other), 1e-8) / 127.0).astype(np.float32)

    def _pair(self, tensor: str, scale, axis, *, before: str) -> str:
        from onnx import helper, numpy_helper

        base = tensor.replace(":", "_")
        scale_name, zp_name = f"{base}_qdq_scale", f"{base}_qdq_zero_point"
        scale = np.asarray(scale, dtype=np.float32)
        self.graph.initializer.append(numpy_helper.from_array(scale, scale_name))
        self.graph.initializer.append(numpy_helper.from_array(np.zeros(scale.shape, np.int8), zp_name))
        extra: dict[str, Any] = {} if axis is None else {"axis": int(axis)}
        q = helper.make_node(
            "QuantizeLinear",
            [tensor, scale_name, zp_name],
            [f"{base}_quantized"],
            name=f"{base}_QuantizeLinear",
            **extra,
        )
        dq = helper.make_node(
            "DequantizeLinear",
            [q.output[0], scale_name, zp_name],
            [f"{base}_dequantized"],
            name=f"{base}_DequantizeLinear",
            **extra,
        )
        self.new_nodes.setdefault(before, []).extend([q, dq])
        return dq.output[0]

    def _reorder(self) -> None:
        nodes = []
        for node in self.graph.node:
            nodes.extend(self.new_nodes.get(node.name, []))
            nodes.append(node)
        del self.graph.node[:]
        self.graph.node.extend(nodes)


FP16_MIN_NORMAL = 2.0**-14


def to_fp16_rest(model):
    """A strongly typed Q/DQ model whose unquantized layers run in FP16: opset 19, FP16 scales, FP16 elsewhere.

    In a strongly typed network a DequantizeLinear's output has its scale's type, so FP16 around INT8 layers needs
    FP16 scales (ONNX opset 19). Scales below FP16's smallest normal value are raised to it (a channel of weights
    that small loses resolution instead of becoming zero).

    Returns:
        ``(model, conversion)``, the second a :class:`trtkit.quant.fp16.Conversion`.

    Raises:
        ModelError: the opset cannot be raised (below 13, or subgraphs).
    """
    from onnx import numpy_helper

    upgraded = upgrade_opset(model)
    scale_names = {n.input[1] for n in upgraded.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")}
    raised = []
    for init in upgraded.graph.initializer:
        if init.name in scale_names:
            values = numpy_helper.to_array(init)
            if (values < FP16_MIN_NORMAL).any():
                raised.append(init.name)
                init.CopyFrom(
                    numpy_helper.from_array(np.maximum(values, FP16_MIN_NORMAL).astype(values.dtype), init.name)
                )
    if raised:
        logger.info("Raised %d Q/DQ scale(s) to FP16's smallest normal value: %s", len(raised), ", ".join(raised[:5]))
    conversion = convert_to_fp16(upgraded)
    return conversion.model, conversion
