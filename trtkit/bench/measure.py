"""Measure an engine the way trtexec does, from Python: queries kept in flight on one or more streams, CUDA events
around H2D / compute / D2H of each query, host time around each enqueue, then end-to-end ``TrtRunner.infer`` calls.

    result = benchmark("model.engine", BenchSettings(cuda_graph=True, duration_s=3))
    result.compute.median, result.latency.p99, result.items_per_s
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import numpy as np

from trtkit.bench.stats import Summary, summarize, throughput, warnings_for
from trtkit.bench.timers import EventSlot
from trtkit.errors import InputError
from trtkit.runtime.engine import check_engine_manifest, read_engine_bytes
from trtkit.runtime.runner import TrtRunner

# queries in flight per stream: the host enqueues the next while the GPU runs the current one
_DEPTH = 2
_E2E_MAX_CALLS = 500
_E2E_MAX_S = 1.0


@dataclass
class BenchSettings:
    """How to benchmark.

    Attributes:
        shapes: input name → shape; default: each input's opt shape in ``profile``.
        profile: optimization profile to use.
        cuda_graph: replay the engine from a CUDA graph (copies stay outside, timed by events).
        data_transfers: include H2D and D2H copies in each query.
        streams: number of execution contexts, each on its own stream.
        warmup_ms: warm-up time before measuring.
        duration_s: measuring time (ignored when ``iterations`` is given).
        iterations: measure exactly this many queries (over all streams).
        e2e: also time end-to-end ``TrtRunner.infer`` calls (numpy in, numpy out).
    """

    shapes: dict | None = None
    profile: int = 0
    cuda_graph: bool = True
    data_transfers: bool = True
    streams: int = 1
    warmup_ms: float = 200.0
    duration_s: float = 3.0
    iterations: int | None = None
    e2e: bool = True


@dataclass
class BenchResult:
    """What :func:`benchmark` measured (times in milliseconds)."""

    settings: BenchSettings
    shapes: dict
    batch: int
    queries: int
    wall_s: float
    qps: float
    items_per_s: float
    latency: Summary
    enqueue: Summary
    compute: Summary
    h2d: Summary | None
    d2h: Summary | None
    e2e: Summary | None
    warnings: list = field(default_factory=list)
    e2e_copied: Summary | None = None
    samples: dict = field(default_factory=dict, repr=False)  # the timings summarized, by name (``latency``, ...)


def benchmark(engine, settings: BenchSettings | None = None, *, trt=None, cuda=None) -> BenchResult:
    """Benchmark ``engine`` (a path, bytes or loaded engine).

    With several streams each runner deserializes its own copy of the engine when given a path or bytes (so contexts
    never compete for one profile, as trtexec's ``--streams`` does).

    Raises:
        InputError: ``shapes`` names unknown inputs or shapes outside the profile.
        EngineError / CudaError: the engine cannot be loaded or run.
    """
    settings = settings or BenchSettings()
    check_settings(settings)
    source = _engine_source(engine)
    runners = []
    try:
        for _ in range(settings.streams):
            runners.append(
                TrtRunner(
                    source, profile=settings.profile, cuda_graph=settings.cuda_graph, trt=trt, cuda=cuda
                ).activate()
            )
        feed = make_feed(runners[0], settings.shapes)
        return _run(runners, feed, settings)
    finally:
        for runner in runners:
            runner.close()


def check_settings(settings: BenchSettings) -> None:
    """Raise :class:`~trtkit.errors.UsageError` for settings of the wrong type or that cannot measure anything."""
    from trtkit import _check

    _check.instance("settings", settings, BenchSettings, "a BenchSettings")
    _check.instance("shapes", settings.shapes, dict, "a dict of input name to shape", optional=True)
    _check.integer("profile", settings.profile, low=0)
    for name in ("cuda_graph", "data_transfers", "e2e"):
        _check.boolean(name, getattr(settings, name))
    _check.integer("streams", settings.streams, low=1)
    _check.integer("iterations", settings.iterations, low=1, optional=True)
    _check.number("warmup_ms", settings.warmup_ms, low=0)
    if settings.iterations is None:
        _check.number("duration_s", settings.duration_s, above=0)


def _engine_source(engine):
    if isinstance(engine, (str, os.PathLike)):
        check_engine_manifest(engine)
        return read_engine_bytes(engine)
    return engine


def make_feed(runner, shapes: dict | None, seed: int = 0) -> dict:
    """Random inputs for ``runner``: ``shapes`` where given, else each input's opt shape in the runner's profile.

    Raises:
        InputError: ``shapes`` names an input the engine does not have.
    """
    shapes = dict(shapes or {})
    names = {s.name for s in runner.input_specs}
    unknown = sorted(set(shapes) - names)
    if unknown:
        raise InputError(
            f"shapes names input(s) {unknown} that the engine does not have; its inputs are {sorted(names)}",
            field="shapes",
        )
    rng = np.random.default_rng(seed)
    feed = {}
    for spec in runner.input_specs:
        shape = tuple(shapes.get(spec.name, spec.profile_range(runner.profile)[1]))
        feed[spec.name] = random_array(rng, shape, spec.dtype)
    for spec in runner.shape_input_specs:  # values, not random: the profile's opt values
        feed[spec.name] = np.array(spec.values[runner.profile][1], spec.dtype).reshape(spec.shape)
    return feed


def random_array(rng, shape: tuple, dtype) -> np.ndarray:
    """Random values suited to ``dtype``: uniform [-1, 1) for floats, small non-negative ints, random bools."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.uniform(-1, 1, size=shape).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(dtype)
    return rng.integers(0, 4, size=shape).astype(dtype)


def _batch(feed: dict) -> int:
    first = next(iter(feed.values()), None)
    return int(first.shape[0]) if first is not None and first.ndim else 1


def _run(runners: list, feed: dict, settings: BenchSettings) -> BenchResult:
    keys = [runner.stage(feed) for runner in runners]
    rings = [[EventSlot(r.cuda) for _ in range(_DEPTH)] for r in runners]
    try:
        _loop(runners, keys, rings, settings, warmup=True)
        samples, queries, wall_s = _loop(runners, keys, rings, settings, warmup=False)
    finally:
        for ring in rings:
            for slot in ring:
                slot.destroy()
    e2e = _end_to_end(runners[0], feed) if settings.e2e else None
    result = _result(settings, feed, samples, queries, wall_s, e2e)
    result.samples = samples
    if settings.e2e:
        runners[0].pin_reused_inputs = False
        result.e2e_copied = _end_to_end(runners[0], feed)
    return result


def _loop(runners, keys, rings, settings: BenchSettings, *, warmup: bool):
    """Keep ``_DEPTH`` queries in flight per stream until time (or ``iterations``) runs out."""
    samples: dict = {"latency": [], "h2d": [], "compute": [], "d2h": [], "enqueue": []}
    limit_s = settings.warmup_ms / 1e3 if warmup else settings.duration_s
    target = None if warmup else settings.iterations
    started = time.perf_counter()
    issued = 0
    while True:
        if target is not None and issued >= target:
            break
        if target is None and time.perf_counter() - started >= limit_s and issued >= len(runners):
            break
        index = issued % len(runners)
        slot = rings[index][(issued // len(runners)) % _DEPTH]
        if slot.in_flight:
            _harvest(slot, samples)
        _query(runners[index], keys[index], slot, settings.data_transfers)
        issued += 1
    for ring in rings:
        for slot in ring:
            if slot.in_flight:
                _harvest(slot, samples)
    return samples, issued, time.perf_counter() - started


def _query(runner, key, slot: EventSlot, transfers: bool) -> None:
    stream = runner.stream
    slot.record("start", stream)
    if transfers:
        runner.enqueue_h2d(key)
    slot.record("h2d", stream)
    t0 = time.perf_counter()
    runner.enqueue_compute(key)
    slot.enqueue_ms = (time.perf_counter() - t0) * 1e3
    slot.record("compute", stream)
    if transfers:
        runner.enqueue_d2h(key)
    slot.record("end", stream)
    slot.in_flight = True


def _harvest(slot: EventSlot, samples: dict) -> None:
    slot.wait()
    for name, value in slot.timings().items():
        samples[name].append(value)


def _end_to_end(runner, feed: dict) -> Summary:
    """Latency of whole ``infer`` calls (validation, copies, engine, one sync, output copies) from Python, given the
    same arrays every call: page-locked in place from the second call, unless ``runner.pin_reused_inputs`` is off
    (then copied every call, as arrays not passed again are)."""
    for _ in range(3):  # the second call page-locks the arrays (and captures a graph for them)
        runner.infer(feed)
    times: list[float] = []
    started = time.perf_counter()
    while len(times) < _E2E_MAX_CALLS and (time.perf_counter() - started < _E2E_MAX_S or len(times) < 10):
        t0 = time.perf_counter()
        runner.infer(feed)
        times.append((time.perf_counter() - t0) * 1e3)
    return summarize(times[1:] or times)


def _result(settings, feed, samples, queries, wall_s, e2e) -> BenchResult:
    batch = _batch(feed)
    qps, items = throughput(queries, wall_s, batch)
    latency, enqueue, compute = (summarize(samples[k]) for k in ("latency", "enqueue", "compute"))
    h2d = summarize(samples["h2d"]) if settings.data_transfers else None
    d2h = summarize(samples["d2h"]) if settings.data_transfers else None
    warns = warnings_for(latency, enqueue, compute, cuda_graph=settings.cuda_graph)
    shapes = {name: list(array.shape) for name, array in feed.items()}
    return BenchResult(
        settings, shapes, batch, queries, wall_s, qps, items, latency, enqueue, compute, h2d, d2h, e2e, warns
    )
