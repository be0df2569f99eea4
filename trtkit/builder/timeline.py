"""Where a build's wall time goes: named marks from the calling process and the build worker, on one clock.

A mark is a ``time.monotonic()`` value; on Linux every process shares that clock, so the worker's marks and the
caller's line up. :func:`relative` turns them into seconds since the calling process started (``/proc/self/stat``),
what the manifest's ``timings_s`` holds: a ``trtkit build``'s interpreter start and imports included.

Marks of an isolated build, in the order they usually happen (the worker's start overlaps the caller's checks):
``process_start``, ``build_called``, ``worker_spawned``, ``inputs_checked``, ``worker_process_start``,
``worker_imports_done``, ``tensorrt_imported``, ``builder_created``, ``device_info_done``, ``worker_ready``,
``call_sent``, ``call_received``, ``model_loaded``, ``prepared``, ``parsed``, ``configured``, ``built``,
``serialized``, ``detail_done``, ``result_received``, then ``written`` and (``trtkit build``) ``exit``. A worker kept
from an earlier build in the same process reports ``worker_reused`` instead of its start-up marks.
"""

from __future__ import annotations

import os
import time


def now() -> float:
    return time.monotonic()


def process_start() -> float | None:
    """This process's start as a ``time.monotonic()`` value (its exec, before the interpreter loads), or ``None``
    where ``/proc`` does not say (not Linux)."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        started_ticks = int(fields[19])  # field 22, "starttime": clock ticks after boot
        since_boot = started_ticks / os.sysconf("SC_CLK_TCK")
        return time.monotonic() - (time.clock_gettime(time.CLOCK_BOOTTIME) - since_boot)
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def relative(marks: dict, origin: float | None = None) -> dict:
    """``{name: seconds after origin}``, rounded to the millisecond, in time order (``origin`` default: the
    ``process_start`` mark, else the earliest mark)."""
    known = {name: t for name, t in marks.items() if t is not None}
    if not known:
        return {}
    if origin is None:
        origin = known.get("process_start", min(known.values()))
    return {name: round(t - origin, 3) for name, t in sorted(known.items(), key=lambda item: item[1])}
