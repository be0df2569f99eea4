"""Where does an engine start to diverge from its ONNX model? Every intermediate tensor compared, in graph order.

The model's intermediate float tensors are marked as graph outputs, a debug engine is built from that model with
the original engine's build settings (from its manifest), and every tensor is judged like a final output. The
first tensor in graph order that fails names the node where the error appears. As with Polygraphy's
``--trt-outputs mark all``, marking outputs can change TensorRT's fusions and precisions around those tensors, so
the debug engine is a close relative of the original, not the same engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Callable

from trtkit.builder.api import build
from trtkit.builder.config import BuildConfig, CalibrationSettings
from trtkit.builder.profiles import Profile
from trtkit.errors import ModelError
from trtkit.manifest import as_manifest
from trtkit.model import with_outputs as mark_outputs  # one implementation, shared with calibration
from trtkit.parity.api import compare_engine_to_onnx
from trtkit.parity.compare import OutputResult
from trtkit.parity.metrics import _jsonable
from trtkit.parity.reference import load_model
from trtkit.parity.report import ParityReport

_FLOAT_TYPES = {1, 10, 16}  # TensorProto FLOAT, FLOAT16, BFLOAT16
# Nodes whose outputs are not activations worth comparing (constants, shape arithmetic).
_SKIPPED_OPS = {"Constant", "ConstantOfShape", "Shape", "Size"}


@dataclass
class TensorCheck:
    """One intermediate (or final) tensor: the node that produced it and its verdict."""

    tensor: str
    op: str
    node: str
    result: OutputResult

    def to_dict(self) -> dict:
        return {"tensor": self.tensor, "op": self.op, "node": self.node, **self.result.to_dict()}


@dataclass
class LocalizeReport:
    """Every checked tensor in graph order, and the parity report of the debug engine they come from."""

    tensors: list[TensorCheck] = field(default_factory=list)
    report: ParityReport | None = None

    @property
    def first_failure(self) -> TensorCheck | None:
        return next((t for t in self.tensors if not t.result.passed), None)

    def verdict(self) -> str:
        """One line naming the first diverging tensor and its node, or saying that none diverges."""
        first = self.first_failure
        if first is None:
            return f"no divergence: all {len(self.tensors)} tensors of the debug engine are within tolerance"
        return (
            f"first divergence at tensor '{first.tensor}', output of {first.op} node '{first.node}' "
            f"({self.tensors.index(first) + 1} of {len(self.tensors)} in graph order): {first.result.reasons[0]}"
        )

    def to_dict(self) -> dict:
        first = self.first_failure
        return _jsonable(
            {
                "verdict": self.verdict(),
                "first_failure": first.tensor if first else None,
                "tensors": [t.to_dict() for t in self.tensors],
                "debug_engine": self.report.to_dict() if self.report is not None else None,
            }
        )


def markable_tensors(model, names=None) -> list[tuple[str, str, str]]:
    """Float tensors produced by the model's nodes, in graph order, as (tensor, op type, node name).

    Args:
        model: an ``onnx.ModelProto``.
        names: keep only these tensors (None: all). Unknown names raise.

    Raises:
        ModelError: a name in ``names`` is not a float tensor produced by a node.
    """
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    types = {
        v.name: v.type.tensor_type.elem_type for v in list(inferred.graph.value_info) + list(inferred.graph.output)
    }
    found = []
    for i, node in enumerate(model.graph.node):
        if node.op_type in _SKIPPED_OPS:
            continue
        for out in node.output:
            if out and types.get(out) in _FLOAT_TYPES:
                found.append((out, node.op_type, node.name or f"#{i}"))
    if names is not None:
        unknown = sorted(set(names) - {t for t, _, _ in found})
        if unknown:
            raise ModelError(
                f"Tensor(s) {unknown} are not float outputs of the model's nodes; pick from: "
                f"{', '.join(t for t, _, _ in found[:20])}{' ...' if len(found) > 20 else ''}"
            )
        found = [f for f in found if f[0] in set(names)]
    return found


def localize_divergence(onnx_model, build_engine: Callable, *, tensors=None, **compare_options) -> LocalizeReport:
    """Build a debug engine with every intermediate float tensor as an output and judge each tensor.

    Args:
        onnx_model: path, bytes or ``onnx.ModelProto``.
        build_engine: called with the marked ``onnx.ModelProto``; returns an engine for
            :func:`~trtkit.parity.api.compare_engine_to_onnx` (bytes, a path or a callable).
            :func:`engine_builder` makes one from an engine's manifest.
        tensors: check only these tensors (None: all).
        **compare_options: passed to ``compare_engine_to_onnx`` (precision, shapes, trials, seed, inputs, ...);
            give ``precision``, since a debug engine built in memory has no manifest.

    Returns:
        A :class:`LocalizeReport`.

    Raises:
        ModelError, BuildError, ...: the model cannot be marked or the debug engine cannot be built or run.
    """
    model = load_model(onnx_model)
    found = markable_tensors(model, tensors)
    marked = mark_outputs(model, [t for t, _, _ in found])
    report = compare_engine_to_onnx(marked, build_engine(marked), **compare_options)
    worst = {r.name: r for r in report.worst()}
    producers = {t: (op, node) for t, op, node in found}
    ordered = [t for t, _, _ in found] + [o.name for o in model.graph.output if o.name not in producers]
    checks = [TensorCheck(t, *producers.get(t, ("output", t)), worst[t]) for t in ordered if t in worst]
    return LocalizeReport(tensors=checks, report=report)


def config_from_manifest(manifest):
    """The :class:`~trtkit.builder.config.BuildConfig` an engine was built with, from its manifest.

    A calibration cache is reused with ``force=True``: the debug model holds the same tensors under the same names,
    but its sha256 differs, which the cache's provenance check would otherwise refuse.

    Args:
        manifest: a :class:`trtkit.manifest.Manifest` or its JSON dict.

    Raises:
        ModelError: the manifest has no build section.
    """
    manifest = as_manifest(manifest)
    if manifest is None or manifest.build is None:
        raise ModelError("The engine's manifest has no 'build' section: rebuild it with trtkit, or pass a builder.")
    names = {f.name for f in fields(BuildConfig)}
    kwargs = {k: v for k, v in manifest.build.settings.items() if k in names}
    kwargs["profiles"] = [Profile.from_json(p) for p in manifest.build.profiles]
    if kwargs.get("tactic_sources") is not None:
        kwargs["tactic_sources"] = tuple(kwargs["tactic_sources"])
    if kwargs.get("calibration"):
        kwargs["calibration"] = CalibrationSettings(**{**kwargs["calibration"], "force": True})
    kwargs.update(require_precision=False, save_qdq_onnx=None, save_prepared=None)
    return BuildConfig(**kwargs)


def engine_builder(config, **build_options) -> Callable:
    """A ``build_engine`` for :func:`localize_divergence`: builds with trtkit's builder and ``config``.

    Args:
        config: a ``BuildConfig`` (e.g. :func:`config_from_manifest`).
        **build_options: passed to :func:`trtkit.builder.api.build` (``isolate``, ``trt`` for tests, ...).
    """

    def build_engine(model):
        return build(model, config, **build_options).engine

    return build_engine
