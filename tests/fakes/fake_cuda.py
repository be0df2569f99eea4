"""A fake of cuda-python's runtime module for CPU tests.

Same call signatures and ``(err, *values)`` returns as ``cuda.bindings.runtime`` for the calls trtkit makes. "Device"
memory is host memory tracked in a registry, so copies are checked (a host pointer where a device one belongs is an
error, as is a copy running past an allocation) and leaks are visible (:meth:`FakeCudart.live_allocations`).

Work is asynchronous like on a GPU: copies, kernels (the fake TensorRT's ``execute_async_v3``) and event records are
queued on their stream and run only when something waits for them (stream/event synchronize, a wait on an event, or
``run_pending``). Code that reads results without synchronizing therefore reads stale data, as it would on a GPU.
Stream capture records the queued work into a graph instead; launching the graph queues it again.

Handles are unique across instances, so the fake TensorRT finds the instance that owns a stream with
:func:`owner_of_stream`.
"""

from __future__ import annotations

import ctypes
import enum
import itertools
import threading
from collections import Counter
from types import SimpleNamespace

import numpy as np


class cudaError_t(enum.IntEnum):
    cudaSuccess = 0
    cudaErrorInvalidValue = 1
    cudaErrorMemoryAllocation = 2
    cudaErrorInvalidPitchValue = 12
    cudaErrorInsufficientDriver = 35
    cudaErrorNoDevice = 100
    cudaErrorInvalidDevice = 101
    cudaErrorInvalidResourceHandle = 400
    cudaErrorNotReady = 600
    cudaErrorIllegalAddress = 700
    cudaErrorHostMemoryAlreadyRegistered = 712
    cudaErrorHostMemoryNotRegistered = 713
    cudaErrorStreamCaptureUnsupported = 900
    cudaErrorStreamCaptureInvalidated = 901
    cudaErrorStreamCaptureWrongThread = 908


class cudaMemcpyKind(enum.IntEnum):
    cudaMemcpyHostToHost = 0
    cudaMemcpyHostToDevice = 1
    cudaMemcpyDeviceToHost = 2
    cudaMemcpyDeviceToDevice = 3
    cudaMemcpyDefault = 4


class cudaStreamCaptureMode(enum.IntEnum):
    cudaStreamCaptureModeGlobal = 0
    cudaStreamCaptureModeThreadLocal = 1
    cudaStreamCaptureModeRelaxed = 2


cudaStreamNonBlocking = 1
cudaEventDisableTiming = 2
cudaHostRegisterDefault = 0

OK = cudaError_t.cudaSuccess
_HANDLES = itertools.count(0x1000)
_STREAM_OWNERS: dict = {}
_LOCK = threading.RLock()

# The fake GPU's clock advances this much (ms) per operation it runs, so event timings are positive and repeatable.
TICK_MS = 0.01


def owner_of_stream(stream) -> "FakeCudart":
    """The :class:`FakeCudart` that created ``stream`` (raises KeyError for an unknown handle)."""
    return _STREAM_OWNERS[int(stream)]


class _Handle(int):
    """An opaque handle: an int like cuda-python's ``int(cudaStream_t)``, with ``getPtr()`` for realism."""

    def getPtr(self) -> int:
        return int(self)


class _Stream:
    def __init__(self):
        self.queue: list = []
        self.capture: list | None = None


class _Event:
    def __init__(self, timing: bool):
        self.timing = timing
        self.time_ms: float | None = None
        self.stream: int | None = None
        self.pending = False


class FakeGraph:
    def __init__(self, ops: list):
        self.ops = list(ops)


class FakeGraphExec:
    def __init__(self, graph: FakeGraph):
        self.ops = list(graph.ops)


class FakeCudart:
    """Module-like fake of ``cuda.bindings.runtime``.

    Args:
        free_bytes: device memory reported by ``cudaMemGetInfo`` before any allocation.
        fail_capture: make ``cudaStreamEndCapture`` report an invalidated capture (tests the graph fallback).
        no_device: every call fails with ``cudaErrorInsufficientDriver`` (a machine without a driver).
        kernels: offer :class:`FakeHistogramKernels` to the GPU calibration histograms and
            :class:`FakeLetterboxKernels` to the GPU letterbox.
        devices: how many GPUs there are. Each thread has a current device (``cudaSetDevice``, 0 at first); memory
            and streams belong to the device current when they were made, and work queued on a stream of another
            device than the calling thread's fails with ``cudaErrorInvalidResourceHandle``, as kernel launches do.

    Attributes:
        calls: how many times each function was called, by name.
    """

    cudaError_t = cudaError_t
    cudaMemcpyKind = cudaMemcpyKind
    cudaStreamCaptureMode = cudaStreamCaptureMode
    cudaStreamNonBlocking = cudaStreamNonBlocking
    cudaEventDisableTiming = cudaEventDisableTiming
    cudaHostRegisterDefault = cudaHostRegisterDefault

    def __init__(
        self,
        *,
        free_bytes: int = 8 << 30,
        fail_capture: bool = False,
        no_device: bool = False,
        kernels: bool = True,
        devices: int = 1,
    ):
        self.total_bytes = free_bytes
        self.devices = int(devices)
        self._current = threading.local()
        self.allocation_device: dict[int, int] = {}  # device pointer -> the device it was allocated on
        self._stream_device: dict[int, int] = {}
        # What calibrators.device_histogram launches; None: it tries the real PTX kernels (and falls back).
        self.histogram_kernels = (lambda: FakeHistogramKernels(self)) if kernels else None
        # What trtkit.runtime.letterbox launches; None: it tries the real PTX kernels (and falls back).
        self.letterbox_kernels = (lambda: FakeLetterboxKernels(self)) if kernels else None
        self.fail_capture = fail_capture
        self.no_device = no_device
        self.calls: Counter = Counter()
        self.clock_ms = 0.0
        self.last_error = OK
        self._device: dict[int, np.ndarray] = {}
        self._host: dict[int, np.ndarray] = {}
        self._registered: dict[int, int] = {}  # cudaHostRegister: base address -> bytes (page-locked in place)
        self._streams: dict[int, _Stream] = {}
        self._events: dict[int, _Event] = {}
        self._graphs: dict[int, object] = {}

    # --- helpers for tests and for the fake TensorRT ------------------------------------------------------------

    def live_allocations(self) -> dict:
        """Counts of what is allocated and not yet freed."""
        return {
            "device": len(self._device),
            "host": len(self._host),
            "registered": len(self._registered),
            "streams": len(self._streams),
            "events": len(self._events),
            "graphs": len(self._graphs),
        }

    def device_range(self, ptr: int, nbytes: int) -> bool:
        """True when ``[ptr, ptr + nbytes)`` lies inside one device allocation."""
        for base, buf in self._device.items():
            if base <= ptr and ptr + nbytes <= base + buf.nbytes:
                return True
        return False

    def is_device(self, ptr: int) -> bool:
        return any(base <= ptr < base + buf.nbytes for base, buf in self._device.items())

    def enqueue(self, stream, op) -> None:
        """Queue ``op`` (a callable) on ``stream``, or record it into the graph being captured there."""
        s = self._stream(stream)
        if s is None:  # the legacy/per-thread default streams run work at once
            op()
            return
        (s.capture if s.capture is not None else s.queue).append(op)

    def is_capturing(self, stream) -> bool:
        s = self._stream(stream)
        return s is not None and s.capture is not None

    def run_pending(self, stream=None) -> None:
        """Run the queued work of ``stream`` (or of every stream)."""
        with _LOCK:
            streams = [self._streams[int(stream)]] if stream is not None else list(self._streams.values())
            for s in streams:
                while s.queue:
                    op = s.queue.pop(0)
                    self.clock_ms += TICK_MS
                    op()

    def device_array(self, shape, dtype, fill=None) -> "FakeDeviceArray":
        """A device array exposing ``__cuda_array_interface__`` (stands in for a CuPy/torch tensor in tests)."""
        return FakeDeviceArray(self, shape, dtype, fill)

    def _stream(self, stream):
        handle = int(stream or 0)
        if handle in (0, 1, 2):
            return None
        if handle not in self._streams or self._stream_device[handle] != self.current_device():
            raise _CudaFailure(cudaError_t.cudaErrorInvalidResourceHandle)
        return self._streams[handle]

    def current_device(self) -> int:
        return getattr(self._current, "device", 0)

    def _call(self, name: str, fn, *args):
        self.calls[name] += 1
        if self.no_device:
            return (cudaError_t.cudaErrorInsufficientDriver,)
        try:
            with _LOCK:
                return fn(*args)
        except _CudaFailure as failure:
            self.last_error = failure.err
            return (failure.err,)

    # --- memory ---------------------------------------------------------------------------------------------------

    def cudaMalloc(self, size):
        return self._call("cudaMalloc", self._alloc, self._device, size)

    def cudaMallocHost(self, size):
        return self._call("cudaMallocHost", self._alloc, self._host, size)

    def _alloc(self, table, size):
        if size <= 0:
            raise _CudaFailure(cudaError_t.cudaErrorInvalidValue)
        if table is self._device and size > self._free_bytes():
            raise _CudaFailure(cudaError_t.cudaErrorMemoryAllocation)
        raw = np.zeros(int(size) + 256, dtype=np.uint8)
        ptr = (raw.ctypes.data + 255) // 256 * 256
        table[ptr] = raw[ptr - raw.ctypes.data :][: int(size)]
        if table is self._device:
            self.allocation_device[ptr] = self.current_device()
        return OK, ptr

    def cudaFree(self, ptr):
        if int(ptr) == 0:  # CUDA's no-op, used to make the runtime's context current
            return self._call("cudaFree", lambda: (OK,))
        return self._call("cudaFree", self._release, self._device, ptr)

    def cudaFreeHost(self, ptr):
        return self._call("cudaFreeHost", self._release, self._host, ptr)

    def _release(self, table, ptr):
        if int(ptr) not in table:
            raise _CudaFailure(cudaError_t.cudaErrorInvalidValue)
        del table[int(ptr)]
        return (OK,)

    def cudaHostRegister(self, ptr, size, flags):
        return self._call("cudaHostRegister", self._register, int(ptr), int(size))

    def _register(self, ptr, size):
        if size <= 0 or self.is_device(ptr):
            raise _CudaFailure(cudaError_t.cudaErrorInvalidValue)
        page = 4096  # CUDA locks whole pages: ranges sharing a page overlap
        lo, hi = ptr // page, (ptr + size - 1) // page
        for base, nbytes in self._registered.items():
            if lo <= (base + nbytes - 1) // page and base // page <= hi:
                raise _CudaFailure(cudaError_t.cudaErrorHostMemoryAlreadyRegistered)
        if self._pinned(ptr, size):
            raise _CudaFailure(cudaError_t.cudaErrorHostMemoryAlreadyRegistered)
        self._registered[ptr] = size
        return (OK,)

    def cudaHostUnregister(self, ptr):
        return self._call("cudaHostUnregister", self._unregister, int(ptr))

    def _unregister(self, ptr):
        if self._registered.pop(ptr, None) is None:
            raise _CudaFailure(cudaError_t.cudaErrorHostMemoryNotRegistered)
        return (OK,)

    def _free_bytes(self) -> int:
        return self.total_bytes - sum(buf.nbytes for buf in self._device.values())

    def cudaMemGetInfo(self):
        return self._call("cudaMemGetInfo", lambda: (OK, self._free_bytes(), self.total_bytes))

    def cudaMemcpyAsync(self, dst, src, count, kind, stream):
        return self._call("cudaMemcpyAsync", self._memcpy, int(dst), int(src), int(count), kind, stream)

    def _memcpy(self, dst, src, count, kind, stream):
        dst_dev = kind in (cudaMemcpyKind.cudaMemcpyHostToDevice, cudaMemcpyKind.cudaMemcpyDeviceToDevice)
        src_dev = kind in (cudaMemcpyKind.cudaMemcpyDeviceToHost, cudaMemcpyKind.cudaMemcpyDeviceToDevice)
        for ptr, on_device in ((dst, dst_dev), (src, src_dev)):
            if on_device and not self.device_range(ptr, count):
                raise _CudaFailure(cudaError_t.cudaErrorInvalidValue)
            if not on_device and self.is_device(ptr):
                raise _CudaFailure(cudaError_t.cudaErrorInvalidValue)
        host_side = [(ptr, dev) for ptr, dev in ((dst, dst_dev), (src, src_dev)) if not dev]
        if self.is_capturing(stream) and any(not self._pinned(ptr, count) for ptr, _ in host_side):
            raise _CudaFailure(cudaError_t.cudaErrorStreamCaptureUnsupported)  # pageable memory in a graph
        if not src_dev and not self._pinned(src, count):
            # From pageable memory CUDA stages the data before returning: the caller may reuse its buffer at once.
            staged = ctypes.create_string_buffer(ctypes.string_at(src, count), count)
            self.enqueue(stream, lambda: ctypes.memmove(dst, staged, count))
        else:
            locked = [ptr for ptr, _ in host_side if self._pinned(ptr, count)]

            def copy():
                # checked when it runs, as the GPU's copy engine would reach it: host memory freed or unregistered
                # while the copy was queued is an error
                for host in locked:
                    if not self._pinned(host, count):
                        raise RuntimeError(
                            f"copy of {count} bytes at {host:#x} ran after that host memory stopped "
                            f"being page-locked (unregistered or freed while the copy was queued?)"
                        )
                ctypes.memmove(dst, src, count)

            self.enqueue(stream, copy)
        return (OK,)

    def cudaMemcpy2DAsync(self, dst, dpitch, src, spitch, width, height, kind, stream):
        return self._call(
            "cudaMemcpy2DAsync",
            self._memcpy2d,
            *(int(v) for v in (dst, dpitch, src, spitch, width, height)),
            kind,
            stream,
        )

    def _memcpy2d(self, dst, dpitch, src, spitch, width, height, kind, stream):
        """Device to device only (what trtkit uses): ``height`` rows of ``width`` bytes, each pitch apart."""
        if kind != cudaMemcpyKind.cudaMemcpyDeviceToDevice:
            raise _CudaFailure(cudaError_t.cudaErrorInvalidValue)
        if width > min(dpitch, spitch) or height < 1:
            raise _CudaFailure(cudaError_t.cudaErrorInvalidPitchValue)
        for ptr, pitch in ((dst, dpitch), (src, spitch)):
            if not self.device_range(ptr, pitch * (height - 1) + width):
                raise _CudaFailure(cudaError_t.cudaErrorInvalidValue)

        def copy():
            for row in range(height):
                ctypes.memmove(dst + row * dpitch, src + row * spitch, width)

        self.enqueue(stream, copy)
        return (OK,)

    def cudaMemsetAsync(self, ptr, value, count, stream):
        return self._call("cudaMemsetAsync", self._memset, int(ptr), int(value), int(count), stream)

    def _memset(self, ptr, value, count, stream):
        if not self.device_range(ptr, count):
            raise _CudaFailure(cudaError_t.cudaErrorInvalidValue)
        self.enqueue(stream, lambda: ctypes.memset(ptr, value, count))
        return (OK,)

    def _pinned(self, ptr, count) -> bool:
        """True when ``[ptr, ptr + count)`` lies in one pinned allocation or one registered range."""
        return any(base <= ptr and ptr + count <= base + buf.nbytes for base, buf in self._host.items()) or any(
            base <= ptr and ptr + count <= base + n for base, n in self._registered.items()
        )

    # --- streams and events ---------------------------------------------------------------------------------------

    def cudaStreamCreateWithFlags(self, flags):
        return self._call("cudaStreamCreateWithFlags", self._new_stream)

    def _new_stream(self):
        handle = _Handle(next(_HANDLES))
        self._streams[int(handle)] = _Stream()
        self._stream_device[int(handle)] = self.current_device()
        _STREAM_OWNERS[int(handle)] = self
        return OK, handle

    def cudaStreamDestroy(self, stream):
        return self._call("cudaStreamDestroy", self._destroy_stream, int(stream))

    def _destroy_stream(self, handle):
        self._stream(handle)
        self.run_pending(handle)
        del self._streams[handle]
        _STREAM_OWNERS.pop(handle, None)
        return (OK,)

    def cudaDeviceSynchronize(self):
        return self._call("cudaDeviceSynchronize", lambda: (self.run_pending(), (OK,))[1])

    def cudaStreamSynchronize(self, stream):
        return self._call("cudaStreamSynchronize", self._sync_stream, stream)

    def _sync_stream(self, stream):
        if self._stream(stream) is not None:
            self.run_pending(stream)
        return (OK,)

    def cudaEventCreate(self):
        return self._call("cudaEventCreate", self._new_event, True)

    def cudaEventCreateWithFlags(self, flags):
        return self._call("cudaEventCreateWithFlags", self._new_event, not (int(flags) & cudaEventDisableTiming))

    def _new_event(self, timing):
        handle = _Handle(next(_HANDLES))
        self._events[int(handle)] = _Event(timing)
        return OK, handle

    def cudaEventDestroy(self, event):
        return self._call("cudaEventDestroy", lambda: (OK,) if self._events.pop(int(event), None) else _fail(400))

    def _event(self, event) -> _Event:
        if int(event) not in self._events:
            raise _CudaFailure(cudaError_t.cudaErrorInvalidResourceHandle)
        return self._events[int(event)]

    def cudaEventRecord(self, event, stream):
        return self._call("cudaEventRecord", self._record, event, stream)

    def _record(self, event, stream):
        ev = self._event(event)
        ev.stream, ev.pending = int(stream or 0), True

        def fire():
            ev.time_ms, ev.pending = self.clock_ms, False

        self.enqueue(stream, fire)
        return (OK,)

    def cudaEventSynchronize(self, event):
        return self._call("cudaEventSynchronize", self._sync_event, event)

    def _sync_event(self, event):
        ev = self._event(event)
        if ev.pending and ev.stream not in (None, 0, 1, 2):
            self.run_pending(ev.stream)
        return (OK,)

    def cudaEventQuery(self, event):
        return self._call(
            "cudaEventQuery", lambda: (cudaError_t.cudaErrorNotReady,) if self._event(event).pending else (OK,)
        )

    def cudaEventElapsedTime(self, start, end):
        return self._call("cudaEventElapsedTime", self._elapsed, start, end)

    def _elapsed(self, start, end):
        a, b = self._event(start), self._event(end)
        if not (a.timing and b.timing) or a.time_ms is None or b.time_ms is None:
            raise _CudaFailure(cudaError_t.cudaErrorInvalidResourceHandle)
        if a.pending or b.pending:
            raise _CudaFailure(cudaError_t.cudaErrorNotReady)
        return OK, b.time_ms - a.time_ms

    def cudaStreamWaitEvent(self, stream, event, flags):
        return self._call("cudaStreamWaitEvent", self._wait_event, stream, event)

    def _wait_event(self, stream, event):
        # Conservative ordering: run the event's stream now, so everything before the event is done.
        self._sync_event(event)
        self._stream(stream)
        return (OK,)

    # --- graphs ---------------------------------------------------------------------------------------------------

    def cudaStreamBeginCapture(self, stream, mode):
        return self._call("cudaStreamBeginCapture", self._begin_capture, stream)

    def _begin_capture(self, stream):
        s = self._stream(stream)
        if s is None or s.capture is not None:
            raise _CudaFailure(cudaError_t.cudaErrorStreamCaptureUnsupported)
        s.capture = []
        return (OK,)

    def cudaStreamEndCapture(self, stream):
        return self._call("cudaStreamEndCapture", self._end_capture, stream)

    def _end_capture(self, stream):
        s = self._stream(stream)
        if s is None or s.capture is None:
            raise _CudaFailure(cudaError_t.cudaErrorInvalidValue)
        ops, s.capture = s.capture, None
        if self.fail_capture:
            raise _CudaFailure(cudaError_t.cudaErrorStreamCaptureInvalidated)
        return OK, self._keep(FakeGraph(ops))

    def _keep(self, obj):
        handle = _Handle(next(_HANDLES))
        self._graphs[int(handle)] = obj
        return handle

    def cudaGraphInstantiate(self, graph, flags):
        return self._call("cudaGraphInstantiate", lambda: (OK, self._keep(FakeGraphExec(self._graph(graph)))))

    def _graph(self, handle):
        if int(handle) not in self._graphs:
            raise _CudaFailure(cudaError_t.cudaErrorInvalidResourceHandle)
        return self._graphs[int(handle)]

    def cudaGraphLaunch(self, graph_exec, stream):
        return self._call("cudaGraphLaunch", self._launch, graph_exec, stream)

    def _launch(self, graph_exec, stream):
        for op in self._graph(graph_exec).ops:
            self.enqueue(stream, op)
        return (OK,)

    def cudaGraphDestroy(self, graph):
        return self._call("cudaGraphDestroy", self._drop_graph, graph)

    def cudaGraphExecDestroy(self, graph_exec):
        return self._call("cudaGraphExecDestroy", self._drop_graph, graph_exec)

    def _drop_graph(self, handle):
        self._graph(handle)
        del self._graphs[int(handle)]
        return (OK,)

    def cudaGetLastError(self):
        self.calls["cudaGetLastError"] += 1
        err, self.last_error = self.last_error, OK
        return (err,)

    # --- device queries (for doctor/manifest code that calls them) -------------------------------------------------

    def cudaGetDeviceCount(self):
        return self._call("cudaGetDeviceCount", lambda: (OK, self.devices))

    def cudaSetDevice(self, device):
        return self._call("cudaSetDevice", self._set_device, int(device))

    def _set_device(self, device):
        if not 0 <= device < self.devices:
            raise _CudaFailure(cudaError_t.cudaErrorInvalidDevice)
        self._current.device = device
        return (OK,)

    def cudaGetDevice(self):
        return self._call("cudaGetDevice", lambda: (OK, self.current_device()))

    def cudaDriverGetVersion(self):
        return (OK, 0) if self.no_device else (OK, 12080)

    def cudaRuntimeGetVersion(self):
        return (OK, 12080)

    def cudaGetDeviceProperties(self, device):
        props = SimpleNamespace(name=b"Fake GPU", major=9, minor=0, totalGlobalMem=self.total_bytes)
        return self._call("cudaGetDeviceProperties", lambda: (OK, props))


class _CudaFailure(Exception):
    def __init__(self, err):
        super().__init__(err)
        self.err = cudaError_t(err)


def _fail(code):
    raise _CudaFailure(code)


class FakeDeviceArray:
    """A device buffer exposing ``__cuda_array_interface__`` (v3), like a CuPy array or torch CUDA tensor."""

    def __init__(self, cuda: FakeCudart, shape, dtype, fill=None):
        self.cuda = cuda
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        nbytes = max(int(np.prod(self.shape)) * self.dtype.itemsize, 1)
        self.ptr = int(cuda.cudaMalloc(nbytes)[1])
        if fill is not None:
            self.host_view()[...] = np.asarray(fill, dtype=self.dtype).reshape(self.shape)

    @property
    def __cuda_array_interface__(self) -> dict:
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.ptr, False),
            "version": 3,
            "strides": None,
            "stream": None,
        }

    def host_view(self) -> np.ndarray:
        """The memory as a numpy array (the fake's device memory is host memory; tests only)."""
        return view_of(self.ptr, self.shape, self.dtype)

    def free(self) -> None:
        self.cuda.cudaFree(self.ptr)


class FakeHistogramKernels:
    """numpy stand-ins for the CUDA kernels of ``calibrators/kernels/histogram.cu``, queued on the stream like a
    launch; same results (float bits of the finite max ``|x|``; uint64 bin counts)."""

    def __init__(self, cuda: FakeCudart):
        self.cuda = cuda
        self.launches = 0

    def _queue(self, stream, ptr: int, n: int, out: int, out_bytes: int, op) -> None:
        def run():
            # checked when it runs, as the GPU would fault: memory freed while the kernel was queued is an error
            for where, nbytes in ((ptr, 4 * n), (out, out_bytes)):
                if not self.cuda.device_range(where, nbytes):
                    raise RuntimeError(
                        f"kernel touched {nbytes} bytes at {where:#x}, not inside a live device "
                        f"allocation (freed while the kernel was queued?)"
                    )
            op(np.abs(view_of(ptr, (n,), np.float32)))

        if not self.cuda.device_range(ptr, 4 * n):
            raise ValueError(f"kernel launched on {n} floats at {ptr:#x}, not inside one device allocation")
        self.launches += 1
        self.cuda.enqueue(stream, run)

    def absmax(self, ptr: int, n: int, out: int, stream) -> None:
        def op(v):
            finite = v[np.isfinite(v)]
            bits = finite.max().view(np.uint32) if finite.size else np.uint32(0)
            target = view_of(out, (1,), np.uint32)
            target[0] = max(target[0], bits)

        self._queue(stream, ptr, n, out, 4, op)

    def histogram(self, ptr: int, n: int, scale, counts: int, bins: int, stream) -> None:
        def op(v):
            index = np.minimum((v[np.isfinite(v)] * np.float32(scale)).astype(np.int32), bins - 1)
            view_of(counts, (bins,), np.uint64)[:] += np.bincount(index, minlength=bins).astype(np.uint64)

        self._queue(stream, ptr, n, counts, 8 * bins, op)

    def close(self) -> None:
        pass


class FakeLetterboxKernels:
    """numpy stand-ins for the kernels of ``trtkit/runtime/kernels/letterbox.cu``, queued on the stream like a
    launch. They read the taps from "device" memory and run Pillow's integer arithmetic
    (:func:`tests.fakes.pillow_integer.resample_axis`), so a wrong table, size or offset shows in the pixels;
    a launch whose grid does not cover its output is an error, as the GPU would leave pixels unwritten.

    Attributes:
        launches: ``(kernel name, grid)`` of every launch.
    """

    BLOCK = 256

    def __init__(self, cuda: FakeCudart):
        self.cuda = cuda
        self.launches: list = []

    def _taps(self, taps, ksize: int, length: int):
        from trtkit.detection.pillow_resample import Taps

        first, lengths, weights = taps
        return Taps(
            view_of(first, (length,), np.int32).copy(),
            view_of(lengths, (length,), np.int32).copy(),
            view_of(weights, (length, ksize), np.int32).copy(),
        )

    def _check(self, name: str, grid: int, threads: int, spans) -> None:
        if grid * self.BLOCK < threads:
            raise ValueError(f"{name}: {grid} blocks of {self.BLOCK} cover fewer than its {threads} output pixels")
        for where, nbytes in spans:
            if not self.cuda.device_range(where, nbytes):
                raise ValueError(f"{name} touches {nbytes} bytes at {where:#x}, not inside one device allocation")
        self.launches.append((name, grid))

    def resample_pass(self, src, src_cols, dst, rows, cols, taps, ksize, horizontal, grid, stream) -> None:
        from tests.fakes.pillow_integer import resample_axis

        length = cols if horizontal else rows
        src_rows = rows if horizontal else None

        def run():
            t = self._taps(taps, ksize, length)
            n_rows = src_rows if src_rows is not None else int((t.first + t.lengths).max())
            image = view_of(src, (n_rows, src_cols, 3), np.uint8)
            view_of(dst, (rows, cols, 3), np.uint8)[...] = resample_axis(image, t, 1 if horizontal else 0)

        self._check("resample_pass", grid, rows * cols, [(dst, rows * cols * 3)])
        self.cuda.enqueue(stream, run)

    def letterbox_finish(
        self, tmp, tmp_cols, taps, ksize, horizontal, region, out_hw, pad_value, out, fmt, scale, norm, grid, stream
    ) -> None:
        from tests.fakes.pillow_integer import resample_axis

        new_w, new_h, pad_x, pad_y = region
        out_h, out_w = out_hw
        dtype = {0: np.uint8, 1: np.float32, 2: np.float16}[fmt]

        def run():
            t = self._taps(taps, ksize, new_w if horizontal else new_h)
            tmp_rows = new_h if horizontal else int((t.first + t.lengths).max())
            resized = resample_axis(view_of(tmp, (tmp_rows, tmp_cols, 3), np.uint8), t, 1 if horizontal else 0)
            canvas = np.full((out_h, out_w, 3), pad_value, np.uint8)
            canvas[pad_y : pad_y + new_h, pad_x : pad_x + new_w] = resized
            if fmt == 0:
                view_of(out, (out_h, out_w, 3), np.uint8)[...] = canvas
            else:
                mean, std = (np.asarray(v, np.float32).reshape(3, 1, 1) for v in norm)
                values = (np.multiply(canvas.transpose(2, 0, 1), np.float32(scale), dtype=np.float32) - mean) / std
                view_of(out, (3, out_h, out_w), dtype)[...] = values.astype(dtype)

        self._check("letterbox_finish", grid, out_h * out_w, [(out, out_h * out_w * 3 * np.dtype(dtype).itemsize)])
        self.cuda.enqueue(stream, run)

    def close(self) -> None:
        pass


def view_of(ptr: int, shape, dtype) -> np.ndarray:
    """A numpy array over raw memory at ``ptr`` (no copy)."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape)) if len(shape) else 1
    raw = (ctypes.c_uint8 * max(count * dtype.itemsize, 1)).from_address(int(ptr))
    return np.frombuffer(raw, dtype=dtype, count=count).reshape(tuple(shape))
