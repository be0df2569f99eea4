"""Thin, checked wrappers over cuda-python's runtime API.

Every cuda-python call returns ``(cudaError_t, *values)``. :func:`check` is the one place that turns such a tuple into
its value(s) or a :class:`~trtkit.errors.CudaError` naming the call and the CUDA error. :class:`Cuda` binds the wrappers
to one runtime module, so the runner works unchanged with cuda-python and with the fake of
:mod:`tests.fakes.fake_cuda` (CPU tests).

Pointers and stream/event handles are passed around as plain ``int`` (TensorRT wants ints; cuda-python accepts them).
"""

from __future__ import annotations

from trtkit._lazy import cudart
from trtkit.errors import CudaError

# What a user can do about the errors seen most often, by CUDA error name.
_HINTS = {
    "cudaErrorInsufficientDriver": "no usable NVIDIA driver: install one matching your CUDA (see `trtkit doctor`)",
    "cudaErrorNoDevice": "no CUDA GPU is visible (check CUDA_VISIBLE_DEVICES and `nvidia-smi`)",
    "cudaErrorMemoryAllocation": "the GPU is out of memory: use smaller max shapes, fewer streams, or free memory",
    "cudaErrorStreamCaptureInvalidated": "the work cannot be captured in a CUDA graph",
    "cudaErrorStreamCaptureUnsupported": "the work cannot be captured in a CUDA graph",
}

SUCCESS = 0
NOT_READY = 600


def error_name(err) -> str:
    """The name of a ``cudaError_t`` (e.g. ``'cudaErrorMemoryAllocation'``), or its number when unnamed."""
    name = getattr(err, "name", None)
    return str(name) if name else f"cudaError {int(err)}"


def check(result, call: str = "CUDA call"):
    """Return the value(s) of a cuda-python call, or raise if its error code is not success.

    Args:
        result: the tuple returned by a cuda-python runtime function, ``(err, *values)``.
        call: the call's name for the error message, e.g. ``"cudaMalloc(4096)"``.

    Returns:
        ``None`` for no values, the value for one, else a tuple of the values.

    Raises:
        CudaError: the error code is not ``cudaSuccess``; the message names ``call`` and the error.
    """
    err = result[0] if isinstance(result, tuple) else result
    if int(err) != SUCCESS:
        name = error_name(err)
        hint = _HINTS.get(name)
        raise CudaError(f"{call} failed with {name}" + (f": {hint}" if hint else ""))
    if not isinstance(result, tuple) or len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


class Cuda:
    """The CUDA runtime calls trtkit uses, each checked, bound to one runtime module.

    Args:
        rt: ``cuda.bindings.runtime`` (default, imported lazily) or a fake with the same signatures.
    """

    def __init__(self, rt=None):
        if rt is None:
            rt = cudart()
        self.rt = rt
        self.H2D = rt.cudaMemcpyKind.cudaMemcpyHostToDevice
        self.D2H = rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
        self.D2D = rt.cudaMemcpyKind.cudaMemcpyDeviceToDevice

    def set_device(self, device: int) -> None:
        """Make ``device`` the calling thread's current GPU (memory, streams and launches then go there)."""
        check(self.rt.cudaSetDevice(int(device)), f"cudaSetDevice({device})")

    # --- memory --------------------------------------------------------------------------------------------------

    def malloc(self, nbytes: int) -> int:
        """Allocate ``nbytes`` of device memory (at least 1 byte); return the pointer."""
        return int(check(self.rt.cudaMalloc(max(int(nbytes), 1)), f"cudaMalloc({nbytes})"))

    def free(self, ptr: int) -> None:
        check(self.rt.cudaFree(ptr), "cudaFree")

    def malloc_host(self, nbytes: int) -> int:
        """Allocate ``nbytes`` of pinned (page-locked) host memory; return the pointer."""
        return int(check(self.rt.cudaMallocHost(max(int(nbytes), 1)), f"cudaMallocHost({nbytes})"))

    def free_host(self, ptr: int) -> None:
        check(self.rt.cudaFreeHost(ptr), "cudaFreeHost")

    def host_register(self, ptr: int, nbytes: int) -> None:
        """Page-lock ``nbytes`` of existing host memory at ``ptr`` so the GPU transfers it in place."""
        check(self.rt.cudaHostRegister(ptr, nbytes, self.rt.cudaHostRegisterDefault), f"cudaHostRegister({nbytes})")

    def host_unregister(self, ptr: int) -> None:
        """Undo :meth:`host_register` (``ptr`` as registered)."""
        check(self.rt.cudaHostUnregister(ptr), "cudaHostUnregister")

    def mem_get_info(self) -> tuple[int, int]:
        """``(free, total)`` bytes of device memory."""
        free, total = check(self.rt.cudaMemGetInfo(), "cudaMemGetInfo")
        return int(free), int(total)

    def memcpy_htod_async(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        check(self.rt.cudaMemcpyAsync(dst, src, nbytes, self.H2D, stream), "cudaMemcpyAsync(host to device)")

    def memcpy_dtoh_async(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        check(self.rt.cudaMemcpyAsync(dst, src, nbytes, self.D2H, stream), "cudaMemcpyAsync(device to host)")

    def memcpy_dtod_async(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        check(self.rt.cudaMemcpyAsync(dst, src, nbytes, self.D2D, stream), "cudaMemcpyAsync(device to device)")

    def memcpy2d_dtod_async(
        self, dst: int, dst_pitch: int, src: int, src_pitch: int, width: int, height: int, stream: int
    ) -> None:
        """``height`` rows of ``width`` bytes from ``src`` to ``dst``, rows ``src_pitch``/``dst_pitch`` bytes apart
        (a pitched picture into a packed one), in stream order."""
        check(
            self.rt.cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, height, self.D2D, stream),
            "cudaMemcpy2DAsync(device to device)",
        )

    def memset_async(self, ptr: int, value: int, nbytes: int, stream: int) -> None:
        """Set ``nbytes`` of device memory at ``ptr`` to the byte ``value``, in stream order."""
        check(self.rt.cudaMemsetAsync(ptr, value, nbytes, stream), "cudaMemsetAsync")

    # --- streams and events --------------------------------------------------------------------------------------

    def stream_create(self) -> int:
        """A new non-blocking stream (does not synchronize with the legacy default stream)."""
        flags = self.rt.cudaStreamNonBlocking
        return int(check(self.rt.cudaStreamCreateWithFlags(flags), "cudaStreamCreateWithFlags"))

    def stream_destroy(self, stream: int) -> None:
        check(self.rt.cudaStreamDestroy(stream), "cudaStreamDestroy")

    def device_synchronize(self) -> None:
        """Wait for all work queued on the current GPU, on every stream (also those of other libraries)."""
        check(self.rt.cudaDeviceSynchronize(), "cudaDeviceSynchronize")

    def stream_synchronize(self, stream: int) -> None:
        check(self.rt.cudaStreamSynchronize(stream), "cudaStreamSynchronize")

    def event_create(self, timing: bool = True) -> int:
        """A new event; ``timing=False`` makes a cheaper one that only orders and signals."""
        if timing:
            return int(check(self.rt.cudaEventCreate(), "cudaEventCreate"))
        flags = self.rt.cudaEventDisableTiming
        return int(check(self.rt.cudaEventCreateWithFlags(flags), "cudaEventCreateWithFlags"))

    def event_destroy(self, event: int) -> None:
        check(self.rt.cudaEventDestroy(event), "cudaEventDestroy")

    def event_record(self, event: int, stream: int) -> None:
        check(self.rt.cudaEventRecord(event, stream), "cudaEventRecord")

    def event_synchronize(self, event: int) -> None:
        check(self.rt.cudaEventSynchronize(event), "cudaEventSynchronize")

    def event_query(self, event: int) -> bool:
        """True when the work before the event has finished, False while it is pending."""
        result = self.rt.cudaEventQuery(event)
        if int(result[0]) == NOT_READY:
            return False
        check(result, "cudaEventQuery")
        return True

    def event_elapsed_ms(self, start: int, end: int) -> float:
        return float(check(self.rt.cudaEventElapsedTime(start, end), "cudaEventElapsedTime"))

    def stream_wait_event(self, stream: int, event: int) -> None:
        check(self.rt.cudaStreamWaitEvent(stream, event, 0), "cudaStreamWaitEvent")

    # --- graphs --------------------------------------------------------------------------------------------------

    def begin_capture(self, stream: int) -> None:
        mode = self.rt.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal
        check(self.rt.cudaStreamBeginCapture(stream, mode), "cudaStreamBeginCapture")

    def end_capture(self, stream: int):
        """End capture on ``stream``; return the captured graph (raises if the capture was invalidated)."""
        return check(self.rt.cudaStreamEndCapture(stream), "cudaStreamEndCapture")

    def graph_instantiate(self, graph):
        return check(self.rt.cudaGraphInstantiate(graph, 0), "cudaGraphInstantiate")

    def graph_launch(self, graph_exec, stream: int) -> None:
        check(self.rt.cudaGraphLaunch(graph_exec, stream), "cudaGraphLaunch")

    def graph_destroy(self, graph) -> None:
        check(self.rt.cudaGraphDestroy(graph), "cudaGraphDestroy")

    def graph_exec_destroy(self, graph_exec) -> None:
        check(self.rt.cudaGraphExecDestroy(graph_exec), "cudaGraphExecDestroy")

    def clear_last_error(self) -> str | None:
        """Read and clear CUDA's sticky last error (after a failed capture); return its name, or None."""
        err = self.rt.cudaGetLastError()[0]
        return None if int(err) == SUCCESS else error_name(err)


_DEFAULT: Cuda | None = None


def default_cuda() -> Cuda:
    """The process-wide :class:`Cuda` over cuda-python (created on first use)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Cuda()
    return _DEFAULT
