"""Multi-view models: one source per camera view, frame ``i`` of every view taken together.

    report = run_engine("mv.engine", {"top": VideoSource("top.mp4"), "side": VideoSource("side.mp4")},
                        sinks=[ViewSink("top", VideoSink("top_out.mp4")), JsonLinesSink("poses.jsonl")],
                        processing=pose_processing())

An engine takes the views as one input ``(N, V, C, H, W)`` (Lightning Pose's multi-view models: the views in the
order the sources are given, their names only labels) or as one image input per view (the sources named after the
inputs). Each view is preprocessed with its own geometry on the CPU; each output is split into V equal parts along
its first axis after the batch, view by view (Lightning Pose's heatmaps ``(N, V * K, h, w)``); a frame's ``image``,
``meta`` and ``result`` are dicts by view.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from types import SimpleNamespace

import numpy as np

from trtkit.errors import InputError
from trtkit.pipeline.preprocess import image_input
from trtkit.pipeline.stats import SkippedFrame

logger = logging.getLogger("trtkit")


class MultiViewSource:
    """Frames of several sources (view name → a video, image folder or array source) in lockstep: ``(name,
    {view: image})``. Where a view ends before the others, the run stops there and :attr:`stopped` (also in
    ``info()``) says so; views of different frame rates are paired by index, with a warning.
    """

    name = "decode"

    def __init__(self, sources: dict):
        if not sources:
            raise InputError("A multi-view source needs a source per view; none is given")
        self.sources, self.views, self.stopped = dict(sources), list(sources), None
        rates = {view: float(s.fps) for view, s in self.sources.items() if getattr(s, "fps", None)}
        if len(set(rates.values())) > 1:
            listed = ", ".join(f"{view} {fps:g}" for view, fps in rates.items())
            logger.warning("the views' frame rates differ (%s fps): frames are paired by their index", listed)
        self.fps = next(iter(rates.values()), 30)

    @property
    def skipped(self) -> list:
        pairs = ((v, s) for v, source in self.sources.items() for s in getattr(source, "skipped", []))
        return [SkippedFrame(f"{view} {s.position}", s.reason) for view, s in pairs]

    def info(self) -> dict:
        views = {view: s.info() if hasattr(s, "info") else {} for view, s in self.sources.items()}
        return {"kind": "views", "views": views, "stopped": self.stopped}

    def __iter__(self):
        readers, index = {view: iter(source) for view, source in self.sources.items()}, 0
        while True:
            items = {view: next(reader, None) for view, reader in readers.items()}
            ended = [view for view, item in items.items() if item is None]
            if ended:
                if len(ended) < len(items):
                    self.stopped = f"view {', '.join(ended)} ended after {index} frame(s): stopped at the shortest"
                    logger.warning(self.stopped)
                return
            yield items[self.views[0]][0], {view: item[1] for view, item in items.items()}
            index += 1

    def close(self) -> None:
        for source in self.sources.values():
            source.close()


class ViewSink:
    """``sink`` (e.g. a :class:`~trtkit.pipeline.sinks.VideoSink`) given the picture of one view of each frame."""

    def __init__(self, view: str, sink):
        self.view, self.sink, self.name = view, sink, sink.name

    def write(self, frame) -> None:
        self.sink.write(replace(frame, image=frame.image[self.view]))

    def close(self) -> None:
        self.sink.close()

    def discard(self) -> None:
        self.sink.discard()


def bind_views(pool, views: list, processing, profile: int, settings) -> tuple:
    """``(infer, target, pre, processing, where)`` for ``views`` on the engine of ``pool`` (``infer``: the pool, or a
    :class:`ViewFeed` for an input per view; ``target``: a view's input; see :func:`~trtkit.pipeline.api.run_engine`).

    Raises:
        InputError: a view that is no engine input, an input without a view, a 5-D input of another view count, view
            inputs of different shapes; ``preprocess="gpu"``.
    """
    specs, infer = list(pool.runners[0].input_specs), pool
    if settings.preprocess == "gpu":
        raise InputError("preprocess='gpu' cannot run here: multi-view frames are preprocessed on the CPU")
    if len(specs) == 1 and len(specs[0].shape) == 5:
        spec, drop = specs[0], (lambda dims: (dims[0], *dims[2:]))
        count = spec.shape[1] if spec.shape[1] > 0 else spec.profile_range(profile)[1][1]
        if len(views) != count:
            raise InputError(
                f"Engine input '{spec.name}' {tuple(spec.shape)} takes {count} views, in order; {len(views)} "
                f"source(s) are given ({', '.join(views)}): give one per view"
            )
        ranges = lambda p: tuple(drop(dims) for dims in spec.profile_range(p))  # noqa: E731
        one = SimpleNamespace(name=spec.name, shape=drop(spec.shape), dtype=spec.dtype, profile_range=ranges)
        targets = dict.fromkeys(views, image_input([one], profile))
    else:
        names = [spec.name for spec in specs]
        for view in views:
            if view not in names:
                raise InputError(f"View '{view}' is no input of the engine; its inputs: {', '.join(names)}")
        for name in names:
            if name not in views:
                raise InputError(f"Engine input '{name}' has no source; give one per input: {', '.join(names)}")
        targets, infer = {spec.name: image_input([spec], profile) for spec in specs}, ViewFeed(pool, names)
        if len({(t.sample_shape, t.dtype, t.min_batch, t.max_batch) for t in targets.values()}) > 1:
            shapes = ", ".join(f"'{t.name}' {t.sample_shape} {t.dtype}" for t in targets.values())
            raise InputError(
                f"The views are batched together: their inputs must match in shape, dtype, batch; {shapes}"
            )
    pre, steps = views_processing(processing, targets, settings.resize)
    return infer, pre.target, pre, steps, {"on": "cpu", "reason": "multi-view frames are preprocessed on the CPU"}


class ViewFeed:
    """``infer_async`` of batches of stacked views ``(N, V, ...)`` on an engine with an input per view."""

    def __init__(self, pool, inputs: list):
        self.pool, self.inputs = pool, inputs

    def infer_async(self, feed):
        (batch,) = feed.values()
        return self.pool.infer_async({name: np.ascontiguousarray(batch[:, v]) for v, name in enumerate(self.inputs)})


class ViewsPreprocess:
    """``pre`` of multi-view frames: each view's picture through its ``pre``, the samples stacked ``(V, ...)``,
    ``meta`` a dict by view."""

    def __init__(self, pres: dict, target):
        self.pres, self.target, self.shape = pres, target, (len(pres), *target.sample_shape)

    def __call__(self, images) -> tuple:
        sample = np.empty(self.shape, dtype=self.target.dtype)
        return sample, self.into(images, sample)

    def into(self, images, out: np.ndarray) -> dict:
        metas = {}
        for row, (view, pre) in zip(out, self.pres.items()):
            if callable(getattr(pre, "into", None)):
                metas[view] = pre.into(images[view], row)
            else:
                row[...], metas[view] = pre(images[view])
        return metas


def views_processing(processing, targets: dict, resize: str) -> tuple:
    """``(pre, processing)`` for multi-view frames: ``processing``'s steps run per view (see the module)."""
    pres = {view: processing.preprocess_for(target, resize) for view, target in targets.items()}
    views, post, draw = list(targets), processing.post, processing.draw

    def post_views(outputs, metas, images):
        parts = {name: _split(name, np.asarray(value), len(views)) for name, value in outputs.items()}
        return {v: post({name: p[i] for name, p in parts.items()}, metas[v], images[v]) for i, v in enumerate(views)}

    def draw_views(images, results):
        return {view: draw(images[view], results[view]) for view in views}

    steps = replace(processing, post=post_views if post else None, draw=draw_views if draw else None)
    return ViewsPreprocess(pres, next(iter(targets.values()))), steps


def _split(name: str, value: np.ndarray, count: int) -> np.ndarray:
    if value.ndim == 0 or value.shape[0] % count:
        raise InputError(f"Output '{name}' {value.shape} of a frame does not split into its {count} views")
    return value.reshape(count, -1, *value.shape[1:])
