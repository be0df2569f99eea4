"""What the operating system sees of a pipeline's threads: their names and their CPU time.

    meter = CpuMeter({"tk1-preprocess": "preprocess"})
    body = os_thread(work, "tk1-preprocess", meter)    # names the thread, runs work(), tells the meter as it ends
    meter.sample(); ...; meter.by_stage(elapsed_s)

Linux keeps a name and CPU counters per thread, and a thread a library starts (FFmpeg's decoders, libx264) takes its
name from the thread that started it; so a stage's thread named before it opens a decoder or encoder names theirs
too, and ``/proc/self/task`` gives the cores each stage really keeps busy (FFmpeg's own ``av:h264:df0`` threads count
under the stage that decodes). Elsewhere (macOS, Windows) :meth:`CpuMeter.by_stage` gives None.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from pathlib import Path

logger = logging.getLogger("trtkit")

NAME_CHARS = 15  # Linux keeps 15 characters of a thread's name
_PR_SET_NAME = 15
_TASKS = Path("/proc/self/task")
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100  # the counters' clock ticks a second


def native_name(index: int, stage: str) -> str:
    """The name a pipeline thread gives itself for the operating system: ``tk<index>-<stage>``, cut to 15 chars
    (the index keeps two stages whose names start alike apart)."""
    return f"tk{index}-{stage}"[:NAME_CHARS]


def set_native_name(name: str) -> bool:
    """Name the calling thread for the operating system (``top -H``, ``ps -L``, ``/proc``); threads it starts from
    then on take the name too. False where that is not possible (not Linux, or no libc to ask)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        return libc.prctl(_PR_SET_NAME, name.encode()[:NAME_CHARS], 0, 0, 0) == 0
    except (OSError, AttributeError):
        logger.debug("could not name thread %s", name, exc_info=True)
        return False


def os_thread(work, name: str, meter: CpuMeter | None = None):
    """``work`` wrapped to run in a thread named ``name`` (see :func:`set_native_name`): the target of a
    ``threading.Thread``. ``meter`` is told the thread's CPU time as it ends (its counters vanish with it)."""

    def body():
        set_native_name(name)
        try:
            work()
        finally:
            if meter is not None:
                meter.ended(name)

    return body


def _read_task(stat: Path) -> tuple | None:
    """(name, CPU seconds) of one thread from its ``/proc/<pid>/task/<tid>/stat``; None once it has ended."""
    try:
        text = stat.read_text()
    except OSError:
        return None
    name = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()
    ticks = int(fields[11]) + int(fields[12])  # utime and stime, the 14th and 15th fields of the whole line
    return name, ticks / _TICKS


def read_threads(tasks: Path = _TASKS) -> dict:
    """``{tid: (name, CPU seconds)}`` of every thread in ``tasks`` (``/proc/self/task``, or another process's
    ``/proc/<pid>/task``); empty where it cannot be read (the process has ended, not Linux)."""
    found: dict = {}
    try:
        tids = [p.name for p in tasks.iterdir()]
    except OSError:
        return found
    for tid in tids:
        task = _read_task(tasks / tid / "stat")
        if task is not None:
            found[tid] = task
    return found


class CpuMeter:
    """CPU seconds per pipeline stage, from the threads' counters in ``/proc/self/task``, each thread counted under
    the stage whose name it carries (see :func:`native_name`); threads of no stage (the caller's, a runner pool's)
    count as ``other``.

    ``decoder_stage``: the stage FFmpeg's own decoder threads (``av:<codec>:df<N>``) count under (the source's).

    A thread's counters vanish when it ends (an encoder's threads end as it closes), so :meth:`sample` keeps the last
    figure of every thread seen: call it while the run goes (the pipeline does, with its live view's beat) and
    right before anything closes; the pipeline's own threads report theirs as they end (:meth:`ended`). CPU that
    other threads spent after their last sample shows in the process's total only (``unseen_s``).
    """

    def __init__(self, stages: dict, tasks: Path = _TASKS, decoder_stage: str | None = None):
        self.stages = dict(stages)  # native name -> stage name
        self.decoder_stage = decoder_stage
        self.tasks = tasks
        self.available = sys.platform.startswith("linux") and tasks.is_dir()
        self._start: dict = {}  # tid -> CPU seconds when the meter started
        self._last: dict = {}  # tid -> (name, CPU seconds) at its last sample
        self._process0 = time.process_time()
        if self.available:
            self._start = {tid: cpu for tid, (_, cpu) in self._read().items()}

    def _read(self) -> dict:
        return read_threads(self.tasks)

    def sample(self) -> None:
        """Read every thread's counters now."""
        if self.available:
            self._last.update(self._read())

    def ended(self, name: str) -> None:
        """The calling thread, named ``name``, ends now: keep its CPU time."""
        if self.available:
            self._last[str(threading.get_native_id())] = (name, time.thread_time())

    def by_stage(self, elapsed_s: float) -> dict | None:
        """``{"stages": {stage: {"cpu_s", "cores"}}, "other_s", "process_cpu_s", "process_cores", "unseen_s"}``
        since the meter started (``cores``: CPU seconds over ``elapsed_s``; ``unseen_s``: the process's CPU
        that no sample saw, such as threads that ended between two samples); None where there are no per-thread
        counters."""
        if not self.available:
            return None
        stages: dict = {}
        other = 0.0
        for tid, (name, cpu) in list(self._last.items()):  # a copy: threads report as they end meanwhile
            used = max(0.0, cpu - self._start.get(tid, 0.0))
            stage = self.stages.get(name)
            if stage is None and name.startswith("av:") and ":df" in name:  # FFmpeg's frame-threaded decoder
                stage = self.decoder_stage
            if stage is None:
                other += used
            else:
                stages[stage] = stages.get(stage, 0.0) + used
        process = time.process_time() - self._process0
        seen = other + sum(stages.values())

        def cores(seconds: float) -> float | None:
            return round(seconds / elapsed_s, 3) if elapsed_s > 0 else None

        return {
            "stages": {s: {"cpu_s": round(v, 3), "cores": cores(v)} for s, v in stages.items()},
            "other_s": round(other, 3),
            "process_cpu_s": round(process, 3),
            "process_cores": cores(process),
            "unseen_s": round(max(0.0, process - seen), 3),
        }
