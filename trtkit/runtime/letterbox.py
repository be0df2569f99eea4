"""The detection letterbox on the GPU: decoded pixels go to the device once and two small kernels resize, pad and
convert them straight into the engine's input batch, in the runner's stream.

On the CPU the letterbox is the wall of a batch-1 detector: Pillow's resize of one image costs more than the engine.
Here the host copies each ``(H, W, 3)`` uint8 image into page-locked staging (one host-to-device copy for the
batch) and queues, per image, ``resample_pass`` (the first of Pillow's two bilinear passes) and ``letterbox_finish``
(the second pass, the padding, and the uint8 NHWC / float NCHW conversion into the image's slot of the batch)
of ``kernels/letterbox.cu``. The pixels are Pillow's exactly: the kernels run Pillow's integer arithmetic on taps
the host computes as Pillow does (:mod:`trtkit.detection.pillow_resample`, cached per image size), in the pass order
this Pillow uses. The batch is a :class:`~trtkit.runtime.buffers.DeviceArray` the runner binds where it is (a CUDA
graph per batch size, with its address); queued in the runner's stream, the kernels need no synchronization.

:func:`device_letterbox` gives one for a runner's image input, or the reason there is none (no GPU kernels, an
input it cannot fill), so callers keep the numpy letterbox and say why.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trtkit.detection.letterbox import IDENTITY, LetterboxMeta, channel_norm, placement, rgb_array
from trtkit.detection.pillow_resample import Taps, cached_pass_order, coefficients
from trtkit.errors import InputError
from trtkit.runtime.buffers import DeviceArray, DeviceBuffer, HostBuffer
from trtkit.runtime.ptx import BLOCK, PtxModule, grid_for
from trtkit.runtime.ptx import load_kernels as load_ptx_kernels

logger = logging.getLogger("trtkit")

PTX = Path(__file__).with_name("kernels") / "letterbox.ptx"
# (input dtype, layout) -> the kernel's output format (letterbox.cu's OUT_* values)
FORMATS = {("uint8", "NHWC"): 0, ("float32", "NCHW"): 1, ("float16", "NCHW"): 2}
MAX_PLANS = 256  # image sizes whose taps stay on the device (a photo folder: a few dozen)
SCALE = np.float32(1.0 / 255.0)  # what the CPU letterbox multiplies by: float32(x) * float32(1/255)


@dataclass(frozen=True)
class Pass:
    """One kernel launch's resize: along columns (``horizontal``) or rows, with these taps."""

    horizontal: bool
    taps: Taps


@dataclass(frozen=True)
class Plan:
    """How one image size is letterboxed: where it goes, the two passes in this Pillow's order, the first pass's
    output (``tmp_rows`` x ``tmp_cols``), and each launch's blocks."""

    meta: LetterboxMeta
    new_size: tuple[int, int]  # (new_w, new_h)
    first: Pass
    second: Pass
    tmp_rows: int
    tmp_cols: int
    first_grid: int
    finish_grid: int


def plan(width: int, height: int, size: tuple[int, int], order: str) -> Plan:
    """The plan of a ``width`` x ``height`` image in an input of ``size = (H, W)``, passes in ``order`` (``"hv"``
    or ``"vh"``; ``""``, a pair whose order Pillow's output does not tell, runs ``"hv"``)."""
    meta, (new_w, new_h) = placement(width, height, size)
    horizontal, vertical = Pass(True, coefficients(width, new_w)), Pass(False, coefficients(height, new_h))
    if order == "vh":
        first, second, tmp_rows, tmp_cols = vertical, horizontal, new_h, width
    else:
        first, second, tmp_rows, tmp_cols = horizontal, vertical, height, new_w
    return Plan(
        meta,
        (new_w, new_h),
        first,
        second,
        tmp_rows,
        tmp_cols,
        grid_for(tmp_rows * tmp_cols),
        grid_for(size[0] * size[1]),
    )


class LetterboxKernels:
    """The kernels of ``kernels/letterbox.ptx`` (the CUDA runtime's context, through cuda-python's driver API).

    Raises:
        CudaError: the driver cannot load the PTX (no GPU, or a driver older than R450).
    """

    def __init__(self, cuda, driver=None):
        self._module = PtxModule(cuda, PTX, ("resample_pass", "letterbox_finish"), driver)

    def resample_pass(
        self,
        src: int,
        src_cols: int,
        dst: int,
        rows: int,
        cols: int,
        taps,
        ksize: int,
        horizontal: bool,
        grid: int,
        stream: int,
    ) -> None:
        """The first pass: ``src`` (``src_cols`` wide) into ``dst`` (``rows`` x ``cols``); ``taps``: the device
        addresses of the first/lengths/weights tables."""
        args = [(src, np.uint64), (src_cols, np.int32), (dst, np.uint64), (rows, np.int32), (cols, np.int32)]
        args += [(t, np.uint64) for t in taps] + [(ksize, np.int32), (int(horizontal), np.int32)]
        self._module.launch("resample_pass", grid, stream, args, block=BLOCK)

    def letterbox_finish(
        self,
        tmp: int,
        tmp_cols: int,
        taps,
        ksize: int,
        horizontal: bool,
        region,
        out_hw,
        pad_value: int,
        out: int,
        fmt: int,
        scale,
        norm,
        grid: int,
        stream: int,
    ) -> None:
        """The second pass, the padding and the conversion into one image's slot ``out``; ``region``:
        ``(new_w, new_h, pad_x, pad_y)``, ``out_hw``: the input's ``(H, W)``, ``norm``: ``(mean, std)`` per channel."""
        args = [(tmp, np.uint64), (tmp_cols, np.int32)] + [(t, np.uint64) for t in taps]
        args += [(ksize, np.int32), (int(horizontal), np.int32)] + [(v, np.int32) for v in region]
        args += [
            (out_hw[0], np.int32),
            (out_hw[1], np.int32),
            (pad_value, np.int32),
            (out, np.uint64),
            (fmt, np.int32),
            (np.float32(scale), np.float32),
        ] + [(np.float32(v), np.float32) for values in norm for v in values]
        self._module.launch("letterbox_finish", grid, stream, args, block=BLOCK)

    def close(self) -> None:
        self._module.close()


class _DevicePlan:
    """A plan with its taps on the device: one buffer holding both passes' tables."""

    def __init__(self, cuda, stream: int, p: Plan):
        self.plan = p
        tables = [
            p.first.taps.first,
            p.first.taps.lengths,
            p.first.taps.weights.reshape(-1),
            p.second.taps.first,
            p.second.taps.lengths,
            p.second.taps.weights.reshape(-1),
        ]
        host = np.concatenate([t.astype(np.int32, copy=False) for t in tables])
        self.buffer = DeviceBuffer(cuda, host.nbytes)
        cuda.memcpy_htod_async(self.buffer.ptr, host.ctypes.data, host.nbytes, stream)
        cuda.stream_synchronize(stream)  # `host` is freed on return; this happens once per image size
        offsets = np.cumsum([0] + [t.size * 4 for t in tables])
        self.first_taps = tuple(self.buffer.ptr + int(o) for o in offsets[0:3])
        self.second_taps = tuple(self.buffer.ptr + int(o) for o in offsets[3:6])


class DeviceLetterbox:
    """Letterbox images into a device batch for one engine input, in the runner's stream.

    Args:
        cuda: the runner's :class:`~trtkit.runtime.cuda.Cuda`.
        stream: the runner's stream (the kernels run before the engine in it).
        size: the input's ``(H, W)``.
        dtype: the input's dtype: uint8 (layout NHWC: an engine built with ``input_uint8_nhwc``), float32 or float16
            (NCHW, values scaled by 1/255).
        kernels: :class:`LetterboxKernels`, or a fake with the same two methods (CPU tests).
        pad_value: padding, in 0..255 pixel units.
        mean, std: per channel, after the scale, as :class:`trtkit.detection.Letterbox` (float inputs only).

    ``letterbox(images)`` takes pillow images, HWC uint8 RGB arrays or image paths and returns ``(batch, metas)``
    like :class:`trtkit.detection.Letterbox`, the batch a :class:`DeviceArray` valid until the next call (one
    buffer, reused); :meth:`into_device` letterboxes an image that is already on the device (a decoded video frame)
    into a given sample; :meth:`close` frees the device and pinned memory.

    Raises:
        InputError: ``dtype`` is not one of those.
    """

    where = "gpu"

    def __init__(
        self, cuda, stream: int, size, dtype, kernels, *, pad_value: int = 114, mean=IDENTITY[0], std=IDENTITY[1]
    ):
        self.cuda, self.stream, self.kernels = cuda, int(stream), kernels
        self.norm = channel_norm(dtype, mean, std)
        self.size = (int(size[0]), int(size[1]))
        self.dtype = np.dtype(dtype)
        self.layout = "NHWC" if self.dtype == np.uint8 else "NCHW"
        fmt = FORMATS.get((self.dtype.name, self.layout))
        if fmt is None:
            raise InputError(f"The GPU letterbox fills uint8 NHWC, float32 or float16 NCHW inputs; not {self.dtype}.")
        self.format = fmt
        self.pad_value = int(round(pad_value))
        self._plans: dict = {}
        self._staging: HostBuffer | None = None
        self._src: DeviceBuffer | None = None
        self._tmp: DeviceBuffer | None = None
        self._out: DeviceBuffer | None = None
        self._copied = cuda.event_create(timing=False)  # the staging's last copy to the device
        self._pending = False

    @property
    def image_bytes(self) -> int:
        return self.size[0] * self.size[1] * 3 * self.dtype.itemsize

    def _batch_shape(self, n: int) -> tuple:
        h, w = self.size
        return (n, h, w, 3) if self.layout == "NHWC" else (n, 3, h, w)

    def __call__(self, images) -> tuple[DeviceArray, list[LetterboxMeta]]:
        arrays = [np.ascontiguousarray(rgb_array(image)) for image in images]
        self._out = self._grow(self._out, self.image_bytes * len(arrays))
        metas = self._upload_into(arrays, [self._out.ptr + i * self.image_bytes for i in range(len(arrays))])
        batch = DeviceArray(self._out.ptr, self._batch_shape(len(arrays)), self.dtype, owner=self, cuda=self.cuda)
        return batch, metas

    def into_host(self, image, out: int) -> LetterboxMeta:
        """Letterbox one host image (as :meth:`__call__` takes them) into the sample at ``out`` (``image_bytes``,
        the input's layout and dtype), queued in the stream; returns the geometry. The image goes up in one
        host-to-device copy straight from its own memory (CUDA stages pageable memory inside the call, which
        releases the GIL; no copy into the pinned staging under it), so it may change once this returns."""
        array = np.ascontiguousarray(rgb_array(image))
        dp = self._plan(array.shape[1], array.shape[0])
        self._src = self._grow(self._src, array.nbytes)
        self._tmp = self._grow(self._tmp, dp.plan.tmp_rows * dp.plan.tmp_cols * 3)
        self.cuda.memcpy_htod_async(self._src.ptr, array.ctypes.data, array.nbytes, self.stream)
        self._launch(dp, self._src.ptr, array.shape[1], int(out))
        return dp.plan.meta

    def _upload_into(self, arrays: list, outs: list) -> list:
        """Stage ``arrays`` (contiguous HWC uint8) in pinned memory, copy them to the device in one transfer,
        letterbox each into ``outs``."""
        plans = [self._plan(a.shape[1], a.shape[0]) for a in arrays]
        total = sum(a.nbytes for a in arrays)
        self._staging = self._grow_host(self._staging, total)
        self._src = self._grow(self._src, total)
        self._tmp = self._grow(self._tmp, max(p.plan.tmp_rows * p.plan.tmp_cols * 3 for p in plans))
        offset = 0
        offsets = []
        for a in arrays:
            self._staging.array[offset : offset + a.nbytes] = a.reshape(-1)
            offsets.append(offset)
            offset += a.nbytes
        self.cuda.memcpy_htod_async(self._src.ptr, self._staging.ptr, total, self.stream)
        self.cuda.event_record(self._copied, self.stream)
        self._pending = True
        for a, dp, at, out in zip(arrays, plans, offsets, outs):
            self._launch(dp, self._src.ptr + at, a.shape[1], out)
        return [dp.plan.meta for dp in plans]

    def into_device(self, src: int, width: int, height: int, out: int) -> LetterboxMeta:
        """Letterbox one ``height`` x ``width`` x 3 uint8 RGB image already in device memory at ``src`` (C-contiguous)
        into the sample at ``out`` (``image_bytes``, the input's layout and dtype), queued in the stream: no host
        memory touched. ``src`` must stay unchanged until the stream has run the kernels; returns the geometry."""
        dp = self._plan(int(width), int(height))
        self._tmp = self._grow(self._tmp, dp.plan.tmp_rows * dp.plan.tmp_cols * 3)
        self._launch(dp, int(src), int(width), int(out))
        return dp.plan.meta

    def _launch(self, dp: _DevicePlan, src: int, src_cols: int, out: int) -> None:
        p, tmp = dp.plan, self._tmp.ptr  # type: ignore[union-attr]
        self.kernels.resample_pass(
            src,
            src_cols,
            tmp,
            p.tmp_rows,
            p.tmp_cols,
            dp.first_taps,
            p.first.taps.ksize,
            p.first.horizontal,
            p.first_grid,
            self.stream,
        )
        region = (p.new_size[0], p.new_size[1], p.meta.pad_x, p.meta.pad_y)
        self.kernels.letterbox_finish(
            tmp,
            p.tmp_cols,
            dp.second_taps,
            p.second.taps.ksize,
            p.second.horizontal,
            region,
            self.size,
            self.pad_value,
            out,
            self.format,
            SCALE,
            self.norm,
            p.finish_grid,
            self.stream,
        )

    def _plan(self, width: int, height: int) -> _DevicePlan:
        key = (width, height)
        found = self._plans.get(key)
        if found is None:
            if len(self._plans) >= MAX_PLANS:
                self._free_plans()
            _, new_size = placement(width, height, self.size)
            changes_both = new_size[0] != width and new_size[1] != height
            order = cached_pass_order((width, height), new_size) if changes_both else "hv"
            found = self._plans[key] = _DevicePlan(self.cuda, self.stream, plan(width, height, self.size, order))
        return found

    def _grow(self, buf: DeviceBuffer | None, nbytes: int) -> DeviceBuffer:
        if buf is not None and buf.nbytes >= nbytes:
            return buf
        if buf is not None:
            self.cuda.stream_synchronize(self.stream)  # queued kernels may still use it
            buf.free()
        return DeviceBuffer(self.cuda, max(nbytes, 2 * buf.nbytes if buf is not None else nbytes))

    def _grow_host(self, buf: HostBuffer | None, nbytes: int) -> HostBuffer:
        if self._pending:
            self.cuda.event_synchronize(self._copied)  # the last batch has left the staging
            self._pending = False
        if buf is not None and buf.nbytes >= nbytes:
            return buf
        if buf is not None:
            buf.free()
        return HostBuffer(self.cuda, max(nbytes, 2 * buf.nbytes if buf is not None else nbytes))

    def _free_plans(self) -> None:
        self.cuda.stream_synchronize(self.stream)
        for dp in self._plans.values():
            dp.buffer.free()
        self._plans.clear()

    def close(self) -> None:
        """Free the device and pinned memory once the queued work is done (idempotent)."""
        if self._copied is None:
            return
        self._free_plans()
        for buf in (self._staging, self._src, self._tmp, self._out):
            if buf is not None:
                buf.free()
        self._staging = self._src = self._tmp = self._out = None
        self.cuda.event_destroy(self._copied)
        self._copied = None


def load_kernels(cuda):
    """The letterbox kernels for ``cuda``'s runtime: its own (a fake's) when it has them, else
    :class:`LetterboxKernels`; ``(kernels, None)`` or ``(None, reason)``."""
    kernels, reason = load_ptx_kernels(cuda, "letterbox_kernels", LetterboxKernels)
    return kernels, None if reason is None else f"the GPU kernels cannot load ({reason})"


def device_letterbox(runner, input_name: str | None = None, **norm):
    """A :class:`DeviceLetterbox` filling ``runner``'s image input (its only input when ``input_name`` is None),
    in the runner's stream; ``norm``: its ``mean`` and ``std``.

    Returns:
        ``(letterbox, None)``, or ``(None, reason)`` when the input is not one it fills or the kernels cannot load
        (the caller letterboxes on the CPU and says why).
    """
    specs = [s for s in getattr(runner, "input_specs", ()) if input_name is None or s.name == input_name]
    if getattr(runner, "stream", None) is None or getattr(runner, "cuda", None) is None:
        return None, "the model does not run through an active TrtRunner"
    if len(specs) != 1:
        return None, f"the engine has {len(specs)} inputs named {input_name or '(any)'}; the GPU letterbox fills one"
    spec = specs[0]
    dtype = np.dtype(spec.dtype)
    shape = tuple(int(d) for d in spec.shape)  # -1: dynamic
    layout = "NHWC" if dtype == np.uint8 else "NCHW"
    hw = shape[1:3] if layout == "NHWC" else shape[2:4]
    channels = shape[3] if layout == "NHWC" else shape[1]
    if (dtype.name, layout) not in FORMATS or len(shape) != 4 or channels != 3 or min(hw) < 1:
        return None, (
            f"input '{spec.name}' ({dtype} {shape}) is not a uint8 NHWC or float NCHW 3-channel image input "
            "with a fixed height and width"
        )
    kernels, reason = load_kernels(runner.cuda)
    if kernels is None:
        return None, reason
    return DeviceLetterbox(runner.cuda, runner.stream, (int(hw[0]), int(hw[1])), dtype, kernels, **norm), None
