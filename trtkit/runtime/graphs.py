"""CUDA graphs: capture a stream's work once per input-shape bucket, replay it with one launch.

A graph bakes in the shapes, addresses and device memory it captured, so one is kept per key (input shapes plus which
copies it contains). When capture fails (TensorRT's enqueue returns False, or CUDA invalidates the capture: engines
with loops, conditionals or data-dependent shapes), the key is marked uncapturable, CUDA's error is cleared, and the
caller falls back to plain enqueue with a warning.
"""

from __future__ import annotations

import logging

from trtkit.errors import CudaError, TrtkitError

logger = logging.getLogger("trtkit")


class CudaGraph:
    """An instantiated CUDA graph; :meth:`destroy` frees it (idempotent)."""

    def __init__(self, cuda, graph, graph_exec):
        self.cuda = cuda
        self.graph = graph
        self.graph_exec = graph_exec

    def launch(self, stream: int) -> None:
        self.cuda.graph_launch(self.graph_exec, stream)

    def destroy(self) -> None:
        if self.graph_exec is not None:
            graph_exec, self.graph_exec = self.graph_exec, None
            self.cuda.graph_exec_destroy(graph_exec)
        if self.graph is not None:
            graph, self.graph = self.graph, None
            self.cuda.graph_destroy(graph)


def capture(cuda, stream: int, enqueue) -> tuple[CudaGraph | None, str]:
    """Capture what ``enqueue()`` issues on ``stream`` into a graph.

    Args:
        cuda: a :class:`~trtkit.runtime.cuda.Cuda`.
        stream: a non-default stream (capture on the legacy default stream is not allowed).
        enqueue: issues the work; returns False (or raises a :class:`TrtkitError`) when it fails.

    Returns:
        ``(graph, "")`` on success, ``(None, reason)`` when the work could not be captured.
    """
    cuda.begin_capture(stream)
    reason = ""
    try:
        if enqueue() is False:
            reason = "TensorRT's enqueue failed during capture"
    except TrtkitError as exc:
        reason = str(exc)
    finally:
        graph, end_reason = _end_capture(cuda, stream)
    reason = reason or end_reason
    if reason:
        if graph is not None:
            cuda.graph_destroy(graph)
        cuda.clear_last_error()
        return None, reason
    try:
        graph_exec = cuda.graph_instantiate(graph)
    except CudaError as exc:
        cuda.graph_destroy(graph)
        cuda.clear_last_error()
        return None, str(exc)
    return CudaGraph(cuda, graph, graph_exec), ""


def _end_capture(cuda, stream: int):
    try:
        return cuda.end_capture(stream), ""
    except CudaError as exc:
        return None, str(exc)


class GraphCache:
    """Graphs by key; keys whose capture failed are remembered so capture is tried once per key."""

    def __init__(self):
        self._graphs: dict = {}
        self._failed: set = set()

    def __len__(self) -> int:
        return len(self._graphs)

    def get(self, key):
        return self._graphs.get(key)

    def failed(self, key) -> bool:
        return key in self._failed

    def capture(self, key, cuda, stream: int, enqueue) -> CudaGraph | None:
        """Capture a graph for ``key``; on failure log a warning, remember it, and return None."""
        graph, reason = capture(cuda, stream, enqueue)
        if graph is None:
            self._failed.add(key)
            logger.warning("CUDA graph capture failed (%s); falling back to plain enqueue for this input shape",
                           reason)
            return None
        self._graphs[key] = graph
        return graph

    def discard(self, doomed) -> None:
        """Destroy the graphs whose key ``doomed(key)`` is true."""
        for key in [k for k in self._graphs if doomed(k)]:
            self._graphs.pop(key).destroy()

    def clear(self) -> None:
        """Destroy every graph (and forget failures)."""
        graphs, self._graphs = list(self._graphs.values()), {}
        self._failed.clear()
        for graph in graphs:
            graph.destroy()
