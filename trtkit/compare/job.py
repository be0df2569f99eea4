"""One model in several precisions and batch sizes: built once, measured side by side, scored on the same data.

Each engine comes from the engine cache (:func:`trtkit.builder.cache.cached_build`): a rerun, or a run after an
interruption, builds only what is missing. Each is loaded once; its device memory is read from the driver's free
memory around loading, creating the context and the first call at each batch size (which captures the CUDA graph).
Every round then runs :func:`trtkit.bench.benchmark` for every engine, batch size and mode (a CUDA graph, or plain
``execute_async_v3``); the engine that goes first moves one place each round, so drift of clocks and temperature falls
on all alike, and each row's statistics pool the samples of every round. Accuracy comes from :mod:`trtkit.eval` (the
same pre- and post-processing for every engine), with the ONNX model scored as the reference.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from trtkit import _check
from trtkit import _version_compat as compat
from trtkit.bench.measure import BenchSettings, benchmark, make_feed
from trtkit.bench.measure import check_settings as check_bench_settings
from trtkit.bench.report import environment
from trtkit.bench.stats import summarize, throughput
from trtkit.builder.config import PRECISIONS, BuildConfig, CalibrationSettings
from trtkit.compare.result import MB, CompareResult, Row
from trtkit.errors import UnsupportedError, UsageError

if TYPE_CHECKING:
    from calibrators.preprocess import Preprocess
    from trtkit.eval.detection import DecodeSettings

MODES = ("graph", "plain")
TASKS = ("classification", "detection", "keypoints")
# the score each task is judged by: points of mAP@[.5:.95] or top-1 below the ONNX model's; pixels of keypoint
# deviation from the ONNX model's
MAIN_METRIC = {"classification": "top1", "detection": "map", "keypoints": "max_px"}


@dataclass(frozen=True)
class EvalSettings:
    """How every engine is scored (see :mod:`trtkit.eval`).

    Attributes:
        task: ``classification`` (top-1/top-5 on ``DIR/<class>/*.jpg``), ``detection`` (COCO mAP; needs ``coco``) or
            ``keypoints`` (pixel deviation from the ONNX model's keypoints).
        images: the image folder.
        coco: the COCO annotations of those images (detection).
        preprocess: a :class:`calibrators.preprocess.Preprocess` (classification; default: stretch, RGB, 0..1).
        decode: a :class:`trtkit.eval.detection.DecodeSettings` (detection).
        batch: images per inference call (capped by the engine's profile).
        max_drop: a row is marked when its score is more than this below the ONNX model's (points of mAP@[.5:.95]
            or top-1), or its keypoints deviate by more than this many pixels.
    """

    task: str
    images: str | None = None
    coco: str | None = None
    preprocess: Preprocess | None = None
    decode: DecodeSettings | None = None
    batch: int = 8
    max_drop: float = 1.0


@dataclass
class CompareSettings:
    """What to compare.

    Attributes:
        precisions: the precisions to build (``fp32``, ``fp16``, ``bf16``, ``int8``).
        batches: the batch sizes to measure; the dynamic engine's profile runs from 1 to the largest (its opt).
        build: the other build settings (its precision, profiles and calibration are set per engine).
        calibration: the INT8 calibration data or cache (:class:`~trtkit.builder.config.CalibrationSettings`).
        baseline: the precision the speed-ups are over (default: fp32 when compared, else the first).
        static_per_batch: also build one engine per batch size, beside the dynamic-profile one.
        rounds: measuring rounds; warmup_ms, duration_s, iterations: of each measurement (one engine, batch size
            and mode in one round), as in :class:`~trtkit.bench.BenchSettings`.
        eval: how to score accuracy (``None``: not scored).
        cache_dir: the engine cache folder (default: :func:`trtkit.builder.cache.cache_dir`).
        isolate: build in a child process.
    """

    precisions: tuple = ("fp32", "fp16", "int8")
    batches: tuple = (1, 4, 8)
    build: BuildConfig = field(default_factory=BuildConfig)
    calibration: CalibrationSettings | None = None
    baseline: str | None = None
    static_per_batch: bool = False
    rounds: int = 3
    warmup_ms: float = 100.0
    duration_s: float = 1.0
    iterations: int | None = None
    eval: EvalSettings | None = None
    cache_dir: str | None = None
    isolate: bool = True


@dataclass(frozen=True)
class Step:
    """Where the job is: ``stage`` (``build``, ``measure`` or ``eval``), ``done`` of ``total`` in it, and what now."""

    stage: str
    done: int
    total: int
    text: str = ""


@dataclass
class _Engine:
    precision: str
    profile: str
    batches: tuple
    profiles: list
    reason: str | None = None
    path: Path | None = None
    cached: bool = False
    loaded: object = None
    shapes: dict = field(default_factory=dict)  # batch -> {input: shape}
    memory: dict = field(default_factory=dict)  # weights, activations, context (MB); graph: {batch: MB}
    accuracy: dict | None = None

    @property
    def label(self) -> str:
        return self.precision if self.profile == "dynamic" else f"{self.precision} static b{self.batches[0]}"


def compare(model, settings: CompareSettings | None = None, *, on_progress=None, trt=None, cuda=None) -> CompareResult:
    """Build ``model`` in every precision, measure every engine at every batch size, and score each.

    Args:
        model: the ONNX file.
        settings: what to compare.
        on_progress: receives a :class:`Step` at each build event, measurement and evaluation.
        trt, cuda: the ``tensorrt`` module and a :class:`~trtkit.runtime.cuda.Cuda` (tests pass fakes).

    Returns:
        A :class:`~trtkit.compare.result.CompareResult`; a precision this GPU or TensorRT lacks is a row saying why.

    Raises:
        UsageError, InputError: see :func:`check_settings` (before anything is built).
        ModelError: the model cannot be read, or its batch axis cannot take ``batches``.
        TrtkitError: a build, a measurement or an evaluation failed.
    """
    from trtkit.model import load_model
    from trtkit.runtime.cuda import default_cuda

    settings = settings or CompareSettings()
    check_settings(settings)
    emit = on_progress or (lambda step: None)
    engines = _plan(load_model(model, external_data=False).proto, settings)
    _build(model, engines, settings, emit, trt)
    ready = [e for e in engines if e.reason is None]
    cuda = cuda or default_cuda()
    try:
        for engine in ready:
            _load(engine, settings.build.plugins, trt, cuda)
        runs, order = _measure(ready, settings, emit, trt, cuda)
    finally:
        for engine in ready:
            engine.loaded = None
    options = {k: v for k, v in (("trt", trt), ("cuda", cuda)) if v is not None}
    reference = _score(model, ready, settings.eval, emit, options) if settings.eval else None
    baseline = settings.baseline or ("fp32" if "fp32" in settings.precisions else settings.precisions[0])
    used = [{"label": e.label, "engine": e.path and str(e.path), "cached": e.cached} for e in ready]
    rows = _rows(engines, runs, baseline)
    return CompareResult(str(model), environment(trt), baseline, rows, reference, order, used)


def check_settings(settings: CompareSettings) -> None:
    """Refuse settings that cannot be compared, before anything is built.

    Raises:
        UsageError: a value of the wrong type or range, or evaluation data missing.
        InputError: evaluation data that does not exist or does not match (images without annotations).
    """
    _check.instance("settings", settings, CompareSettings, "a CompareSettings")
    for name, ok, what in (
        ("precisions", PRECISIONS.__contains__, f"names among {', '.join(PRECISIONS)}"),
        ("batches", lambda v: type(v) is int and v >= 1, "integers >= 1"),
    ):
        value = getattr(settings, name)
        if not isinstance(value, (list, tuple)) or not value or len(set(value)) < len(value) or not all(map(ok, value)):
            _check.fail(name, value, f"a non-empty list of distinct {what}")
    if settings.baseline is not None:
        _check.choice("baseline", settings.baseline, tuple(settings.precisions))
    _check.instance("build", settings.build, BuildConfig, "a BuildConfig")
    _check.instance("calibration", settings.calibration, CalibrationSettings, "a CalibrationSettings", optional=True)
    _check.integer("rounds", settings.rounds, low=1)
    check_bench_settings(_bench(settings))
    if settings.eval is not None:
        _check_eval(settings.eval)


def _bench(settings: CompareSettings, **more) -> BenchSettings:
    return BenchSettings(
        warmup_ms=settings.warmup_ms, duration_s=settings.duration_s, iterations=settings.iterations, e2e=False, **more
    )


def _check_eval(ev: EvalSettings) -> None:
    _check.instance("eval", ev, EvalSettings, "an EvalSettings", optional=True)
    _check.choice("eval.task", ev.task, TASKS)
    _check.integer("eval.batch", ev.batch, low=1)
    _check.number("eval.max_drop", ev.max_drop, low=0)
    needed = [("eval.images", ev.images)] + ([("eval.coco", ev.coco)] if ev.task == "detection" else [])
    for name, value in needed:
        if value is None:
            raise UsageError(f"Scoring {ev.task} needs {name}: the labelled data", field=name)
    # the data read now (folders listed, annotations matched), so that what is wrong with it stops nothing built
    from trtkit.detection import list_images
    from trtkit.eval.classification import labelled_images
    from trtkit.eval.coco import load_coco
    from trtkit.eval.detection import match_images

    if ev.task == "classification":
        labelled_images(ev.images)
    elif ev.task == "detection":
        match_images(load_coco(ev.coco), list_images(ev.images))
    else:
        list_images(ev.images)


def _plan(proto, settings: CompareSettings) -> list[_Engine]:
    batches = tuple(sorted(settings.batches))
    kinds = [("dynamic", batches)]
    if settings.static_per_batch and len(batches) > 1:
        kinds += [("static", (b,)) for b in batches]
    profiles = {bs: _profiles(proto, bs) for _, bs in kinds}
    return [
        _Engine(p, kind, bs, profiles[bs], _unavailable(p, proto, settings.calibration))
        for p in settings.precisions
        for kind, bs in kinds
    ]


def _profiles(proto, batches: tuple) -> list:
    """One profile from batch 1 (several sizes; one size: that size alone) to the largest, which is its opt; none for
    a model whose batch is fixed at that size."""
    from trtkit.builder.profiles import Profile, resolve_profiles
    from trtkit.errors import ModelError
    from trtkit.model import model_inputs

    inputs = model_inputs(proto)
    first = next(iter(inputs.values()), None)
    if first and isinstance(first[0], int):
        if set(batches) == {first[0]}:
            return []
        raise ModelError(
            f"The model's batch is fixed at {first[0]}; batch sizes {list(batches)} need a model exported with a "
            "dynamic batch axis",
            field="batches",
        )
    profile = Profile(batch=(1 if len(batches) > 1 else batches[0], batches[-1], batches[-1]))
    resolve_profiles(inputs, [profile])  # the other axes' errors now, before any build
    return [profile]


def _unavailable(precision: str, proto, calibration) -> str | None:
    from trtkit._device import device_info
    from trtkit.builder.precision import has_qdq

    if precision == "int8" and calibration is None and not has_qdq(proto):
        return "INT8 needs calibration data or a calibration cache, or a model that holds Q/DQ nodes"
    capability = device_info().get("compute_capability")
    if precision == "bf16" and capability and float(capability) < 8.0:
        return f"BF16 needs a GPU of compute capability 8.0 or later; this one has {capability}"
    return None


def _build(model, engines: list, settings: CompareSettings, emit, trt) -> None:
    """Each engine from the cache, built where missing; a precision this TensorRT lacks gets its reason."""
    from trtkit.builder.cache import cached_build

    todo = [e for e in engines if e.reason is None]
    for done, engine in enumerate(todo):
        emit(Step("build", done, len(todo), engine.label))
        if engine.reason is not None:  # its precision failed on an engine before
            continue

        def progress(event, e=engine, d=done):
            emit(Step("build", d, len(todo), f"{e.label}: {event.line()}"))

        lower = engine.precision != "fp32"  # precision constraints pin layers to a precision below FP32
        config = replace(
            settings.build,
            precision=engine.precision,
            profiles=engine.profiles,
            calibration=settings.calibration if engine.precision == "int8" else None,
            precision_constraints=settings.build.precision_constraints if lower else "none",
        )
        try:
            engine.path, engine.cached = cached_build(
                model, config, folder=settings.cache_dir, trt=trt, isolate=settings.isolate, on_progress=progress
            )
        except UnsupportedError as exc:
            for same in engines:
                if same.precision == engine.precision:
                    same.reason = str(exc)
    emit(Step("build", len(todo), len(todo)))


def _load(engine: _Engine, plugins, trt, cuda) -> None:
    """Load the engine; its device memory from the driver's free memory around loading, the context and the first
    call at each batch size."""
    from trtkit.runtime.engine import check_engine_manifest, deserialize, read_engine_bytes
    from trtkit.runtime.runner import TrtRunner

    check_engine_manifest(engine.path, trt=trt)
    data = read_engine_bytes(engine.path)
    free = _free(cuda)
    engine.loaded = deserialize(data, trt=trt, plugins=plugins)
    free, engine.memory["weights"] = _used(cuda, free)
    engine.memory["activations"] = compat.device_memory_size(engine.loaded) / MB
    engine.memory["graph"] = {}
    with TrtRunner(engine.loaded, trt=trt, cuda=cuda) as runner:
        free, engine.memory["context"] = _used(cuda, free)
        for batch in engine.batches:
            opt = {s.name: s.profile_range(runner.profile)[1] for s in runner.input_specs}
            engine.shapes[batch] = {name: (batch, *shape[1:]) for name, shape in opt.items()}
            runner.infer(make_feed(runner, engine.shapes[batch]))
            free, engine.memory["graph"][batch] = _used(cuda, free)


def _free(cuda) -> int:
    cuda.device_synchronize()
    return cuda.mem_get_info()[0]


def _used(cuda, before: int) -> tuple[int, float]:
    now = _free(cuda)
    return now, max(before - now, 0) / MB


def _measure(engines: list, settings: CompareSettings, emit, trt, cuda) -> tuple[dict, list]:
    """Every engine at every batch size in both modes, once per round, the first engine rotating: ``({(label,
    batch, mode): [BenchResult of each round]}, [the labels in the order of each round])``."""
    runs: dict = {}
    order = []
    total = settings.rounds * sum(len(e.batches) for e in engines) * len(MODES)
    for index in range(settings.rounds):
        shift = index % len(engines) if engines else 0
        order.append([e.label for e in engines[shift:] + engines[:shift]])
        for engine in engines[shift:] + engines[:shift]:
            for batch in engine.batches:
                for mode in MODES:
                    text = f"round {index + 1}: {engine.label}, batch {batch}, {mode}"
                    emit(Step("measure", sum(map(len, runs.values())), total, text))
                    bench = _bench(settings, shapes=engine.shapes[batch], cuda_graph=mode == "graph")
                    result = benchmark(engine.loaded, bench, trt=trt, cuda=cuda)
                    runs.setdefault((engine.label, batch, mode), []).append(result)
    emit(Step("measure", total, total))
    return runs, order


def _score(model, engines: list, ev: EvalSettings, emit, options: dict) -> dict:
    """The ONNX model's scores (none for keypoints: it is what they are measured from), then each dynamic engine's,
    marked ``below_reference`` when more than ``max_drop`` below."""
    scored = [e for e in engines if e.profile == "dynamic"]
    key = MAIN_METRIC[ev.task]
    total = len(scored) + 1
    emit(Step("eval", 0, total, "onnx"))
    ref, described = (None, str(model)) if ev.task == "keypoints" else _accuracy(ev, model, model, {})
    for done, engine in enumerate(scored, 1):
        emit(Step("eval", done, total, engine.label))
        acc = engine.accuracy = _accuracy(ev, engine.path, model, options)[0]
        if ref is None:
            acc["below_reference"] = acc[key] > ev.max_drop
        else:
            acc["delta"] = round(acc[key] - ref[key], 3)
            acc["below_reference"] = ref[key] - acc[key] > ev.max_drop
    emit(Step("eval", total, total))
    return {"model": described, "task": ev.task, "metric": key, "max_drop": ev.max_drop, "accuracy": ref}


def _accuracy(ev: EvalSettings, target, onnx, options: dict) -> tuple[dict, str]:
    """``(scores, what was scored)``."""
    from trtkit.eval.classification import evaluate_classification
    from trtkit.eval.detection import evaluate_detection
    from trtkit.eval.keypoints import evaluate_keypoints

    if ev.task == "classification":
        row = evaluate_classification(
            target, ev.images, preprocess=ev.preprocess, batch=ev.batch, runner_options=options
        ).rows[0]
        return {"top1": row.top1, "top5": row.top5}, row.model
    if ev.task == "detection":
        result = evaluate_detection(
            target, ev.images, ev.coco, batch=ev.batch, decode=ev.decode, runner_options=options
        )
        return result.rows[0].metrics.to_json(), result.rows[0].model
    deviation = evaluate_keypoints(target, onnx, images=ev.images, batch=ev.batch, runner_options=options)
    # judged on the keypoints the reference is confident of, as the pose guide's check is
    return {**deviation.to_json(), "max_px": deviation.confident.max_px}, str(target)


def _rows(engines: list, runs: dict, baseline: str) -> list[Row]:
    rows = []
    for e in engines:
        if e.reason is not None:
            rows += [Row(e.precision, e.profile, reason=e.reason)] if e.profile == "dynamic" else []
            continue
        for batch in e.batches:
            for mode in MODES:
                done = runs[(e.label, batch, mode)]
                latency, compute = (summarize([v for r in done for v in r.samples[k]]) for k in ("latency", "compute"))
                images_per_s = throughput(sum(r.queries for r in done), sum(r.wall_s for r in done), batch)[1]
                memory = {k: e.memory[k] for k in ("weights", "context", "activations")}
                memory["graph"] = e.memory["graph"][batch] if mode == "graph" else 0.0
                size = e.path.stat().st_size / MB
                rows.append(Row(e.precision, e.profile, batch, mode, latency, compute, images_per_s, size, memory))
                rows[-1].accuracy, rows[-1].engine = e.accuracy, str(e.path)
    base = {(r.batch, r.mode): r.images_per_s or 0.0 for r in rows if (r.precision, r.profile) == (baseline, "dynamic")}
    for row in rows:
        if row.images_per_s and base.get((row.batch, row.mode)):
            row.speedup = row.images_per_s / base[(row.batch, row.mode)]
    return rows
