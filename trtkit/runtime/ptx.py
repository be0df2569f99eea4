"""CUDA kernels shipped as PTX, loaded through cuda-python's driver API and launched on the runtime's streams.

The driver JIT-compiles the PTX for the GPU it finds (``scripts/make_ptx.py`` makes the shipped files: compute_60,
PTX ISA 7.0, so any driver from R450 on loads them), into the CUDA runtime's primary context: the one TensorRT and
the runner use, so kernels, copies and engines share streams and memory.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from trtkit._lazy import cuda_driver
from trtkit.runtime.cuda import check

BLOCK = 256  # threads a block
MAX_PACKED = 1024  # launches whose packed parameters are kept (a letterbox: two per image size and batch slot)


def grid_for(threads: int, block: int = BLOCK, max_blocks: int | None = None) -> int:
    """Blocks covering ``threads`` threads of ``block`` each (at least one; at most ``max_blocks`` when given, for
    kernels that loop over the rest)."""
    blocks = max(1, -(-int(threads) // block))
    return min(blocks, max_blocks) if max_blocks else blocks


# struct codes of the parameter types, each padded to an 8-byte slot
_CODES = {
    np.dtype(np.uint64): "Q",
    np.dtype(np.int64): "q",
    np.dtype(np.int32): "i4x",
    np.dtype(np.uint32): "I4x",
    np.dtype(np.float32): "f4x",
    np.dtype(np.float64): "d",
}


def kernel_params(args) -> tuple[np.ndarray, np.ndarray]:
    """``cuLaunchKernel``'s ``kernelParams`` for ``args``, a list of ``(value, numpy dtype)`` (64- and 32-bit ints
    and floats): every value in an 8-byte slot of one array, and the array of the slots' addresses. Both must live
    until the launch returns."""
    codes = "".join(_CODES[np.dtype(dtype)] for _, dtype in args)
    values = [float(v) if np.dtype(d).kind == "f" else int(v) for v, d in args]
    slots = np.frombuffer(bytearray(struct.pack("<" + codes, *values)), np.uint64)
    pointers = np.arange(len(args), dtype=np.uint64) * np.uint64(8) + np.uint64(slots.ctypes.data)
    return slots, pointers


class PtxModule:
    """The kernels ``names`` of the PTX file ``path``.

    Args:
        cuda: the :class:`~trtkit.runtime.cuda.Cuda` whose device the kernels run on.
        path: the PTX text file.
        names: the ``extern "C"`` kernels to look up.
        driver: ``cuda.bindings.driver`` (default, imported lazily).

    Raises:
        CudaError: the driver cannot load the PTX or find a kernel (no GPU, or a driver older than R450).
    """

    def __init__(self, cuda, path: Path, names, driver=None):
        if driver is None:
            driver = cuda_driver()
        self._driver = driver
        self.name = Path(path).name
        check(cuda.rt.cudaFree(0), "cudaFree(0)")  # makes the runtime's primary context current on this thread
        image = np.frombuffer(Path(path).read_bytes() + b"\0", dtype=np.uint8)  # NUL-terminated text, by address
        self._module = check(driver.cuModuleLoadData(image.ctypes.data), f"cuModuleLoadData({self.name})")
        self._packed: dict = {}  # (kernel, args) -> kernel_params(args): packing costs more than a lookup
        self.functions = {
            name: check(driver.cuModuleGetFunction(self._module, name.encode()), f"cuModuleGetFunction({name})")
            for name in names
        }

    def launch(self, name: str, grid: int, stream: int, args, *, block: int = BLOCK, shared: int = 0) -> None:
        """Queue kernel ``name`` on ``stream``: ``grid`` blocks of ``block`` threads, ``shared`` bytes of dynamic
        shared memory, ``args`` as for :func:`kernel_params`."""
        key = (name, tuple(args))
        packed = self._packed.get(key)
        if packed is None:
            if len(self._packed) >= MAX_PACKED:
                self._packed.clear()
            packed = self._packed[key] = kernel_params(args)
        check(
            self._driver.cuLaunchKernel(
                self.functions[name],
                grid,
                1,
                1,
                block,
                1,
                1,
                shared,
                self._driver.CUstream(int(stream)),
                packed[1].ctypes.data,
                0,
            ),
            f"cuLaunchKernel({name})",
        )

    def close(self) -> None:
        if self._module is not None:
            check(self._driver.cuModuleUnload(self._module), "cuModuleUnload")
            self._module = None


def load_kernels(cuda, own: str, make):
    """Kernels for ``cuda``'s runtime: the runtime's own when it offers them (a fake's ``cuda.rt.<own>()``, CPU
    tests), else ``make(cuda)`` (the PTX ones).

    Returns:
        ``(kernels, None)``, or ``(None, reason)`` when they cannot load (the caller does the work on the CPU and says
        why): the error's type and message.
    """
    offered = getattr(cuda.rt, own, None)
    if offered is not None:
        return offered(), None
    try:
        return make(cuda), None
    except Exception as exc:  # noqa: BLE001 - any failure means: the CPU path, and say why
        return None, f"{type(exc).__name__}: {exc}"
