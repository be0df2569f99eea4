"""Sanitize an ONNX model before TensorRT parses it: fold constant subgraphs into initializers, drop dead nodes.

Many exported models compute weights or shapes at run time from constants (``ConstantOfShape`` feeding a Conv's
weights, ``Shape → Gather → Concat`` chains on static shapes). TensorRT's parser wants such values as initializers
(8.6 refuses Conv weights that are not). :func:`fold_constants` runs ONNX shape inference, evaluates every node whose
inputs are all known (and ``Shape``/``Size`` of tensors whose shape is static) with onnx's reference evaluator on the
CPU (not ONNX Runtime), turns the values other nodes consume into initializers, and removes what became dead, using
onnx-graphsurgeon for the graph edits. Folding never changes the model's results.

Not folded, on purpose: random ops (their value must differ per run), Q/DQ nodes (TensorRT needs them to place INT8
precision), nodes with subgraphs (If/Loop/Scan), ops of custom domains (no evaluator), nodes producing graph outputs,
and values larger than ``size_threshold`` (folding would only grow the file).
"""

from __future__ import annotations

import copy
import tempfile
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from trtkit._atomic import replace_files, write_bytes_atomic
from trtkit.errors import ModelError, TrtkitError, first_line
from trtkit.model import PROTOBUF_LIMIT, load_model

NEVER_FOLD = frozenset(
    {
        "RandomNormal",
        "RandomNormalLike",
        "RandomUniform",
        "RandomUniformLike",
        "Bernoulli",
        "Multinomial",
        "QuantizeLinear",
        "DequantizeLinear",
        "DynamicQuantizeLinear",
        "If",
        "Loop",
        "Scan",
        "SequenceMap",
    }
)
_DEFAULT_DOMAINS = ("", "ai.onnx")
DEFAULT_SIZE_THRESHOLD = 256 << 20
_MAX_ROUNDS = 8


@dataclass
class FoldReport:
    """What :func:`fold_constants` changed.

    Attributes:
        folded: ``(node name, op type)`` of nodes replaced by constants.
        dead: ``(node name, op type)`` of nodes removed because nothing used their outputs.
        initializers: names of the initializers created.
        skipped: ``(node name, reason)`` for foldable-looking nodes left in place (evaluator failure, too large).
        nodes_before, nodes_after: node counts of the top-level graph.
        notes: anything else worth telling (shape inference failed, ...).
    """

    folded: list = field(default_factory=list)
    dead: list = field(default_factory=list)
    initializers: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    nodes_before: int = 0
    nodes_after: int = 0
    notes: list = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.folded or self.dead)

    def summary(self) -> str:
        """One line for a build summary, e.g. ``folded 5 nodes (Shape ×2, ...) into 2 initializers; ...``."""
        if not self.changed:
            return "constant folding: nothing to fold"
        ops = Counter(op for _, op in self.folded)
        by_op = ", ".join(f"{op} ×{n}" for op, n in ops.most_common(6))
        parts = [f"folded {len(self.folded)} node(s) ({by_op}) into {len(self.initializers)} initializer(s)"]
        if self.dead:
            parts.append(f"removed {len(self.dead)} dead node(s)")
        parts.append(f"{self.nodes_before} → {self.nodes_after} nodes")
        return "constant folding: " + "; ".join(parts)

    def to_json(self) -> dict:
        return {
            "changed": self.changed,
            "folded": [{"name": n, "op": o} for n, o in self.folded],
            "dead": [{"name": n, "op": o} for n, o in self.dead],
            "initializers": list(self.initializers),
            "skipped": [{"name": n, "reason": r} for n, r in self.skipped],
            "nodes_before": self.nodes_before,
            "nodes_after": self.nodes_after,
            "notes": list(self.notes),
        }


def fold_constants(model, *, size_threshold: int | None = DEFAULT_SIZE_THRESHOLD, on_progress=None):
    """Fold constant subgraphs of an ONNX model into initializers and remove dead nodes.

    Initializers that are also listed as graph inputs (every initializer of an IR version 3 model) are constants, as
    TensorRT's parser takes them: the folded model no longer lists them as inputs (and is IR version 4 or later).

    Args:
        model: ONNX path, bytes, ``onnx.ModelProto`` or :class:`~trtkit.model.LoadedModel`.
        size_threshold: largest value (bytes) turned into an initializer; larger ones stay computed
            (``None``: no limit).
        on_progress: called with one line of text as each folding round starts (a fold can take minutes).

    Returns:
        ``(model_proto, report)``: the folded ``onnx.ModelProto`` (the input model itself when nothing changed)
        and a :class:`FoldReport`.

    Raises:
        ModelError: the model cannot be read, or the folded model fails ONNX's checker (a trtkit bug worth
            reporting; build without --fold-constants meanwhile).
    """
    original = load_model(model, check=False).proto
    report = FoldReport(nodes_before=len(original.graph.node), nodes_after=len(original.graph.node))
    current = start = _constant_initializers(original)
    for round_ in range(1, _MAX_ROUNDS + 1):
        if on_progress is not None:
            on_progress(f"folding constants: round {round_}, {len(report.folded)} node(s) folded so far")
        folded = _fold_round(_infer_shapes(current, report), report, size_threshold)
        if folded is None:
            break
        current = folded
    if current is start:
        return original, report
    report.nodes_after = len(current.graph.node)
    _check(current)
    return current, report


def save_model(model, path, *, external: bool = False, owned: bool = False) -> Path:
    """Write an ONNX model (``--save-sanitized``); models over 2 GB keep their weights in ``<name>.data`` beside it
    (:func:`saved_files`). Both are written as trtkit writes every file (:mod:`trtkit._atomic`): staged beside the
    target and renamed into place, with the mode ``open()`` would give them.

    Args:
        external: write the weights to ``<name>.data`` whatever the size (models that came with external data).
        owned: ``model`` is the caller's own copy, which may lose its weights to the data file (not copied again).

    Raises:
        ModelError: the file cannot be written.
    """
    import onnx
    from onnx.external_data_helper import set_external_data

    path = Path(path)
    large = external or (model.ByteSize() > PROTOBUF_LIMIT if _has_bytesize(model) else True)
    try:
        if not large:
            return write_bytes_atomic(path, model.SerializeToString())
        if not owned:  # the weights are moved out of the proto: the caller's model stays as it was
            model = copy.deepcopy(model)
        data = saved_files(path)[1]
        for tensor in model.graph.initializer:  # (onnx.save's own conversion looks for the data file in the cwd)
            if tensor.HasField("raw_data") and len(tensor.raw_data) >= (0 if external else 1024):
                set_external_data(tensor, data.name)
        with tempfile.TemporaryDirectory(prefix=".trtkit-", dir=path.parent) as staging:
            onnx.save(model, str(Path(staging) / path.name))  # writes the weights to <staging>/<name>.data
            staged = {Path(staging) / data.name: data, Path(staging) / path.name: path}
            replace_files({tmp: target for tmp, target in staged.items() if tmp.exists()})
    except (OSError, ValueError, TrtkitError) as exc:
        raise ModelError(f"Cannot write the sanitized model to '{path}': {exc}") from exc
    return path


def saved_files(path) -> list:
    """The files :func:`save_model` may write for ``path``: the model, and its weights' ``<name>.data``."""
    return [path, Path(path).with_name(Path(path).name + ".data")] if Path(path).name else [path]


def _has_bytesize(model) -> bool:
    try:
        model.ByteSize()
        return True
    except Exception:  # protobuf refuses to size messages over 2 GB
        return False


def _constant_initializers(model):
    """``model``, or a copy whose graph inputs no longer list its initializers (IR version raised to 4, the first
    where an initializer need not be an input)."""
    initializers = {t.name for t in model.graph.initializer}
    kept = [value for value in model.graph.input if value.name not in initializers]
    if len(kept) == len(model.graph.input):
        return model
    model = copy.deepcopy(model)
    del model.graph.input[:]
    model.graph.input.extend(kept)
    model.ir_version = max(model.ir_version, 4)
    return model


def _infer_shapes(model, report: FoldReport):
    import onnx

    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception as exc:  # inference is a help, not a requirement: fold what is constant anyway
        note = f"shape inference failed ({first_line(exc)})"
        if note not in report.notes:
            report.notes.append(note)
        return model


def _fold_round(model, report: FoldReport, size_threshold):
    """One pass: evaluate foldable nodes, turn consumed values into initializers, clean up. ``None``: no change."""
    import onnx_graphsurgeon as gs

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = gs.import_onnx(model)
    opsets = {"": 17} | {o.domain or "": o.version for o in model.opset_import}
    graph_outputs = {t.name for t in graph.outputs}
    values = {name: t for name, t in graph.tensors().items() if isinstance(t, gs.Constant)}
    folded_nodes: list = []
    sources: list = []
    for node in graph.nodes:
        outputs = _try_fold(node, values, opsets, graph_outputs, report, size_threshold)
        if outputs is not None:
            values.update(outputs)
            # a Constant node is a value, not work: it counts as folded only if folding made it unused
            (sources if node.op == "Constant" else folded_nodes).append(node)
    if not folded_nodes:
        return None
    before = {id(n): (_label(n), n.op) for n in graph.nodes}
    created = _materialize(folded_nodes, values)
    graph.cleanup(remove_unused_graph_inputs=False).toposort()
    after = {id(n) for n in graph.nodes}
    removed = [key for key in before if key not in after]
    folded_ids = {id(n) for n in folded_nodes + sources}
    report.folded += [before[k] for k in removed if k in folded_ids]
    report.dead += [before[k] for k in removed if k not in folded_ids]
    report.initializers += created
    if not removed and not created:
        return None
    return _export(graph, model)


def _try_fold(node, values: dict, opsets: dict, graph_outputs: set, report: FoldReport, size_threshold):
    """Values of ``node``'s outputs (name → ndarray) if it can be folded, else ``None``."""
    if not _eligible(node, graph_outputs):
        return None
    static = _static_shape_value(node)
    if static is None:
        static = _shape_gather_value(node, values)
    if static is not None:
        return {node.outputs[0].name: static}
    if not all(t.name == "" or t.name in values for t in node.inputs):
        return None
    try:
        results = _evaluate(node, values, opsets)
    except Exception as exc:  # the reference evaluator lacks an op or rejects it: leave the node to TensorRT
        _skip(report, node, f"evaluation failed: {first_line(exc)}")
        return None
    too_big = [n for n, v in results.items() if size_threshold is not None and v.nbytes > size_threshold]
    if too_big:
        _skip(report, node, f"value larger than {size_threshold} bytes")
        return None
    return results


def _skip(report: FoldReport, node, reason: str) -> None:
    entry = (_label(node), reason)
    if entry not in report.skipped:  # later rounds meet the same node again
        report.skipped.append(entry)


def _eligible(node, graph_outputs: set) -> bool:
    import onnx_graphsurgeon as gs

    if node.op in NEVER_FOLD or (node.domain or "") not in _DEFAULT_DOMAINS:
        return False
    if any(isinstance(v, gs.Graph) for v in node.attrs.values()):
        return False
    return bool(node.outputs) and not any(t.name in graph_outputs for t in node.outputs)


def _static_shape_value(node):
    """``Shape``/``Size`` when the dims they read are all static (for ``Shape``, only those in ``start:end``)."""
    import numpy as np

    if node.op not in ("Shape", "Size") or not node.inputs or len(node.outputs) != 1:
        return None
    shape = node.inputs[0].shape
    if shape is None:
        return None
    rank = len(shape)
    if node.op == "Shape":
        shape = list(shape)[
            _clamp_axis(node.attrs.get("start", 0), rank) : _clamp_axis(node.attrs.get("end", rank), rank)
        ]
    if not all(isinstance(d, (int, np.integer)) and d >= 0 for d in shape):
        return None
    if node.op == "Size":
        return np.array(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
    return np.array([int(d) for d in shape], dtype=np.int64)


def _shape_gather_value(node, values: dict):
    """``Gather(Shape(x), indices)`` where the gathered dims of ``x`` are static though others are not (batch)."""
    import numpy as np

    if node.op != "Gather" or int(node.attrs.get("axis", 0)) != 0 or len(node.inputs) != 2:
        return None
    data, indices = node.inputs
    producers = list(data.inputs)
    if len(producers) != 1 or producers[0].op != "Shape" or indices.name not in values:
        return None
    shape = producers[0].inputs[0].shape
    if shape is None:
        return None
    rank = len(shape)
    dims = list(shape)[
        _clamp_axis(producers[0].attrs.get("start", 0), rank) : _clamp_axis(producers[0].attrs.get("end", rank), rank)
    ]
    index = np.asarray(_array(values[indices.name])).astype(np.int64)
    picked = [dims[int(i) + (len(dims) if i < 0 else 0)] for i in index.reshape(-1) if -len(dims) <= i < len(dims)]
    if len(picked) != index.size or not all(isinstance(d, (int, np.integer)) and d >= 0 for d in picked):
        return None
    return np.array(picked, dtype=np.int64).reshape(index.shape)


def _clamp_axis(axis: int, rank: int) -> int:
    axis = int(axis)
    if axis < 0:
        axis += rank
    return min(max(axis, 0), rank)


def _evaluate(node, values: dict, opsets: dict) -> dict:
    import numpy as np
    import onnx
    from onnx import helper
    from onnx.reference import ReferenceEvaluator
    from onnx_graphsurgeon.exporters.onnx_exporter import OnnxExporter

    feeds = {t.name: _array(values[t.name]) for t in node.inputs if t.name}
    inputs = [
        helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
        for name, v in feeds.items()
    ]
    outputs = [helper.make_empty_tensor_value_info(t.name) for t in node.outputs if t.name]
    graph = helper.make_graph([OnnxExporter.export_node(node)], "fold", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()])
    model.ir_version = min(model.ir_version, onnx.IR_VERSION)
    results = ReferenceEvaluator(model).run(None, feeds)
    named = [t.name for t in node.outputs if t.name]
    return {name: np.asarray(value) for name, value in zip(named, results)}


def _array(value):
    import onnx_graphsurgeon as gs

    return value.values if isinstance(value, gs.Constant) else value


def _materialize(folded_nodes, values: dict) -> list:
    """Turn folded outputs that something still consumes into constants; detach folded nodes from their outputs."""
    import onnx_graphsurgeon as gs

    folded_ids = {id(n) for n in folded_nodes}
    created = []
    for node in folded_nodes:
        for tensor in list(node.outputs):
            consumers = [c for c in tensor.outputs if id(c) not in folded_ids]
            if consumers and isinstance(tensor, gs.Variable):
                tensor.to_constant(_array(values[tensor.name]))
                created.append(tensor.name)
        node.outputs.clear()
    return created


def _export(graph, original):
    import onnx_graphsurgeon as gs

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            model = gs.export_onnx(graph, do_type_check=False)
        except TypeError:  # onnx-graphsurgeon before do_type_check existed
            model = gs.export_onnx(graph)
    model.ir_version = original.ir_version
    del model.opset_import[:]
    model.opset_import.extend(original.opset_import)
    for attr in ("producer_name", "producer_version", "domain", "model_version", "doc_string"):
        setattr(model, attr, getattr(original, attr))
    del model.metadata_props[:]
    model.metadata_props.extend(original.metadata_props)
    del model.functions[:]
    model.functions.extend(original.functions)
    return model


def _label(node) -> str:
    return node.name or f"<unnamed {node.op} → {node.outputs[0].name if node.outputs else '?'}>"


def _check(model) -> None:
    import onnx

    if not _has_bytesize(model) or model.ByteSize() > PROTOBUF_LIMIT:
        return  # the in-memory checker refuses protos over 2 GB; TensorRT's parser checks what it reads
    try:
        onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, ValueError) as exc:
        raise ModelError(
            f"Constant folding produced a model that fails ONNX's checker ({first_line(exc)}); this is a trtkit bug, "
            "please report it, and build without constant folding meanwhile.",
            field="fold_constants",
            accepted="off until the bug is fixed",
        ) from exc
