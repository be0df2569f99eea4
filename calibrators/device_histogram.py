"""Calibration histograms computed on the GPU, where the activations already are.

Copying every activation of every calibration batch to the host and binning it there makes calibration CPU-bound.
Here two small CUDA kernels (``kernels/histogram.cu``, shipped as PTX) do it on the device: per batch, one finds each
tensor's max ``|x|``, the host grows each :class:`~calibrators.histogram.Histogram`'s range to it, and the other bins
the tensor at that range. Only the maxima and the bin counts travel to the host, where they join the host histograms
with the CPU path's binning, bit for bit.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from calibrators.histogram import HistogramSet
from trtkit.errors import CudaError
from trtkit.runtime.buffers import DeviceArray, DeviceBuffer
from trtkit.runtime.ptx import PtxModule, grid_for
from trtkit.runtime.ptx import load_kernels as load_ptx_kernels

logger = logging.getLogger("trtkit")

PTX = Path(__file__).with_name("kernels") / "histogram.ptx"
BLOCK = 256  # threads a block
MAX_BLOCKS = 1024  # grid-stride loops beyond this


class PtxKernels:
    """The kernels of ``kernels/histogram.ptx``, loaded through cuda-python's driver API into the CUDA runtime's
    context (the one TensorRT and the runner use).

    Args:
        cuda: the :class:`~trtkit.runtime.cuda.Cuda` whose device the kernels run on.
        driver: ``cuda.bindings.driver`` (default, imported lazily).

    Raises:
        CudaError: the driver cannot load the PTX (no GPU, or a driver older than R450).
    """

    def __init__(self, cuda, driver=None):
        self._module = PtxModule(cuda, PTX, ("absmax_f32", "histogram_f32"), driver)

    def absmax(self, ptr: int, n: int, out: int, stream: int) -> None:
        """``*out = max(*out, float bits of max |x|)`` over the ``n`` float32 values at ``ptr`` (finite ones)."""
        self._launch("absmax_f32", n, 0, stream, [(ptr, np.uint64), (n, np.uint64), (out, np.uint64)])

    def histogram(self, ptr: int, n: int, scale: np.float32, counts: int, bins: int, stream: int) -> None:
        """``counts[b] += #{x : min(int(|x| * scale), bins - 1) == b}`` over finite ``x`` (``counts``: uint64)."""
        self._launch(
            "histogram_f32",
            n,
            4 * bins,
            stream,
            [(ptr, np.uint64), (n, np.uint64), (scale, np.float32), (counts, np.uint64), (bins, np.int32)],
        )

    def _launch(self, name: str, n: int, shared: int, stream: int, args: list) -> None:
        self._module.launch(name, grid_for(n, BLOCK, MAX_BLOCKS), stream, args, block=BLOCK, shared=shared)

    def close(self) -> None:
        self._module.close()


class DeviceHistograms:
    """Adds batches of device tensors to a :class:`~calibrators.histogram.HistogramSet`, binned on the GPU.

    Args:
        cuda: a :class:`~trtkit.runtime.cuda.Cuda` (device scratch, copies, synchronization).
        kernels: :class:`PtxKernels`, or a fake with the same two methods (CPU tests).
        bins: bins of each histogram (the set's).
    """

    def __init__(self, cuda, kernels, bins: int):
        self.cuda, self.kernels, self.bins = cuda, kernels, bins
        self._capacity = 0
        self._amax: Any = None  # DeviceBuffer scratch, made for the largest set of tensors seen
        self._counts: Any = None
        self._stream: int | None = None  # the last stream that used the scratch

    def update(self, hists: HistogramSet, tensors: dict, stream: int) -> None:
        """Add one batch: ``tensors`` maps a name to ``(device pointer, element count)`` of float32 values, ready in
        ``stream`` order. Returns when the batch is in ``hists`` (two synchronizations of ``stream``)."""
        work = [(name, ptr, n) for name, (ptr, n) in tensors.items() if n]
        if not work:
            return
        self._reserve(len(work))
        self._stream = stream
        self.cuda.memset_async(self._amax.ptr, 0, self._amax.nbytes, stream)
        for t, (_, ptr, n) in enumerate(work):
            self.kernels.absmax(ptr, n, self._amax.ptr + 4 * t, stream)
        maxes = self._fetch(self._amax, np.uint32, len(work), stream).view(np.float32).astype(np.float64)

        self.cuda.memset_async(self._counts.ptr, 0, self._counts.nbytes, stream)
        for t, (name, ptr, n) in enumerate(work):
            scale = hists.histogram(name).scale_for(maxes[t])
            self.kernels.histogram(ptr, n, scale, self._counts.ptr + 8 * self.bins * t, self.bins, stream)
        counts = self._fetch(self._counts, np.uint64, len(work) * self.bins, stream).reshape(len(work), self.bins)
        for t, (name, _, _) in enumerate(work):
            hists.histogram(name).add_counts(maxes[t], counts[t].astype(np.float64))

    def _fetch(self, buf, dtype, count: int, stream: int) -> np.ndarray:
        """The first ``count`` values of ``buf``, copied to the host once ``stream`` reaches this point."""
        return DeviceArray(buf.ptr, (count,), dtype, cuda=self.cuda).to_host(stream)

    def _reserve(self, tensors: int) -> None:
        if tensors <= self._capacity:
            return
        self.close()
        self._amax = DeviceBuffer(self.cuda, 4 * tensors)
        self._counts = DeviceBuffer(self.cuda, 8 * self.bins * tensors)
        self._capacity = tensors

    def close(self) -> None:
        """Free the device scratch once the work queued on it is done (also after a failed update); the kernels'
        module stays loaded."""
        if self._stream is not None and self._amax is not None:
            try:
                self.cuda.stream_synchronize(self._stream)
            except CudaError:
                pass  # a broken context: freeing reports it, or the next CUDA call does
        for buf in (self._amax, self._counts):
            if buf is not None:
                buf.free()
        self._amax = self._counts = None
        self._capacity = 0


def load_kernels(cuda):
    """The histogram kernels for ``cuda``'s runtime: its own (a fake's) when it has them, else :class:`PtxKernels`.

    Returns:
        ``(kernels, None)``, or ``(None, reason)`` when the GPU path is unavailable (the caller bins on the CPU).
    """
    return load_ptx_kernels(cuda, "histogram_kernels", PtxKernels)
