"""CUDA graphs: capture a stream's work once per key, replay it with one launch; :class:`GraphCache` keeps a runner's
graphs and the shortcuts that replay a repeated call in fewer steps (its docstring states the rules).

A graph bakes in the shapes, addresses and device memory it captured, so one is kept per :class:`GraphKey` (input
shapes, where each input is sent from, whether outputs are copied back). When capture fails (TensorRT's enqueue
returns False, or CUDA invalidates the capture: engines with loops, conditionals or data-dependent shapes), the key is
marked uncapturable, CUDA's error is cleared, and the caller falls back to plain enqueue with a warning.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

import numpy as np

from trtkit.errors import CudaError, TrtkitError
from trtkit.runtime.reuse import ReusedInputs

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


# The source a host input is sent from inside a graph: (serial, host address). Serial 0 is the runner's pinned
# buffer; any other serial is the registration of an array page-locked in place (trtkit.runtime.reuse).
Source = tuple[int, int]


class GraphKey(NamedTuple):
    """What a captured graph bakes in, and so what tells two graphs of one runner apart."""

    shapes: tuple  # per input, its shape: the bucket's key
    sources: tuple  # per input, the Source sent from inside the graph, or None (device-resident, or sent before)
    copy_out: bool  # the graph ends with the copies of the outputs to the pinned host buffers
    addresses: tuple = ()  # device-resident inputs bound in place, their addresses in input order; else ()


class HostReplayKey(NamedTuple):
    """A call of numpy inputs that the host shortcut replays: per input its shape and its source's serial."""

    shapes: tuple
    serials: tuple


class DeviceReplayKey(NamedTuple):
    """A call whose every input is device-resident and bound in place: per input ``(shape, address)``."""

    inputs: tuple


class GraphCache:
    """One runner's CUDA graphs, the shortcuts that replay a repeated call in fewer steps, and the arrays it has
    page-locked in place; it counts the path each call took.

    Entries and the rules that keep them consistent:

    - **Graphs** (:class:`GraphKey` → :class:`CudaGraph`). The general path (the runner validated the call, set the
      context's shapes and bound its addresses) calls :meth:`launch`. The first call of a key runs by plain enqueue
      (TensorRT initializes lazily on its first enqueue, so capture comes after a warm-up; that enqueue also
      computes the call), then the same work is captured; later calls of the key launch the graph. A key whose
      capture failed is remembered and never captured again: its calls run by plain enqueue. A graph bakes in the
      shapes, the addresses and which copies it holds, so everything that differs between two calls is in the key:
      the input shapes, each host input's :data:`Source` (the pinned buffer, serial 0, or the serial of the
      registration of an array page-locked in place), whether outputs are copied back, and the addresses of
      device-resident inputs bound in place. Graphs keyed by such addresses count towards the runner's limit
      (:meth:`binds_in_place`); past it, new addresses are copied into the runner's buffers, key without addresses.
    - **Shortcuts**, made when :meth:`launch` replays a graph (never on capture, so a shortcut always names a graph
      that has run in full once): a call whose every input is sent from the host gets a :class:`HostReplayKey`
      (shapes, serial per input); one whose every input is device-resident and bound in place gets a
      :class:`DeviceReplayKey` ((shape, address) per input). :meth:`replay_host` and :meth:`replay_device` take
      those calls with no validation: a key matches only a call of the dtypes, shapes and sources (or addresses)
      that the general path validated before. Every shortcut names a graph held here; anything else, or any doubt,
      returns None and the runner takes the general path, which validates and explains.
    - **Registrations.** A serial is never reused, so a graph for an array that has died cannot be replayed for
      another array at the same address. When an array dies, :class:`~trtkit.runtime.reuse.ReusedInputs` records
      its serial; the next synchronous call (in :meth:`replay_host`, before any lookup) destroys every graph that
      reads from it and drops its host shortcuts. Device shortcuts read no host memory and are not affected. An
      array is read in place only by a synchronous call (``sync``): asynchronous calls copy it.
    - **Destruction.** :meth:`clear` (the runner closes, after synchronizing its stream) destroys every graph,
      forgets failures and shortcuts, and unregisters every page-locked array. :meth:`page_lock` switched off
      unregisters the arrays and drops what read them.

    Calls look keys up with the plain tuples equal to them (no constructor call per call); stored keys are NamedTuples.

    Args:
        cuda: a :class:`~trtkit.runtime.cuda.Cuda`.
        stream: the runner's stream; ``wait_event``: its event for ordering after a producer's stream.
        input_specs: the engine's inputs, in order; ``buckets``: the runner's buckets by input shapes (read here,
            never changed).
        copy: copies a numpy input into a pinned view (``copy(view, array)``).
        page_lock: page-lock numpy arrays passed again (:mod:`trtkit.runtime.reuse`).
    """

    def __init__(
        self,
        cuda=None,
        stream: int = 0,
        wait_event=None,
        input_specs: tuple = (),
        buckets: dict | None = None,
        copy=None,
        page_lock: bool = False,
    ):
        self._cuda, self._stream, self._wait_event = cuda, stream, wait_event
        self._specs = input_specs
        self._buckets: dict = {} if buckets is None else buckets
        self._copy = copy
        # keyed by GraphKey, HostReplayKey and DeviceReplayKey, looked up with the plain tuples equal to them
        self._graphs: dict[tuple, CudaGraph] = {}
        self._failed: set[tuple] = set()  # GraphKeys whose capture failed
        self._host: dict[tuple, CudaGraph] = {}
        self._device: dict[tuple, tuple] = {}  # -> (bucket, graph)
        self._reused: ReusedInputs | None = ReusedInputs(cuda) if page_lock else None
        self.address_graphs = 0  # graphs captured (or tried) with device inputs bound in place
        # counters: synchronous calls started, and the path each call took
        self.calls = self.host_replays = self.device_replays = self.graph_replays = self.captures = 0
        self.enqueues = 0

    def __len__(self) -> int:
        return len(self._graphs)

    # --- the shortcuts: every call starts with replay_host ----------------------------------------------------------

    def replay_host(self, feed, sync: bool):
        """Replay a call of numpy inputs in fewer steps: each input of the dtype and shape of a call validated before
        and sent from the same source (copied into pinned memory first, unless it is page-locked in place), then one
        graph launch. Every call starts here: a synchronous one (``sync``) is numbered, and drops the graphs of
        arrays that died, first. Returns the call's bucket, or None having done nothing."""
        reused = None
        if sync:
            self.calls += 1
            reused = self._reused
            if reused is not None and reused.released:
                self._forget(set(reused.take_released()))
        if not self._host or type(feed) is not dict or len(feed) != len(self._specs):
            return None
        arrays = []
        for spec in self._specs:
            array = feed.get(spec.name)
            if type(array) is not np.ndarray or array.dtype != spec.dtype:
                return None
            arrays.append(array)
        bucket = self._buckets.get(tuple([a.shape for a in arrays]))
        if bucket is None:
            return None
        serials = []
        for view, array, via_pinned in zip(bucket.in_views, arrays, bucket.via_pinned):
            locked = None if reused is None or array is view else reused.locked(array, self.calls)
            if locked is not None:
                serials.append(locked.serial)
            elif via_pinned or array is view:
                serials.append(0)
            else:  # sent straight from pageable memory: not in a graph
                return None
        graph = self._host.get((bucket.key, tuple(serials)))  # a graph holds its shapes: the context's don't matter
        if graph is None:
            return None
        for view, array, serial in zip(bucket.in_views, arrays, serials):
            if not serial and array is not view:  # a view from host_inputs() is already in place
                self._copy(view, array)
        graph.launch(self._stream)
        self.host_replays += 1
        return bucket

    def replay_device(self, feed):
        """Replay a device-resident call in fewer steps: every input a device array (``__cuda_array_interface__``,
        C-contiguous, the input's dtype) of the shape and address of a call replayed before. Orders the stream after
        each producer's, then one graph launch. Returns the call's bucket, or None having done nothing."""
        if not self._device or type(feed) is not dict or len(feed) != len(self._specs):
            return None
        key, producers = [], []
        for spec in self._specs:
            iface = getattr(feed.get(spec.name), "__cuda_array_interface__", None)
            if iface is None or iface.get("strides") is not None or iface.get("typestr") != spec.dtype.str:
                return None
            key.append((tuple(iface["shape"]), iface["data"][0]))
            if iface.get("stream") is not None:
                producers.append(int(iface["stream"]))
        entry = self._device.get((tuple(key),))
        if entry is None:
            return None
        cuda = self._cuda
        for stream in producers:
            cuda.event_record(self._wait_event, stream)
            cuda.stream_wait_event(self._stream, self._wait_event)
        bucket, graph = entry
        graph.launch(self._stream)
        self.device_replays += 1
        return bucket

    # --- the general path --------------------------------------------------------------------------------------------

    def locked(self, array: np.ndarray):
        """The registration of ``array`` (a numpy array of the input's dtype, given to a synchronous call) if it is,
        or now becomes, page-locked in place; None to copy it."""
        return None if self._reused is None else self._reused.locked(array, self.calls)

    def binds_in_place(self, key: tuple, limit: int) -> bool:
        """Whether device inputs at ``key.addresses`` may be bound where they are: a graph for them exists, or was
        tried, or fewer than ``limit`` graphs are keyed by addresses."""
        return key in self._graphs or key in self._failed or self.address_graphs < limit

    def launch(self, key: tuple, bucket, enqueue, shortcut: bool) -> None:
        """Replay the graph of ``key`` (a :class:`GraphKey`'s fields as a plain tuple: the graph is stored under the
        GraphKey, made only then), or run ``enqueue(bucket, sources, copy_out)`` and capture it for next time (unless
        its capture failed before). ``shortcut``: the call returns outputs as the runner does, so a replay makes the
        shortcut of its kind."""
        shapes, sources, copy_out, addresses = key
        graph = self._graphs.get(key)
        if graph is not None:
            graph.launch(self._stream)
            self.graph_replays += 1
            if not shortcut:
                return
            if None not in sources:  # every input sent from the host
                host_key = (shapes, tuple([serial for serial, _ in sources]))
                if host_key not in self._host:
                    self._host[HostReplayKey(*host_key)] = graph
            elif len(addresses) == len(shapes):  # every input device-resident, in place
                device_key = (tuple(zip(shapes, addresses)),)
                if device_key not in self._device:
                    self._device[DeviceReplayKey(*device_key)] = (bucket, graph)
            return
        enqueue(bucket, sources, copy_out)  # warm-up outside capture; it also computes this call
        if key in self._failed:
            self.enqueues += 1
            return
        self.captures += 1
        self._cuda.stream_synchronize(self._stream)
        self.address_graphs += bool(addresses)
        self.capture(GraphKey(*key), self._cuda, self._stream, lambda: enqueue(bucket, sources, copy_out))

    def enqueue(self, bucket, sources: tuple, copy_out: bool, enqueue) -> None:
        """Run a call by plain enqueue, no graph (the runner's ``cuda_graph`` is off)."""
        enqueue(bucket, sources, copy_out)
        self.enqueues += 1

    # --- the graphs themselves ---------------------------------------------------------------------------------------

    def get(self, key: GraphKey) -> CudaGraph | None:
        return self._graphs.get(key)

    def failed(self, key: GraphKey) -> bool:
        return key in self._failed

    def graphs(self) -> dict[GraphKey, CudaGraph]:
        """The graphs held, by key (a copy of the index; the graphs themselves stay owned here)."""
        return dict(self._graphs)  # type: ignore[arg-type]  # stored under GraphKeys (see launch)

    def capture(self, key, cuda, stream: int, enqueue) -> CudaGraph | None:
        """Capture a graph for ``key``; on failure log a warning, remember it, and return None."""
        graph, reason = capture(cuda, stream, enqueue)
        if graph is None:
            self._failed.add(key)
            logger.warning("CUDA graph capture failed (%s); falling back to plain enqueue for this input shape", reason)
            return None
        self._graphs[key] = graph
        return graph

    # --- registrations -----------------------------------------------------------------------------------------------

    @property
    def page_locked(self) -> int:
        """How many arrays are page-locked in place now."""
        return 0 if self._reused is None else len(self._reused)

    @property
    def page_locking(self) -> bool:
        """Whether new arrays passed again are page-locked (off, or stopped after arrays that died young: False)."""
        return self._reused is not None and self._reused.enabled

    def page_lock(self, on: bool) -> None:
        """Start or stop page-locking arrays passed again; stopping unregisters every array and drops what read
        them (the runner has synchronized: nothing reads them any more)."""
        if on and self._reused is None:
            self._reused = ReusedInputs(self._cuda)
        elif not on and self._reused is not None:
            reused, self._reused = self._reused, None
            try:
                reused.clear()
            finally:
                self._forget(set(reused.take_released()))

    def _forget(self, dead: set) -> None:
        """Destroy the graphs that read from the registrations ``dead`` (serials), and their host shortcuts."""
        if not dead:
            return
        for host_key in [k for k in self._host if any(serial in dead for serial in k[1])]:  # HostReplayKey.serials
            del self._host[host_key]
        for key in [k for k in self._graphs if any(s is not None and s[0] in dead for s in k[1])]:  # GraphKey.sources
            self._graphs.pop(key).destroy()

    def clear(self) -> None:
        """Destroy every graph, forget failures and shortcuts, then unregister every page-locked array."""
        graphs, self._graphs = list(self._graphs.values()), {}
        self._failed.clear()
        self._host.clear()
        self._device.clear()
        try:
            for graph in graphs:
                graph.destroy()
        finally:
            if self._reused is not None:
                self._reused.clear()
