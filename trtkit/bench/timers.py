"""CUDA events for the GPU-side times of a query (H2D, compute, D2H)."""

from __future__ import annotations


class EventSlot:
    """Four timing events around one query: start | H2D | compute | D2H | end, plus its host enqueue time."""

    def __init__(self, cuda):
        self.cuda = cuda
        self.start, self.h2d, self.compute, self.end = (cuda.event_create() for _ in range(4))
        self.enqueue_ms = 0.0
        self.in_flight = False

    def record(self, which: str, stream: int) -> None:
        self.cuda.event_record(getattr(self, which), stream)

    def wait(self) -> None:
        self.cuda.event_synchronize(self.end)
        self.in_flight = False

    def timings(self) -> dict:
        """GPU times (ms) of the finished query: ``latency``, ``h2d``, ``compute``, ``d2h``; and ``enqueue``."""
        elapsed = self.cuda.event_elapsed_ms
        return {
            "latency": elapsed(self.start, self.end),
            "h2d": elapsed(self.start, self.h2d),
            "compute": elapsed(self.h2d, self.compute),
            "d2h": elapsed(self.compute, self.end),
            "enqueue": self.enqueue_ms,
        }

    def destroy(self) -> None:
        for event in (self.start, self.h2d, self.compute, self.end):
            self.cuda.event_destroy(event)
