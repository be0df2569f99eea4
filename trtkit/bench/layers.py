"""Per-layer GPU time of an engine (TensorRT's ``IProfiler``) joined with what the engine inspector says of each layer.

trtexec's ``--dumpProfile`` gives the times; this adds, per layer, the precision, tactic and tensor formats the
inspector reports, and flags the layers that usually explain a slow mixed-precision engine: reformats (a copy that
changes a tensor's format or type) and layers left in FP32/TF32 between lower-precision ones.

    profile = profile_layers("model.engine", shapes={"images": (8, 3, 320, 320)}, runs=50)
    profile.top(15), profile.to_json()

The engine runs without a CUDA graph (a replayed graph reports no layer times); each run is one ``TrtRunner.infer``
call, and TensorRT's reports are collected after each run has finished (``enqueue_emits_profile`` off,
``report_to_profiler`` after the stream synchronized).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from trtkit import _check
from trtkit.errors import EngineError

HIGH_PRECISIONS = frozenset({"FP32", "TF32"})


@dataclass
class LayerTime:
    """One layer's mean GPU time per run and what the inspector says of it.

    Attributes:
        name: the layer's name in the engine (a fused layer names its parts).
        ms: mean milliseconds per run.
        share: fraction of the engine's summed layer time.
        layer_type: the inspector's ``LayerType`` (``None`` where the inspector does not list the layer).
        precision: the precision the layer runs in, from its tensor formats.
        tactic: the tactic (kernel) chosen.
        inputs / outputs: the ``Format/Datatype`` of each input / output tensor.
        reformat: the layer only changes a tensor's format or type.
        high_precision: the layer runs in FP32 or TF32.
    """

    name: str
    ms: float
    share: float
    layer_type: str | None = None
    precision: str | None = None
    tactic: str | None = None
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    reformat: bool = False
    high_precision: bool = False


@dataclass
class LayerProfile:
    """What :func:`profile_layers` measured.

    Attributes:
        layers: every layer TensorRT reported, slowest first.
        runs: runs averaged over.
        shapes: input name → shape run.
        total_ms: summed mean layer time per run.
    """

    layers: list
    runs: int
    shapes: dict
    total_ms: float

    def top(self, n: int = 15) -> list:
        """The ``n`` slowest layers."""
        return self.layers[:n]

    def summary(self) -> dict:
        """Time and count of the reformat layers and of the layers in FP32/TF32, and time by precision."""
        by_precision: dict = {}
        for layer in self.layers:
            key = layer.precision or "unknown"
            by_precision[key] = round(by_precision.get(key, 0.0) + layer.ms, 6)
        reformats = [lay for lay in self.layers if lay.reformat]
        high = [lay for lay in self.layers if lay.high_precision and not lay.reformat]
        return {
            "layers": len(self.layers),
            "total_ms": round(self.total_ms, 6),
            "reformat_layers": len(reformats),
            "reformat_ms": round(sum(lay.ms for lay in reformats), 6),
            "fp32_tf32_layers": len(high),
            "fp32_tf32_ms": round(sum(lay.ms for lay in high), 6),
            "ms_by_precision": by_precision,
        }

    def to_json(self, top: int | None = None) -> dict:
        layers = self.layers if top is None else self.top(top)
        return {
            "runs": self.runs,
            "shapes": {k: list(v) for k, v in self.shapes.items()},
            "total_ms": round(self.total_ms, 6),
            "summary": self.summary(),
            "layers": [asdict(layer) for layer in layers],
        }

    @classmethod
    def from_json(cls, data: dict) -> LayerProfile:
        return cls(
            layers=[LayerTime(**layer) for layer in data["layers"]],
            runs=data["runs"],
            shapes={k: tuple(v) for k, v in data["shapes"].items()},
            total_ms=data["total_ms"],
        )


def profile_layers(
    engine, shapes: dict | None = None, *, runs: int = 20, warmup: int = 3, profile: int = 0, trt=None, cuda=None
) -> LayerProfile:
    """Mean GPU time per layer over ``runs`` executions, joined with the engine inspector's layer information.

    Args:
        engine: an engine path, bytes or a loaded engine.
        shapes: input name → shape (default: each input's opt shape in ``profile``).
        runs: executions averaged over.
        warmup: executions before measuring (not profiled).
        profile: optimization profile.

    Returns:
        A :class:`LayerProfile`, slowest layer first.

    Raises:
        UsageError: ``runs`` below 1 or ``warmup`` below 0.
        EngineError: TensorRT reported no layer times.
    """
    from trtkit._lazy import tensorrt
    from trtkit.bench.measure import _engine_source, make_feed
    from trtkit.runtime.runner import TrtRunner

    _check.integer("runs", runs, low=1)
    _check.integer("warmup", warmup, low=0)
    trt = trt if trt is not None else tensorrt()
    with TrtRunner(_engine_source(engine), profile=profile, cuda_graph=False, trt=trt, cuda=cuda) as runner:
        feed = make_feed(runner, shapes)
        for _ in range(warmup):
            runner.infer(feed)
        collector = _collector(trt)
        # the runner's context dies with it: no profiler reset (8.6 refuses a null profiler, logging an API error)
        runner.context.profiler = collector
        runner.context.enqueue_emits_profile = False
        for _ in range(runs):
            runner.infer(feed)
            runner.context.report_to_profiler()
        inspected = _inspected_layers(trt, runner)
        run_shapes = {name: tuple(array.shape) for name, array in feed.items()}
    if not collector.times:
        raise EngineError(
            f"TensorRT reported no layer times over {runs} run(s) of the engine; per-layer timing needs an engine "
            "that runs without a CUDA graph and a TensorRT with IProfiler (8.6 or later)"
        )
    return _join(collector.times, inspected, runs, run_shapes)


def _collector(trt):
    """An ``IProfiler`` that sums each layer's reported milliseconds (the class is made here: ``tensorrt`` is lazy)."""

    class Collector(trt.IProfiler):
        def __init__(self):
            trt.IProfiler.__init__(self)
            self.times: dict = {}

        def report_layer_time(self, layer_name, ms):
            self.times[layer_name] = self.times.get(layer_name, 0.0) + float(ms)

    return Collector()


def _inspected_layers(trt, runner) -> dict:
    """The inspector's layers, read through the runner's own context: its shapes are set (so formats and precisions
    are reported), and on 8.6 a second context of the engine would get no optimization profile (the runner's is
    not shared)."""
    from trtkit import _version_compat as compat
    from trtkit.runtime.engine import engine_information

    info = engine_information(trt, runner.engine, profile=runner.profile, context=runner.context)
    return {layer.name: layer for layer in compat.inspector_layers(info)}


def _formats(tensors: list) -> list:
    return [str(t.get("Format/Datatype", "")) if isinstance(t, dict) else str(t) for t in tensors]


def _join(times: dict, inspected: dict, runs: int, shapes: dict) -> LayerProfile:
    total = sum(times.values()) / runs
    layers = []
    for name, summed in times.items():
        ms = summed / runs
        info = inspected.get(name)
        layer_type = info.layer_type if info is not None else None
        precision = info.precision if info is not None else None
        reformat = (layer_type or "").lower() == "reformat" or name.startswith("Reformatting")
        layers.append(
            LayerTime(
                name=name,
                ms=round(ms, 6),
                share=round(ms / total, 6) if total else 0.0,
                layer_type=layer_type or None,
                precision=precision or None,
                tactic=(info.tactic or None) if info is not None else None,
                inputs=_formats(info.inputs) if info is not None else [],
                outputs=_formats(info.outputs) if info is not None else [],
                reformat=reformat,
                high_precision=(precision or "") in HIGH_PRECISIONS,
            )
        )
    layers.sort(key=lambda layer: layer.ms, reverse=True)
    return LayerProfile(layers=layers, runs=runs, shapes=shapes, total_ms=total)
