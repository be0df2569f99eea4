"""Video frames that stay on the GPU: NVDEC decodes into device memory, the letterbox kernels of
:mod:`trtkit.runtime.letterbox` write each frame's sample straight into a row of a device batch ring, and the
runners bind those rows where they are. The model input never visits the host; only the picture the sinks write
(an encoder on the CPU, drawing) is copied down, into page-locked memory.

    frames = DeviceFrames(cuda)                    # NvdecReader(device_memory=True) owns one
    owned = frames.own(nvdec_batch)                # copies of the decoder's frames, in memory trtkit owns
    pre = DeviceFramePreprocess(cuda, target, kernels)
    meta, picture = pre.letterbox_into(owned[0], ring_row)   # the sample in the row, the picture on the host

Memory comes from :class:`SlotPool` s: a slot goes back to its pool when its array is garbage (a frame leaving the
pipeline), so a pool holds as many slots as frames are in flight, for a run of any length.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable

import numpy as np

from trtkit.errors import InputError


class SlotPool:
    """Buffers of ``nbytes`` each (``alloc(nbytes)`` makes one: a ``DeviceBuffer`` or ``HostBuffer``), lent out
    with :meth:`lend` and given back when the object lent over them is garbage (``weakref.finalize``).

    A slot is reused only once nothing refers to its array any more, so the work that reads it must be done by
    then: the GPU work queued on a slot's memory is synchronized before its array is handed on (see the callers).
    """

    def __init__(self, alloc: Callable, nbytes: int):
        self._alloc, self.nbytes = alloc, int(nbytes)
        self._free: list = []
        # reentrant: a collection inside ``lend`` may run a finalizer that gives a slot back on this thread
        self._lock = threading.RLock()
        self._closed = False
        self.made = 0  # slots allocated so far (the most in use at once)

    def lend(self, make: Callable):
        """``make(slot)`` over a free slot (a new one if none is free); the slot returns when that object dies."""
        with self._lock:
            if self._closed:
                raise InputError("This pool was closed; its pipeline has finished")
            slot = self._free.pop() if self._free else None
        if slot is None:
            slot = self._alloc(self.nbytes)
            with self._lock:
                self.made += 1
        obj = make(slot)
        weakref.finalize(obj, self._give_back, slot).atexit = False
        return obj

    def has_free(self) -> bool:
        """Whether a slot is free now (``lend`` would not allocate)."""
        with self._lock:
            return bool(self._free)

    def _give_back(self, slot) -> None:
        with self._lock:
            if not self._closed:
                self._free.append(slot)
                return
        slot.free()

    def close(self) -> None:
        """Free the free slots now; slots still lent are freed when they come back (idempotent)."""
        with self._lock:
            self._closed, free, self._free = True, self._free, []
        for slot in free:
            slot.free()


def device_view(name: str, image):
    """What describes ``image``'s pixels with ``__cuda_array_interface__``: ``image`` itself (CuPy, torch, trtkit's
    arrays), or the one plane of a PyNvVideoCodec ``DecodedFrame`` (its ``cuda()`` views; the frame itself has
    none).

    Raises:
        InputError: a decoded frame with more than one plane (decode with ``OutputColorType.RGB``).
    """
    if hasattr(image, "__cuda_array_interface__"):
        return image
    planes = getattr(image, "cuda", None)
    if not callable(planes):
        return image
    views = list(planes())
    if len(views) != 1 or not hasattr(views[0], "__cuda_array_interface__"):
        raise InputError(
            f"{name} ({type(image).__name__}) has {len(views)} planes; the GPU path takes one interleaved RGB plane "
            "(PyNvVideoCodec's OutputColorType.RGB)"
        )
    return views[0]


def frame_of(name: str, image):
    """The ``DeviceInput`` of a device-resident ``(H, W, 3)`` uint8 picture.

    Raises:
        InputError: ``image`` is not on the device, not C-contiguous, or not an HxWx3 uint8 picture.
    """
    return _rgb_input(name, image, device_view(name, image))


def _rgb_input(name: str, image, view):
    """``frame_of`` for the view :func:`device_view` gave of ``image`` (asked once per frame)."""
    from trtkit.runtime.buffers import device_input

    dev = device_input(name, view)
    if dev is None:
        raise InputError(f"{name} is a {type(image).__name__}, not a device array (__cuda_array_interface__)")
    if len(dev.shape) != 3 or dev.shape[2] != 3 or dev.dtype != np.uint8 or min(dev.shape) < 1:
        raise InputError(
            f"{name} is {dev.shape} {dev.dtype} on the device; the GPU preprocessing takes HxWx3 uint8 RGB frames "
            "(PyNvVideoCodec's OutputColorType.RGB)"
        )
    return dev


def pitched_frame(name: str, image) -> tuple:
    """``(DeviceInput, row pitch in bytes)`` of a device-resident ``(H, W, 3)`` uint8 picture whose rows may be
    padded (``strides`` of ``(pitch, 3, 1)``, as a decoder's surfaces can be).

    Raises:
        InputError: as :func:`frame_of`, or strides that are not rows of packed RGB pixels.
    """
    from trtkit.runtime.buffers import DeviceInput

    view = device_view(name, image)
    iface = getattr(view, "__cuda_array_interface__", None)
    if isinstance(iface, dict):
        iface = _rows_as_pixels(iface, getattr(image, "shape", None))
    if not isinstance(iface, dict) or iface.get("strides") is None:
        dev = _rgb_input(name, image, view)
        return dev, dev.shape[1] * 3
    strides = iface["strides"]
    shape = tuple(int(d) for d in iface.get("shape", ()))
    if len(shape) != 3 or shape[2] != 3 or iface.get("typestr") != "|u1":
        _rgb_input(name, image, view)  # raises, naming what it is
    pitch, pixel, channel = (int(v) for v in strides)
    if (pixel, channel) != (3, 1) or pitch < shape[1] * 3:
        raise InputError(
            f"{name} has strides {tuple(strides)} for shape {shape}; the GPU path takes rows of packed RGB pixels "
            "(strides (pitch, 3, 1), pitch at least 3 x width)"
        )
    return DeviceInput(int(iface["data"][0]), shape, np.dtype(np.uint8), iface.get("stream")), pitch


def _rows_as_pixels(iface: dict, frame_shape) -> dict:
    """A plane described as ``(H, 3 * W)`` bytes whose frame says it is ``(H, W, 3)``: the same memory as pixels."""
    shape = tuple(int(d) for d in iface.get("shape", ()))
    try:
        frame = tuple(int(d) for d in frame_shape) if frame_shape is not None else ()
    except (TypeError, ValueError):
        return iface
    if len(shape) != 2 or len(frame) != 3 or frame[2] != 3 or (frame[0], frame[1] * 3) != shape:
        return iface
    pitch = int(iface["strides"][0]) if iface.get("strides") else shape[1]
    return {**iface, "shape": frame, "strides": (pitch, 3, 1)}


class _Streamed:
    """A stream of its own, ordered after the stream a device array was made on."""

    def __init__(self, cuda):
        self.cuda = cuda
        self.stream = cuda.stream_create()
        self._event = cuda.event_create(timing=False)

    def after(self, dev) -> None:
        if dev.stream is not None:  # __cuda_array_interface__ v3: the producer's stream
            self.cuda.event_record(self._event, int(dev.stream))
            self.cuda.stream_wait_event(self.stream, self._event)

    def close(self) -> None:
        if self._event is not None:
            self.cuda.stream_synchronize(self.stream)
            self.cuda.event_destroy(self._event)
            self.cuda.stream_destroy(self.stream)
            self._event = None


PINNED_PICTURES_BYTES = 512 << 20  # page-locked pictures at most; past it (many frames in flight) plain memory


class PinnedPictures:
    """Page-locked ``(H, W, 3)`` uint8 host arrays from :class:`SlotPool` s (one per picture size), each slot
    reused once its array is garbage; once ``limit`` bytes are page-locked and all in use, plain numpy arrays (the
    copy into them is slower, but the host's locked memory stays bounded: a pipeline holds 100 and more frames
    in flight at batch 32)."""

    def __init__(self, cuda, limit: int = PINNED_PICTURES_BYTES):
        self.cuda, self.limit = cuda, int(limit)
        self._pools: dict = {}
        self._lock = threading.Lock()  # workers on several lanes take pictures at once

    def take(self, height: int, width: int) -> np.ndarray:
        from trtkit.runtime.buffers import HostBuffer, host_view

        nbytes = height * width * 3
        with self._lock:
            pool = self._pools.get(nbytes)
            if pool is None:
                pool = self._pools[nbytes] = SlotPool(lambda n: HostBuffer(self.cuda, n), nbytes)
            locked = sum(p.made * p.nbytes for p in self._pools.values())
        if not pool.has_free() and locked + nbytes > self.limit:
            return np.empty((height, width, 3), np.uint8)
        return pool.lend(lambda slot: host_view(slot.ptr, nbytes).reshape(height, width, 3))

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()


class DeviceFrames(_Streamed):
    """Copies of decoded frames in device memory trtkit owns, so a frame stays what it was however long it waits
    in a queue (a decoder may reuse its own output surfaces once asked for the next frames); frames with padded
    rows are packed in the copy.

    The frames must be ready in the order of :attr:`stream` (a decoder working on it, or a frame whose
    ``__cuda_array_interface__`` names the stream it was written on); with ``wait_for_device`` every batch waits for
    all work on the GPU first, for frames written on a stream nothing names.

    Args:
        cuda: a :class:`~trtkit.runtime.cuda.Cuda` (the runtime's context on the decoding GPU).
    """

    def __init__(self, cuda):
        super().__init__(cuda)
        self._pools: dict = {}  # frame bytes -> SlotPool
        self._pictures: PinnedPictures | None = None  # made by the first download
        self.wait_for_device = False

    def own(self, frames: list) -> list:
        """Device copies (:class:`~trtkit.runtime.buffers.DeviceArray` s, ready when returned) of ``frames``.

        Raises:
            InputError: a frame is not an HxWx3 uint8 C-contiguous device array.
        """
        from trtkit.runtime.buffers import DeviceArray, DeviceBuffer

        owned = []
        if frames and self.wait_for_device:
            self.cuda.device_synchronize()
        for frame in frames:
            dev, pitch = pitched_frame("A decoded frame", frame)
            height, row = dev.shape[0], dev.shape[1] * 3
            nbytes = height * row
            pool = self._pools.get(nbytes)
            if pool is None:
                pool = self._pools[nbytes] = SlotPool(lambda n: DeviceBuffer(self.cuda, n), nbytes)
            self.after(dev)
            copy = pool.lend(lambda slot, shape=dev.shape: DeviceArray(slot.ptr, shape, np.uint8, slot, self.cuda))
            if pitch == row:
                self.cuda.memcpy_dtod_async(copy.ptr, dev.ptr, nbytes, self.stream)
            else:  # padded rows: packed in the copy
                self.cuda.memcpy2d_dtod_async(copy.ptr, row, dev.ptr, pitch, row, height, self.stream)
            owned.append(copy)
        if owned:
            self.cuda.stream_synchronize(self.stream)
        return owned

    def download(self, owned: list) -> list:
        """Host copies (HxWx3 uint8 numpy arrays, page-locked while :class:`PinnedPictures` allows, ready when
        returned) of frames :meth:`own` made."""
        if self._pictures is None:
            self._pictures = PinnedPictures(self.cuda)
        pictures = []
        for frame in owned:
            picture = self._pictures.take(*frame.shape[:2])
            self.cuda.memcpy_dtoh_async(picture.ctypes.data, frame.ptr, picture.nbytes, self.stream)
            pictures.append(picture)
        if pictures:
            self.cuda.stream_synchronize(self.stream)
        return pictures

    def close(self) -> None:
        super().close()
        for pool in self._pools.values():
            pool.close()
        if self._pictures is not None:
            self._pictures.close()


class _Lane(_Streamed):
    """One stream and the letterbox kernels' buffers on it: a preprocessing worker's own while it uses it."""

    def __init__(self, cuda, target, kernels, norm: dict):
        from trtkit.runtime.letterbox import DeviceLetterbox

        super().__init__(cuda)
        hw = (target.height, target.width)
        self.letterbox = DeviceLetterbox(cuda, self.stream, hw, target.dtype, kernels, **norm)

    def close(self) -> None:
        if self._event is not None:
            self.letterbox.close()  # waits for its stream, which the base class then destroys
        super().close()


class DeviceFramePreprocess:
    """The pipeline's preprocessing on the GPU: the letterbox kernels (keep the aspect ratio, pad with gray 114, RGB
    scaled by 1/255, then ``norm``; Pillow's bilinear filter exactly, as ``ImagePreprocess(reducing_gap=None)``) write
    each frame's sample into its row of a device :class:`~trtkit.pipeline.batching.BatchRing`, in a stream synchronized
    once per frame. Frames in device memory (NVDEC) are read where they are and their pictures copied to
    page-locked host memory for the sinks; host pictures (PyAV, image folders) go up once (``preprocess="gpu"``:
    the CPU is left the decoding and the encoding). Each of ``lanes`` workers takes a stream of its own at a time,
    so one frame's copies and kernels overlap another's.

    Args:
        cuda: the runners' :class:`~trtkit.runtime.cuda.Cuda`.
        target: the engine's :class:`~trtkit.pipeline.preprocess.ImageInput` (3 channels, float32 or float16 NCHW,
            or uint8 NHWC).
        kernels: :class:`~trtkit.runtime.letterbox.LetterboxKernels` or a fake with the same methods (or a callable
            making one per lane).
        meta: turns the letterbox's :class:`~trtkit.detection.letterbox.LetterboxMeta` into the ``meta`` the
            postprocessing expects (default: that of :class:`~trtkit.pipeline.preprocess.ImagePreprocess`).
        pictures: copy each frame's picture to the host (for video/image sinks and drawing); False leaves the
            device frame as the frame's image.
        lanes: streams (and kernel buffers) for that many workers at once.
        norm: ``mean`` and ``std`` per channel (:class:`~trtkit.pipeline.api.Processing`'s ``normalize``).

    Raises:
        InputError: the input is not a 3-channel float32/float16 or uint8 image input, or ``lanes`` is below 1.
    """

    device = True  # the pipeline gives it rows of a device ring

    def __init__(self, cuda, target, kernels, *, meta=None, pictures: bool = True, lanes: int = 1, norm=None):
        import queue

        unfit = _unfit(target)
        if unfit:
            raise InputError(f"The GPU preprocessing cannot fill this input: {unfit}")
        if isinstance(lanes, bool) or not isinstance(lanes, int) or lanes < 1:
            raise InputError(f"lanes={lanes!r}: give 1 or more (streams for that many workers at once)")
        self.cuda, self.target, self.pictures = cuda, target, pictures
        self.shape = target.sample_shape
        self._meta = meta or image_preprocess_meta
        self._pictures = PinnedPictures(cuda)
        self._lanes: list = []
        self._free: queue.Queue = queue.Queue()
        try:
            for _ in range(lanes):
                lane = _Lane(cuda, target, kernels() if callable(kernels) else kernels, norm or {})
                self._lanes.append(lane)
                self._free.put(lane)
        except BaseException:
            self.close()
            raise

    def letterbox_into(self, image, out) -> tuple:
        """Write the sample of ``image`` into ``out`` (a DeviceArray of ``shape`` and the input's dtype, a ring row);
        returns ``(meta, picture)``, both ready when this returns. A device frame is letterboxed where it is and
        ``picture`` is its copy in host memory (``image`` itself without ``pictures``); a host picture (HxWx3 uint8,
        a decoded image or PyAV frame) goes up once and is its own ``picture``.

        Raises:
            InputError: ``image`` is not an HxWx3 uint8 picture, or ``out`` is not a sample of this input.
        """
        if tuple(out.shape) != self.shape or np.dtype(out.dtype) != np.dtype(self.target.dtype):
            raise InputError(
                f"The sample buffer is {tuple(out.shape)} {np.dtype(out.dtype)}; input '{self.target.name}' takes "
                f"{self.shape} {self.target.dtype}"
            )
        if not hasattr(image, "__cuda_array_interface__"):
            return self._from_host(image, out)
        dev = frame_of("The frame", image)
        height, width = dev.shape[:2]
        picture = image
        lane = self._free.get()
        try:
            lane.after(dev)
            geometry = lane.letterbox.into_device(dev.ptr, width, height, out.ptr)
            if self.pictures:
                picture = self._pictures.take(height, width)
                self.cuda.memcpy_dtoh_async(picture.ctypes.data, dev.ptr, picture.nbytes, lane.stream)
            self.cuda.stream_synchronize(lane.stream)
        finally:
            self._free.put(lane)
        return self._meta(geometry), picture

    def _from_host(self, image, out) -> tuple:
        from trtkit.pipeline.preprocess import rgb_picture

        array = rgb_picture(image)
        lane = self._free.get()
        try:
            geometry = lane.letterbox.into_host(array, out.ptr)
            self.cuda.stream_synchronize(lane.stream)  # the sample is in its row (the ring's rows carry no stream)
        finally:
            self._free.put(lane)
        return self._meta(geometry), image

    def close(self) -> None:
        """Free the lanes' streams and buffers and the pinned pictures not in use (idempotent; after the workers)."""
        for lane in self._lanes:
            lane.close()
        self._pictures.close()


def image_preprocess_meta(geometry) -> dict:
    """A letterbox's geometry as :class:`~trtkit.pipeline.preprocess.ImagePreprocess` gives it (its ``meta``)."""
    return {
        "scale": geometry.scale,
        "pad": (geometry.pad_x, geometry.pad_y),
        "source_size": (geometry.width, geometry.height),
    }


def _unfit(target) -> str | None:
    """Why the GPU letterbox cannot fill the image input ``target`` (None: it can)."""
    if target.channels == 3 and target.dtype in ("float32", "float16", "uint8"):
        return None
    return (
        f"input '{target.name}' has {target.channels} channel(s) of {target.dtype}; the GPU letterbox fills "
        "3-channel float32/float16 (NCHW) and uint8 (NHWC) inputs"
    )


def device_preprocess(runner, target, **options):
    """The GPU preprocessing for ``runner``'s image input ``target``, or why there is none (``options``: those of
    :class:`DeviceFramePreprocess`).

    Returns:
        ``(DeviceFramePreprocess, None)`` or ``(None, reason)`` (the kernels do not load, the input is not one
        they fill); the caller copies the frames to the host and preprocesses there, saying why.
    """
    from trtkit.runtime.letterbox import load_kernels

    if getattr(runner, "cuda", None) is None:
        return None, "the engine does not run through TrtRunners"
    unfit = _unfit(target)
    if unfit:
        return None, unfit
    kernels, reason = load_kernels(runner.cuda)
    if kernels is None:
        return None, reason
    made = [kernels]  # the first lane's; each further lane loads its own

    def per_lane():
        return made.pop() if made else load_kernels(runner.cuda)[0]

    return DeviceFramePreprocess(runner.cuda, target, per_lane, **options), None


class FrameDownload(_Streamed):
    """Copies device frames to page-locked host memory (for a preprocessing that runs on the CPU), at most
    ``pinned_limit`` bytes of it (see :class:`PinnedPictures`)."""

    def __init__(self, cuda, pinned_limit: int = PINNED_PICTURES_BYTES):
        super().__init__(cuda)
        self._pictures = PinnedPictures(cuda, pinned_limit)
        self._lock = threading.Lock()

    def __call__(self, image) -> np.ndarray:
        """``image`` (an HxWx3 uint8 device frame) as a host array, ready when returned; a host array passes as it
        is."""
        if not hasattr(image, "__cuda_array_interface__"):
            return image
        dev = frame_of("The frame", image)
        with self._lock:
            picture = self._pictures.take(*dev.shape[:2])
            self.after(dev)
            self.cuda.memcpy_dtoh_async(picture.ctypes.data, dev.ptr, picture.nbytes, self.stream)
            self.cuda.stream_synchronize(self.stream)
        return picture

    def close(self) -> None:
        with self._lock:
            super().close()
            self._pictures.close()
