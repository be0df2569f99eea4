"""Progress of a long build, counted from TensorRT's builder log (its own progress monitor reports little of it).

At VERBOSE, TensorRT 8.6 logs the layer count once the graph is optimized (``After concat removal: N layers``), then,
for each layer it chooses kernels for, ``Computing costs for <layer>`` followed by one ``Timing Runner: <layer>
(<runner>)`` per implementation it times; a layer with no timing runner was answered by the timing cache.
:class:`BuildProgress` turns those lines into :class:`ProgressEvent` s with an ETA from the rate so far; ``Formats and
tactics selection completed`` (else ``After reformat layers``, else the end of the build phase) ends the count, the
layers the log did not name counted as cached. A log without ``Computing costs`` lines is counted by the layers its
timing runners name.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass
from typing import Callable

_TOTAL = re.compile(r"^After concat removal: (?P<n>\d+) layers")
# the layer's name may be missing or on the next line of the same message (the layer is then only counted)
_COSTS = re.compile(r"^=+ Computing costs for\b[ \t]*(?P<layer>[^\n]*)")
_RUNNER = re.compile(r"^-+ Timing Runner: (?P<layer>.+) \((?P<runner>[^)]*)\)\s*$")
# the end of kernel selection: its own line, else the first line TensorRT writes after it
_DONE = re.compile(r"^(Formats and tactics selection completed in (?P<s>[\d.]+) seconds|After reformat layers: )")


def counted(message: str) -> bool:
    """Whether :class:`BuildProgress` reads this log line (a build worker sends the parent only these of its VERBOSE
    lines when nothing else asks for VERBOSE: the rest of TensorRT's tactic log is most of its lines)."""
    message = message.strip()
    return any(pattern.match(message) for pattern in (_TOTAL, _COSTS, _RUNNER, _DONE))


@dataclass
class ProgressEvent:
    """Where a build is.

    Attributes:
        phase: the build phase (``prepare``, ``parse``, ``configure``, ``build``, ``inspect``; ``check`` after a
            failed parse).
        elapsed_s: seconds since the build started.
        layers_done: layers whose kernels are chosen (``None`` before TensorRT's log says anything).
        layers_total: layers to choose kernels for (``None`` until TensorRT has said).
        timed: layers TensorRT timed on the GPU; ``cached``: layers answered without timing (timing cache hit).
        eta_s: seconds left by the rate so far (``None`` until known).
        layer: the layer being costed.
    """

    phase: str
    elapsed_s: float
    layers_done: int | None = None
    layers_total: int | None = None
    timed: int = 0
    cached: int = 0
    eta_s: float | None = None
    layer: str | None = None

    def to_json(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        """One plain line, e.g. ``build 12.0 s: 40/120 layers (35 timed, 5 cached), ETA 24 s``."""
        text = f"{self.phase} {self.elapsed_s:.1f} s"
        if self.layers_done is not None:
            total = f"/{self.layers_total}" if self.layers_total else ""
            text += f": {self.layers_done}{total} layers ({self.timed} timed, {self.cached} cached)"
        if self.eta_s is not None:
            text += f", ETA {self.eta_s:.0f} s"
        return text


class BuildProgress:
    """Feeds on phases and TensorRT log lines; calls ``on_progress`` with a :class:`ProgressEvent` on each change.

    Args:
        on_progress: receives each event.
        clock: seconds, monotonic (tests pass a fake).
    """

    def __init__(self, on_progress: Callable[[ProgressEvent], None], clock: Callable[[], float] = time.monotonic):
        self._emit, self._clock = on_progress, clock
        self._start = clock()
        self._phase = "starting"
        self._total: int | None = None
        self._current: str | None = None
        self._tactics_start: float | None = None
        self._timed_layers: set = set()
        self._done = self._cached = 0
        self._finished = False
        self._costs_seen = False

    def phase(self, name: str) -> None:
        if self._phase == "build" and name != "build" and not self._finished and self._total is not None:
            self._finish()  # the builder returned: every layer has its kernels, whatever the log said of them
        self._phase = name
        self._send()

    def log(self, severity: str, message: str) -> None:
        """One TensorRT log line (any severity; only the builder's VERBOSE lines count)."""
        message = message.strip()
        if self._finished:
            return
        if (found := _TOTAL.match(message)) is not None:
            self._total = int(found.group("n"))
            self._send()
        elif (found := _COSTS.match(message)) is not None:
            self._close_layer()
            self._costs_seen = True
            self._start_tactics()
            self._current = found.group("layer").strip() or f"#{self._done + 1}"
        elif (found := _RUNNER.match(message)) is not None:
            if self._costs_seen:
                if self._current is not None:
                    self._timed_layers.add(self._current)
            elif found.group("runner") != "Reformat":
                # a log without "Computing costs" lines: each new layer a runner times starts the next layer
                layer = found.group("layer")
                if layer != self._current:
                    self._close_layer()
                    self._start_tactics()
                    self._current = layer
                self._timed_layers.add(layer)
        elif _DONE.match(message):
            self._finish()

    def _start_tactics(self) -> None:
        if self._tactics_start is None:
            self._tactics_start = self._clock()

    def _finish(self) -> None:
        self._close_layer()
        if self._total is not None and self._done < self._total:  # layers the log did not name: no timing seen
            self._cached += self._total - self._done
            self._done = self._total
        self._finished = True
        self._send()

    def _close_layer(self) -> None:
        if self._current is None:
            return
        self._done += 1
        if self._current not in self._timed_layers:
            self._cached += 1
        self._current = None
        self._send()

    def _eta(self) -> float | None:
        if self._finished:
            return 0.0
        if not self._total or not self._done or self._tactics_start is None:
            return None
        spent = self._clock() - self._tactics_start
        return max(0.0, (self._total - self._done) * spent / self._done)

    def _send(self) -> None:
        started = self._tactics_start is not None or self._finished
        self._emit(
            ProgressEvent(
                self._phase,
                round(self._clock() - self._start, 3),
                self._done if started else None,
                self._total,
                self._done - self._cached,
                self._cached,
                self._eta(),
                self._current,
            )
        )
