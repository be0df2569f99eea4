"""The one host-side timing loop the benchmark scripts share. Standard library only: ``torch_anchor.py`` runs it
under the GPU host's PyTorch Python, where trtkit is not installed."""

from __future__ import annotations

import datetime
import shlex
import statistics
import sys
import time


def run_stamp() -> dict:
    """When and how this run was made, for the results file (the docs show both under each table)."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"date": now, "command": "python " + shlex.join(sys.argv)}


def timed(fn, *, warmup_s: float = 0.3, budget_s: float = 1.5, min_calls: int = 30, max_calls: int = 5000) -> float:
    """Median milliseconds per call of ``fn()``: warm up for ``warmup_s`` (at most ``budget_s``), then time calls for
    ``budget_s``, at least ``min_calls`` and at most ``max_calls`` of them."""
    end = time.perf_counter() + min(warmup_s, budget_s)
    while time.perf_counter() < end:
        fn()
    times = []
    end = time.perf_counter() + budget_s
    while len(times) < max_calls and (time.perf_counter() < end or len(times) < min_calls):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def write_results(result: dict, folders, name: str) -> None:
    """``result`` as JSON to ``name`` in each folder, each written whole (a temporary file renamed into place)."""
    import json
    import os
    from pathlib import Path

    text = json.dumps(result, indent=2, sort_keys=True) + "\n"
    for folder in map(Path, folders):
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f"{name}.tmp"
        tmp.write_text(text)
        os.replace(tmp, folder / name)
