"""One call from an engine and a source to a finished run: what ``trtkit run ENGINE --video/--images`` does.

from trtkit.pipeline import ImageFolderSource, VideoSink, VideoSource, run_engine

source = VideoSource("in.mp4")
report = run_engine("model.engine", source, sinks=[VideoSink("out.mp4", fps=source.fps)])
print(report.fps, report.slowest_stage().name)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from calibrators.preprocess import NORMALIZE
from trtkit.pipeline.batching import BatchPlan
from trtkit.pipeline.pipeline import InferStep, Pipeline
from trtkit.pipeline.preprocess import ImagePreprocess, image_input
from trtkit.pipeline.stages import Stage

logger = logging.getLogger("trtkit")


@dataclass(frozen=True)
class Processing:
    """The pluggable steps around inference (see :mod:`trtkit.pipeline.preprocess` for their signatures).

    Attributes:
        pre: ``image -> (sample, meta)``; ``None``: :class:`ImagePreprocess` for the engine's input.
        post: ``(outputs, meta, image) -> result``; ``None``: no postprocessing stage (sinks get raw outputs).
        draw: ``(image, result) -> image``; ``None``: no annotate stage.
        pre_for: ``ImageInput -> pre``, for a ``pre`` that depends on the engine's input size (used when ``pre``
            is ``None``).
        device_meta: for a ``pre``/``pre_for`` that is the standard letterbox (keep the aspect ratio, pad 114, RGB
            scaled by 1/255): ``LetterboxMeta -> meta``, the GPU letterbox's geometry as this ``pre`` gives its
            ``meta``; frames in device memory (NVDEC) are then preprocessed on the GPU. ``None`` with a custom
            ``pre``: such frames are copied to the host and ``pre`` runs there. (The default preprocessing has one.)
        for_engine: ``(ImageInput, output specs) -> Processing``: the processing for this engine, asked for once the
            engine is open and before any frame is read (the detector's finds its output layout so); ``None``: this
            one as it is.
        normalize: ``{"mean": (r, g, b), "std": (r, g, b)}`` after the 1/255 scale, of the default preprocessing
            and the GPU letterbox (``pre``/``pre_for`` apply their own); ``None``: 0..1. The report records it.
    """

    pre: Callable | None = None
    post: Callable | None = None
    draw: Callable | None = None
    pre_for: Callable | None = None
    device_meta: Callable | None = None
    for_engine: Callable | None = None
    normalize: dict | None = None

    def preprocess_for(self, target, resize: str = "letterbox"):
        """The ``pre`` callable for the engine input ``target``."""
        if self.pre is not None:
            return self.pre
        if self.pre_for is not None:
            return self.pre_for(target)
        return ImagePreprocess(target, resize=resize, **(self.normalize or {}))


def stage_functions(processing: Processing, pre, ring=None, download=None) -> dict:
    """The stage callables (``frame -> None``) for ``pre``, ``processing.post`` and ``processing.draw``; with a
    :class:`~trtkit.pipeline.batching.BatchRing`, ``pre.into`` writes each sample straight into the frame's row
    (a GPU preprocessing, ``pre.device``: ``pre.letterbox_into`` into a row of a device ring, the frame's picture
    brought to the host with it); ``download``: device frames are copied to the host before ``pre``."""

    def preprocess(frame):
        frame.sample, frame.meta = pre(frame.image)

    def preprocess_into_ring(frame):
        row = ring.acquire(frame.index)
        frame.meta = pre.into(frame.image, row)
        frame.sample = row

    def preprocess_on_device(frame):
        row = ring.acquire(frame.index)
        frame.meta, frame.image = pre.letterbox_into(frame.image, row)
        frame.sample = row

    if getattr(pre, "device", False):
        chosen = preprocess_on_device
    else:
        chosen = preprocess if ring is None else preprocess_into_ring
    if download is not None:
        on_host = chosen

        def chosen(frame):
            frame.image = download(frame.image)
            on_host(frame)

    def postprocess(frame):
        frame.result = processing.post(frame.outputs, frame.meta, frame.image)

    def annotate(frame):
        frame.image = processing.draw(frame.image, frame.result)

    return {
        "preprocess": chosen,
        "postprocess": postprocess if processing.post else None,
        "annotate": annotate if processing.draw else None,
    }


def run_engine(
    engine,
    source,
    *,
    sinks=(),
    processing: Processing | None = None,
    batch: int | None = None,
    max_wait_ms: float = 5.0,
    runners: int = 2,
    queue_size: int = 8,
    pre_workers: int = 2,
    resize: str = "letterbox",
    preprocess: str = "auto",
    monitor=None,
    drain=None,
    **runner_args,
):
    """Run ``engine`` over every frame of ``source`` into ``sinks``.

    Args:
        engine: an engine path or bytes.
        source: see :mod:`trtkit.pipeline.sources`; a dict ``{view: source}`` for a multi-view model (see
            :mod:`trtkit.pipeline.views`).
        sinks: see :mod:`trtkit.pipeline.sinks`.
        processing: pre/post/draw callables (default: the engine's image preprocessing, raw outputs).
        batch: most frames per engine call (default and upper bound: the profile's max batch).
        max_wait_ms: how long a started batch waits for more frames.
        runners: runners in the :class:`~trtkit.runtime.pool.RunnerPool` (batches in flight).
        queue_size: capacity of each queue between stages, in frames.
        pre_workers: threads of the preprocess stage.
        resize: ``letterbox`` or ``stretch`` for the default preprocessing.
        preprocess: where frames are preprocessed: ``auto`` (the GPU letterbox wherever the processing allows it
            and the kernels fill the input, for frames in device memory (NVDEC) and host pictures (uploaded once)
            alike; else the CPU), ``gpu`` (the same, an error where it cannot), ``cpu`` (device frames are copied to
            the host first). The report's ``source["preprocess"]`` says where, and why.
        monitor: called with a report snapshot while running.
        drain: a ``threading.Event`` that, once set, stops reading the source (as Ctrl-C does), for runs in threads.
        **runner_args: passed to every runner (``cuda_graph``, ``profile``, ``allow_mismatch``, ``trt``, ``cuda``).

    Returns:
        The :class:`~trtkit.pipeline.stats.PipelineReport`.

    Raises:
        InputError: the engine's input is not an image tensor (NCHW float, NHWC uint8); ``batch`` is outside the
            profile; ``preprocess`` is unknown, or ``gpu`` where the GPU letterbox cannot fill the input (says why);
            views the engine does not take (see :func:`~trtkit.pipeline.views.bind_views`).
        PipelineError: a stage failed (names it and the frame index).
    """
    from trtkit.errors import InputError
    from trtkit.runtime.pool import RunnerPool

    if preprocess not in PREPROCESS:
        raise InputError(f"preprocess='{preprocess}' is not known; use one of: {', '.join(PREPROCESS)}")
    settings = Settings(batch, max_wait_ms, max(1, runners), queue_size, pre_workers, resize, preprocess)
    if isinstance(source, dict):
        from trtkit.pipeline.views import MultiViewSource

        source = MultiViewSource(source)
    try:
        return _run(
            RunnerPool(engine, size=settings.runners, **runner_args),
            source,
            list(sinks),
            processing or Processing(),
            settings,
            monitor,
            runner_args.get("profile", 0),
            drain,
        )
    except BaseException:
        for sink in sinks:  # an error before the first frame: leave no partial file
            sink.discard()
        raise


@dataclass(frozen=True)
class Settings:
    """The knobs of :func:`run_engine` (see its arguments)."""

    batch: int | None
    max_wait_ms: float
    runners: int
    queue_size: int
    pre_workers: int
    resize: str
    preprocess: str = "auto"


PREPROCESS = ("auto", "gpu", "cpu")  # where frames are preprocessed (run_engine's ``preprocess``)


def _run(pool, source, sinks: list, processing: Processing, settings: Settings, monitor, profile: int, drain=None):
    from trtkit.pipeline.views import bind_views

    with pool:
        infer, download, views = pool, None, getattr(source, "views", None)
        if views is not None:
            infer, target, pre, processing, where = bind_views(pool, views, processing, profile, settings)
        else:
            target = image_input(pool.runners[0].input_specs, profile)
            if processing.for_engine is not None:
                processing = processing.for_engine(target, pool.runners[0].output_specs)
            pictures = processing.draw is not None or any(getattr(sink, "needs_images", True) for sink in sinks)
            pre, download, where = choose_preprocess(
                pool, source, processing, target, settings.resize, pictures, settings.preprocess, settings.pre_workers
            )
        plan = batch_plan(target, settings.batch, settings.max_wait_ms, len(pool.runners))
        ring = None
        try:
            ring = sample_ring(pool, pre, plan)
            fns = stage_functions(processing, pre, ring, download)
            stages = [Stage("preprocess", fns["preprocess"], settings.pre_workers), InferStep(infer, plan, ring)]
            for name in ("postprocess", "annotate"):
                if fns[name]:
                    stages.append(Stage(name, fns[name]))
            pipeline = Pipeline(source, stages, sinks, queue_size=settings.queue_size, monitor=monitor, drain=drain)
            report = pipeline.run()
        finally:
            for owned in (ring, download, pre if getattr(pre, "device", False) else None):
                if owned is not None:
                    owned.close()
    report.source = {
        **report.source,
        "engine_input": ", ".join(getattr(infer, "inputs", [target.name])),
        "input_shape": [target.channels, target.height, target.width],
        "preprocess": where,
        "normalize": processing.normalize or NORMALIZE["none"],
    }
    return report


def choose_preprocess(
    pool,
    source,
    processing: Processing,
    target,
    resize: str,
    pictures: bool = True,
    preprocess: str = "auto",
    lanes: int = 1,
) -> tuple:
    """``(pre, download, where)``: the preprocessing of ``source``'s frames for ``target``.

    The GPU letterbox (:class:`~trtkit.pipeline.device_frames.DeviceFramePreprocess`) runs with ``preprocess="auto"``
    or ``"gpu"``, for frames in device memory (``source.device_frames``) and host pictures alike, where the
    processing allows it (its ``device_meta``, or the default letterbox) and the kernels fill the input; otherwise
    the CPU preprocesses, device frames copied to the host first (``download``), and ``where`` says why:
    ``{"on": "gpu"|"cpu", "reason": ...}``. ``pictures``: something downstream (a drawing, a video or image sink)
    needs each frame's picture in host memory; without it device frames stay device arrays to the end (``post``
    gets the device frame as its ``image``). ``lanes``: the GPU preprocessing's streams, one per preprocess worker.

    Raises:
        InputError: ``preprocess="gpu"`` where the GPU cannot preprocess these frames (names why).
    """
    from trtkit.errors import InputError

    host_pre = processing.preprocess_for(target, resize)
    on_device = bool(getattr(source, "device_frames", False))
    runner = pool.runners[0]

    def on_cpu(reason: str) -> tuple:
        if not on_device:
            return host_pre, None, {"on": "cpu", "reason": reason}
        from trtkit.pipeline.device_frames import FrameDownload

        logger.info("device frames are copied to the host for preprocessing: %s", reason)
        return host_pre, FrameDownload(runner.cuda), {"on": "cpu", "reason": f"frames copied to the host: {reason}"}

    if preprocess == "cpu":
        return on_cpu("asked for (preprocess='cpu')")
    pre, reason = _gpu_preprocess(runner, processing, target, resize, pictures, lanes)
    if pre is not None:
        how = "frames in device memory" if on_device else "host pictures uploaded once"
        return pre, None, {"on": "gpu", "reason": f"{how}, letterboxed by the GPU kernels"}
    if preprocess == "gpu":
        raise InputError(f"preprocess='gpu' cannot run here: {reason}; use preprocess='auto' or 'cpu'")
    return on_cpu(reason)


def _gpu_preprocess(runner, processing: Processing, target, resize: str, pictures: bool, lanes: int = 1) -> tuple:
    """``(DeviceFramePreprocess, None)`` or ``(None, why the GPU cannot preprocess these frames)``."""
    from trtkit.pipeline.device_frames import device_preprocess, image_preprocess_meta

    meta = processing.device_meta
    if processing.pre is None and processing.pre_for is None:
        if resize != "letterbox":
            return None, f"resize='{resize}' runs on the CPU (the GPU letterbox keeps the aspect ratio)"
        meta = image_preprocess_meta
    elif meta is None:
        return None, "the processing's own pre runs on the CPU (it gives no device_meta)"
    options = dict(meta=meta, pictures=pictures, lanes=max(1, int(lanes)), norm=processing.normalize)
    return device_preprocess(runner, target, **options)


def sample_ring(pool, pre, plan: BatchPlan):
    """The pinned :class:`~trtkit.pipeline.batching.BatchRing` ``pre`` writes its samples into (one buffer per
    runner and one more), when ``pre`` can write into a given array (``into`` and ``shape``, as
    :class:`ImagePreprocess` does); None otherwise (its samples are copied into each batch)."""
    from trtkit.pipeline.batching import BatchRing

    cuda = getattr(pool.runners[0], "cuda", None)
    device = getattr(pre, "device", False)
    if cuda is None or getattr(pre, "shape", None) is None or not (device or callable(getattr(pre, "into", None))):
        return None
    return BatchRing(cuda, plan.max_batch, pre.shape, pre.target.dtype, len(pool.runners) + 1, device=device)


def batch_plan(target, batch: int | None, max_wait_ms: float, in_flight: int) -> BatchPlan:
    """The batching of frames for ``target`` (an :class:`ImageInput`).

    Raises:
        InputError: ``batch`` is outside the engine's batch range.
    """
    from trtkit.errors import InputError

    if batch is not None and not target.min_batch <= batch <= target.max_batch:
        raise InputError(
            f"batch={batch} is outside the engine's batch range {target.min_batch}..{target.max_batch}"
            f" (input '{target.name}')"
        )
    return BatchPlan(
        target.name, batch or target.max_batch, target.min_batch, max_wait_s=max_wait_ms / 1e3, in_flight=in_flight
    )
