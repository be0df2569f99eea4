"""Device and pinned host buffers, and device arrays exchanged through ``__cuda_array_interface__``.

Buffers are sized once (for a profile's max shapes) and viewed at the current shape, so the addresses bound to a
TensorRT context never change and a captured CUDA graph stays valid.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any, NamedTuple

import numpy as np

from trtkit.errors import InputError

# Host copies at least this large are split over threads (numpy releases the GIL while copying); below it, handing
# the pieces to threads costs more than it saves.
PARALLEL_COPY_BYTES = 8 << 20
_POOL = None  # (ThreadPoolExecutor, its number of threads), made on first use
_POOL_LOCK = threading.Lock()


# Threads used for large copies (memory bandwidth, not cores, is the limit); none on machines with fewer than 8 cores.
COPY_THREADS = 4 if (os.cpu_count() or 1) >= 8 else 0


def _copy_pool():
    """The copy threads (made on first use) and how many there are."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            from concurrent.futures import ThreadPoolExecutor

            workers = max(COPY_THREADS, 2)
            _POOL = (ThreadPoolExecutor(max_workers=workers, thread_name_prefix="trtkit-copy"), workers)
        return _POOL


def copy_into(dst: np.ndarray, src: np.ndarray, *, threads: int | None = None) -> None:
    """``np.copyto(dst, src)`` (same dtype and shape required), split over threads for large contiguous arrays.

    Args:
        threads: override :data:`COPY_THREADS` (0 or 1: one thread).
    """
    threads = COPY_THREADS if threads is None else threads
    if threads < 2 or src.nbytes < PARALLEL_COPY_BYTES or not (src.flags.c_contiguous and dst.flags.c_contiguous):
        np.copyto(dst, src, casting="no")
        return
    pool, workers = _copy_pool()
    flat_dst, flat_src = dst.reshape(-1), src.reshape(-1)
    bounds = np.linspace(0, flat_src.size, min(threads, workers) + 1, dtype=np.int64)
    jobs = [pool.submit(np.copyto, flat_dst[a:b], flat_src[a:b], casting="no") for a, b in zip(bounds, bounds[1:])]
    for job in jobs:
        job.result()


def copy_of(src: np.ndarray) -> np.ndarray:
    """A new array equal to ``src`` (threads for large ones, as :func:`copy_into`)."""
    if src.nbytes < PARALLEL_COPY_BYTES or COPY_THREADS < 2:
        return src.copy()
    out = np.empty(src.shape, src.dtype)
    copy_into(out, src)
    return out


def host_view(ptr: int, nbytes: int) -> np.ndarray:
    """A writable ``uint8`` numpy array over raw host memory at ``ptr`` (no copy, does not own the memory)."""
    raw = (ctypes.c_uint8 * max(int(nbytes), 1)).from_address(int(ptr))
    # a ctypes array exports the buffer protocol; numpy's stubs do not list it
    return np.frombuffer(raw, dtype=np.uint8, count=int(nbytes))  # type: ignore[call-overload]


class DeviceBuffer:
    """``nbytes`` of device memory, freed by :meth:`free` (idempotent)."""

    def __init__(self, cuda, nbytes: int):
        self.cuda = cuda
        self.nbytes = int(nbytes)
        self.ptr = cuda.malloc(self.nbytes)

    def free(self) -> None:
        if self.ptr:
            ptr, self.ptr = self.ptr, 0
            self.cuda.free(ptr)


class HostBuffer:
    """``nbytes`` of pinned host memory with a numpy view, freed by :meth:`free` (idempotent).

    Views handed out by :meth:`view` must not be used after :meth:`free`.
    """

    def __init__(self, cuda, nbytes: int):
        self.cuda = cuda
        self.nbytes = int(nbytes)
        self.ptr = cuda.malloc_host(self.nbytes)
        self.array: np.ndarray | Any = host_view(self.ptr, self.nbytes)  # None once freed

    def view(self, dtype, shape) -> np.ndarray:
        """The first ``prod(shape)`` elements as an array of ``shape`` (no copy)."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        return self.array[: count * dtype.itemsize].view(dtype).reshape(shape)

    def free(self) -> None:
        if self.ptr:
            ptr, self.ptr = self.ptr, 0
            self.array = None
            self.cuda.free_host(ptr)


class DeviceArray:
    """An array in device memory, exposing ``__cuda_array_interface__`` (v3) for CuPy, torch, numba...

    Outputs a :class:`~trtkit.runtime.runner.TrtRunner` hands back on the device are views of the runner's buffers:
    valid until its next call or until it closes (copy them, e.g. ``cupy.asarray(a).copy()``, to keep them).

    Args:
        ptr: device address.
        shape: array shape.
        dtype: numpy dtype.
        owner: object keeping the memory alive (not used otherwise).
        cuda: the :class:`~trtkit.runtime.cuda.Cuda` used by :meth:`to_host`.
    """

    def __init__(self, ptr: int, shape, dtype, owner=None, cuda=None):
        self.ptr = int(ptr)
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.owner = owner
        self.cuda = cuda

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

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

    def to_host(self, stream: int = 0) -> np.ndarray:
        """Copy to a new numpy array (synchronizes ``stream``)."""
        out = np.empty(self.shape, self.dtype)
        if self.nbytes:
            self.cuda.memcpy_dtoh_async(out.ctypes.data, self.ptr, self.nbytes, stream)
            self.cuda.stream_synchronize(stream)
        return out

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}, ptr=0x{self.ptr:x})"


class DeviceInput(NamedTuple):
    """What a ``__cuda_array_interface__`` says about a device-resident input (read on every call: kept cheap)."""

    ptr: int
    shape: tuple
    dtype: np.dtype
    stream: int | None


_DTYPES: dict = {}  # typestr → numpy dtype (np.dtype() costs more than a lookup on the hot path)


def device_input(name: str, obj) -> DeviceInput | None:
    """Describe ``obj`` if it exposes ``__cuda_array_interface__`` (CuPy, torch CUDA tensors), else ``None``.

    Raises:
        InputError: the device array is not C-contiguous or has a malformed interface.
    """
    iface = getattr(obj, "__cuda_array_interface__", None)
    if iface is None:
        return None
    try:
        shape = tuple(map(int, iface["shape"]))
        typestr = iface["typestr"]
        dtype = _DTYPES.get(typestr)
        if dtype is None:
            dtype = _DTYPES.setdefault(typestr, np.dtype(typestr))
        ptr = int(iface["data"][0])
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"Input '{name}': malformed __cuda_array_interface__ ({exc})") from exc
    strides = iface.get("strides")
    if strides is not None and tuple(strides) != _c_strides(shape, dtype.itemsize):
        raise InputError(
            f"Input '{name}': the device array is not C-contiguous (strides {tuple(strides)}); "
            f"pass a contiguous one (e.g. tensor.contiguous() or cupy.ascontiguousarray)"
        )
    return DeviceInput(ptr, shape, dtype, iface.get("stream"))


def _c_strides(shape: tuple, itemsize: int) -> tuple:
    strides, step = [], itemsize
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return tuple(reversed(strides))
