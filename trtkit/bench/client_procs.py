"""A load on a Triton server spread over several client processes (``trtkit bench --server ... --procs N``).

One Python process running tritonclient's asyncio clients spends a fraction of a millisecond of CPU on every request
(docs/performance.md, Serving, has the measurements), so at high request rates the client, not the server, sets the
pace. Here each level's requests in flight are split over ``procs`` processes (spawned, each a fresh interpreter).
Each connects and sets up its inputs once, then the processes wait for each other before every level (a barrier), so
their levels run at the same time; the results of a level are merged into one
:class:`~trtkit.bench.serving.LoadResult`: requests and failures summed, latencies pooled before the percentiles are
taken, inferences/s over the longest of their walls. :func:`trtkit.bench.serving.load_test` comes here with
``procs`` above 1 and hands over its own pieces (this module imports nothing of it: no import cycle).
"""

from __future__ import annotations

import asyncio
import queue as queue_module
import sys
import time
from dataclasses import asdict
from typing import Any

from trtkit.errors import ServeError

# how long client processes may take to connect and set up their inputs, or to reach the next level
START_TIMEOUT_S = 120.0


def spread(total: int, procs: int) -> list:
    """``total`` split over ``procs`` parts as evenly as whole numbers go, the larger parts first."""
    return [total // procs + (1 if i < total % procs else 0) for i in range(procs)]


def load_in_procs(url: str, model: str, settings, levels_fn, result_fn, client_factory: str | None = None) -> list:
    """:func:`~trtkit.bench.serving.load_test` over ``settings.procs`` client processes; one merged result per level.
    A level of concurrency ``c`` runs on ``min(procs, c)`` of them. ``levels_fn``: one process's levels (serving's
    ``_load_test``, run in each process); ``result_fn``: a level's result from its latencies (serving's
    ``_level_result``). ``client_factory``: ``"module:function"`` that makes ``(tritonclient module, client)`` in
    place of tritonclient's (tests).

    Raises:
        ServeError: a client process failed (its error), or did not report before the levels' time ran out.
    """
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    n = int(settings.procs)
    levels = [int(c) for c in settings.concurrency]
    shares = [spread(c, min(n, c)) + [0] * (n - min(n, c)) for c in levels]
    caps = [spread(settings.max_requests, min(n, c)) + [0] * (n - min(n, c)) for c in levels]
    child = {**asdict(settings), "procs": 1, "keep_latencies": True}
    barrier, answers = ctx.Barrier(n), ctx.Queue()
    workers = [
        ctx.Process(
            target=_worker,
            args=(
                url,
                model,
                type(settings),
                child,
                [s[i] for s in shares],
                [c[i] for c in caps],
                barrier,
                answers,
                i,
                levels_fn,
                client_factory,
            ),
            daemon=True,
        )
        for i in range(n)
    ]
    for w in workers:
        w.start()
    per_level = settings.warmup_s + settings.duration_s + settings.timeout_s + 10.0
    deadline = time.monotonic() + START_TIMEOUT_S + len(levels) * (per_level + START_TIMEOUT_S)
    got: dict = {}
    try:
        while len(got) < n:
            try:
                index, kind, payload = answers.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue_module.Empty:
                raise ServeError(
                    f"{n - len(got)} of {n} client processes did not report before their levels' time ran out"
                ) from None
            got[index] = (kind, payload)
    finally:
        for w in workers:
            w.join(timeout=10)
            if w.is_alive():
                w.kill()
    failed = [payload for kind, payload in got.values() if kind == "error"]
    if failed:  # a process that failed breaks the barrier: the others' BrokenBarrierError says less
        first = next((f for f in failed if "BrokenBarrierError" not in f), failed[0])
        raise ServeError(f"{len(failed)} of {n} client processes failed: {first}")
    return [merge(level, [got[i][1][k] for i in range(n)], settings, result_fn) for k, level in enumerate(levels)]


def merge(concurrency: int, parts: list, settings, result_fn):
    """The results of one level from each client process (``LoadResult.to_json()`` dicts, None where a process sat
    the level out) as one ``LoadResult``, made by ``result_fn`` (serving's ``_level_result``)."""
    parts = [p for p in parts if p is not None]
    latencies = [x for p in parts for x in p.get("latencies_ms", [])]
    errors = [e for p in parts for e in p["errors"]]  # each process's first few, its count in "failed"
    wall = max(p["wall_s"] for p in parts)
    result = result_fn(concurrency, settings, latencies, errors, wall, sum(p["cpu_s"] or 0.0 for p in parts))
    result.failed = sum(p["failed"] for p in parts)
    result.procs = len(parts)
    busy = [p["cpu_s"] / p["wall_s"] for p in parts if p.get("cpu_s") is not None and p["wall_s"] > 0]
    result.client_cpu_frac = round(max(busy), 3) if busy else None
    return result


def _worker(
    url, model, settings_cls, settings: dict, shares, caps, barrier, answers, index, levels_fn, client_factory
) -> None:
    try:
        if client_factory:
            import importlib

            module, name = client_factory.split(":")
            levels_module: Any = sys.modules[levels_fn.__module__]
            levels_module._client = getattr(importlib.import_module(module), name)
        # the others may still be connecting (before the first level) or finishing the last one
        wait_s = START_TIMEOUT_S + settings["warmup_s"] + settings["duration_s"] + settings["timeout_s"]
        results = asyncio.run(
            levels_fn(
                url,
                model,
                settings_cls(**settings),
                caps=caps,
                before_level=lambda i: barrier.wait(wait_s),
                shares=shares,
            )
        )
        answers.put((index, "ok", [None if r is None else r.to_json() for r in results]))
    except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent, which names it
        barrier.abort()  # the others stop waiting for this one
        answers.put((index, "error", f"{type(exc).__name__}: {exc}"))
