"""The inference stage: frames gathered into batches (up to the engine's batch, waiting at most ``max_wait_s`` for
a batch to fill), each batch started with ``infer_async`` and collected once later batches are under way.

With a :class:`~trtkit.runtime.pool.RunnerPool` of ``n`` runners, up to ``n`` batches are in flight: the copies and
compute of one overlap the gathering of the next and, through the queues, every CPU stage.
"""

from __future__ import annotations

import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from trtkit.errors import InputError
from trtkit.pipeline.stages import END, Aborted, Channel
from trtkit.pipeline.stats import GpuTimeline, StageTimer


@dataclass(frozen=True)
class BatchPlan:
    """How frames become engine calls.

    Attributes:
        input_name: the engine input the samples go to.
        max_batch: most frames per call (the profile's max batch).
        min_batch: fewest frames per call the engine takes; a smaller last batch is padded with zeros up to it
            (the padding's outputs are dropped).
        max_wait_s: how long a started batch waits for more frames before it is sent as it is.
        in_flight: batches started before the oldest is collected (the number of runners in the pool).
        fill_threads: threads copying the samples into a batch (numpy copies outside the GIL, so a large batch
            fills in a fraction of the time one thread takes); 1: the inference thread alone.
    """

    input_name: str
    max_batch: int
    min_batch: int = 1
    max_wait_s: float = 0.005
    in_flight: int = 2
    fill_threads: int = 4

    def __post_init__(self):
        if not 1 <= self.min_batch <= self.max_batch:
            raise InputError(
                f"Batch sizes must satisfy 1 <= min_batch <= max_batch; got min {self.min_batch}, max {self.max_batch}"
            )
        if self.fill_threads < 1:
            raise InputError(f"fill_threads must be at least 1, not {self.fill_threads}")
        if self.max_wait_s < 0:
            raise InputError(f"max_wait_s must be >= 0 seconds, not {self.max_wait_s}")


def batch_shape(frames: list, plan: BatchPlan) -> tuple:
    """The shape of the batch of ``frames``: their sample shape, at least ``plan.min_batch`` of them."""
    return (max(len(frames), plan.min_batch), *np.shape(frames[0].sample))


def fill_batch(batch: np.ndarray, frames: list, pool=None, threads: int = 1) -> np.ndarray:
    """Put the samples of ``frames`` in ``batch`` (zeros in the rows beyond them), in ``threads`` contiguous runs
    of rows on ``pool`` (a thread pool) when there are at least two rows per thread; returns ``batch``."""

    def rows(start: int, stop: int) -> None:
        for i in range(start, stop):
            batch[i] = frames[i].sample

    n = len(frames)
    if pool is None or threads < 2 or n < 2 * threads:
        rows(0, n)
    else:
        bounds = [n * k // threads for k in range(threads + 1)]
        for future in [pool.submit(rows, a, b) for a, b in zip(bounds, bounds[1:])]:
            future.result()
    batch[n:] = 0
    return batch


def stack_samples(frames: list, plan: BatchPlan) -> np.ndarray:
    """The samples of ``frames`` as one new batch array, padded with zeros up to ``plan.min_batch``."""
    return fill_batch(np.empty(batch_shape(frames, plan), dtype=np.asarray(frames[0].sample).dtype), frames)


class DeviceBatches:
    """Batches of device-resident samples (anything with ``__cuda_array_interface__``: NVDEC frames preprocessed
    on the GPU, CuPy arrays, torch CUDA tensors) assembled on the GPU: one buffer per runner, each sample copied
    device to device into its row on the runner's stream, after the stream that produced it. No host round trip.
    """

    def __init__(self, plan: BatchPlan):
        self.plan = plan
        self._buffers: dict = {}  # id(runner) -> (cuda, ptr, nbytes)
        self._events: dict = {}  # id(runner) -> event ordering its stream after a producer's

    def batch(self, runner, frames: list):
        """A :class:`~trtkit.runtime.buffers.DeviceArray` holding the samples of ``frames`` (zeros beyond them).

        Raises:
            InputError: a sample's shape or dtype differs from the first one's, or it is not C-contiguous.
        """
        from trtkit.runtime.buffers import DeviceArray

        name, cuda = self.plan.input_name, runner.cuda
        first = _on_device(name, frames[0])
        row = int(np.prod(first.shape, dtype=np.int64)) * first.dtype.itemsize
        shape = (max(len(frames), self.plan.min_batch), *first.shape)
        ptr = self._buffer(runner, row * max(self.plan.max_batch, self.plan.min_batch))
        for i, frame in enumerate(frames):
            dev = _on_device(name, frame)
            if (dev.shape, dev.dtype) != (first.shape, first.dtype):
                raise InputError(
                    f"Frame {frame.index}: its sample is {dev.shape} {dev.dtype}, the batch's first "
                    f"frame's {first.shape} {first.dtype}: every sample must match"
                )
            if dev.stream is not None:
                self._wait_for(runner, int(dev.stream))
            cuda.memcpy_dtod_async(ptr + i * row, dev.ptr, row, runner.stream)
        if shape[0] > len(frames):
            cuda.memset_async(ptr + len(frames) * row, 0, (shape[0] - len(frames)) * row, runner.stream)
        return DeviceArray(ptr, shape, first.dtype, owner=self, cuda=cuda)

    def _buffer(self, runner, nbytes: int) -> int:
        entry = self._buffers.get(id(runner))
        if entry is None or entry[2] < nbytes:
            if entry is not None:
                entry[0].free(entry[1])
            entry = self._buffers[id(runner)] = (runner.cuda, runner.cuda.malloc(nbytes), nbytes)
        return entry[1]

    def _wait_for(self, runner, stream: int) -> None:
        event = self._events.get(id(runner))
        if event is None:
            event = self._events[id(runner)] = (runner.cuda, runner.cuda.event_create(timing=False))
        runner.cuda.event_record(event[1], stream)
        runner.cuda.stream_wait_event(runner.stream, event[1])

    def close(self) -> None:
        """Free the buffers (after the calls that read them have completed)."""
        for cuda, ptr, _ in self._buffers.values():
            cuda.free(ptr)
        for cuda, event in self._events.values():
            cuda.event_destroy(event)
        self._buffers, self._events = {}, {}


class BatchRing:
    """A small ring of pinned batch buffers that preprocessing writes samples straight into, each frame into the
    row its index gives it: frame ``i`` goes to row ``i % batch`` of block ``i // batch``, block ``b`` to buffer
    ``b % count``. The inference stage sends rows of one buffer as they are (a view of pinned memory: the transfer
    reads it in place, no host copy), and a buffer takes the next block's frames only once every row of its
    current block was collected, so the transfers and compute of one batch overlap the assembly of the next.

    Args:
        cuda: a :class:`~trtkit.runtime.cuda.Cuda` (the runners').
        batch: rows per buffer (the plan's ``max_batch``).
        sample_shape: one sample's shape, e.g. ``(3, 224, 224)``.
        dtype: the samples' dtype.
        count: buffers in the ring: batches in flight + 1, so one is being filled while the others are on the GPU.
        device: the buffers are in device memory (rows are :class:`~trtkit.runtime.buffers.DeviceArray` s, which a
            GPU preprocessing writes into and the runners bind where they are); default pinned host memory.
    """

    def __init__(self, cuda, batch: int, sample_shape: tuple, dtype, count: int, device: bool = False):
        import threading

        from trtkit.runtime.buffers import DeviceBuffer, HostBuffer

        if batch < 1 or count < 2:
            raise InputError(f"A batch ring needs a batch of at least 1 and 2 or more buffers; got {batch}, {count}")
        self.batch, self.count = int(batch), int(count)
        self.sample_shape, self.dtype = tuple(sample_shape), np.dtype(dtype)
        self.device, self._cuda = bool(device), cuda
        self.row_bytes = int(np.prod(self.sample_shape, dtype=np.int64)) * self.dtype.itemsize
        self._buffers: list = []
        try:
            for _ in range(self.count):
                self._buffers.append((DeviceBuffer if device else HostBuffer)(cuda, self.row_bytes * self.batch))
        except BaseException:
            self.close()
            raise
        self._arrays = [self._rows_of(k, 0, self.batch) for k in range(self.count)]
        self._block = list(range(self.count))  # the block each buffer holds now
        self._released = [0] * self.count  # rows of that block collected so far
        self._cond = threading.Condition()
        self.abort: threading.Event | None = None  # the pipeline's: waits give up once it is set

    def _rows_of(self, k: int, first: int, n: int):
        """Rows ``first .. first + n`` of buffer ``k``: a numpy view (host) or a DeviceArray (device)."""
        if not self.device:
            return self._buffers[k].view(self.dtype, (self.batch, *self.sample_shape))[first : first + n]
        from trtkit.runtime.buffers import DeviceArray

        ptr = self._buffers[k].ptr + first * self.row_bytes
        return DeviceArray(ptr, (n, *self.sample_shape), self.dtype, owner=self, cuda=self._cuda)

    def place(self, index: int) -> tuple:
        """Where frame ``index`` goes: ``(block, row)``."""
        return divmod(int(index), self.batch)

    def acquire(self, index: int):
        """The row of frame ``index`` (a numpy view; a DeviceArray in a device ring), to write its sample into;
        waits until its buffer holds the frame's block.

        Raises:
            Aborted: the pipeline aborted while waiting.
        """
        block, row = self.place(index)
        k = block % self.count
        with self._cond:
            while self._block[k] != block:
                if self.abort is not None and self.abort.is_set():
                    raise Aborted
                self._cond.wait(0.05)
        if self.device:
            from trtkit.runtime.buffers import DeviceArray

            ptr = self._buffers[k].ptr + row * self.row_bytes
            return DeviceArray(ptr, self.sample_shape, self.dtype, owner=self, cuda=self._cuda)
        return self._arrays[k][row]

    def rows(self, frames: list):
        """The rows holding ``frames`` (consecutive indices, one block) as one view; None if they are not that."""
        block, first = self.place(frames[0].index)
        if frames[-1].index - frames[0].index != len(frames) - 1 or first + len(frames) > self.batch:
            return None
        k = block % self.count
        base = self._buffers[k].ptr
        for frame, row in ((frames[0], first), (frames[-1], first + len(frames) - 1)):  # still in their rows
            if _address(frame.sample) != base + row * self.row_bytes:
                return None
        return self._rows_of(k, first, len(frames)) if self.device else self._arrays[k][first : first + len(frames)]

    def release(self, frames: list) -> None:
        """``frames`` were collected: their rows may be refilled (a buffer passes to its next block once every row
        of the current one is released). Their ``sample`` is set to None (the row will hold another frame)."""
        with self._cond:
            for frame in frames:
                block, _ = self.place(frame.index)
                k = block % self.count
                if self._block[k] != block:
                    continue
                frame.sample = None
                self._released[k] += 1
                if self._released[k] == self.batch:
                    self._block[k], self._released[k] = block + self.count, 0
            self._cond.notify_all()

    def close(self) -> None:
        """Free the buffers (after the calls that read them have completed)."""
        for buffer in self._buffers:
            buffer.free()
        self._buffers, self._arrays = [], []


def _address(sample) -> int | None:
    """Where ``sample`` starts: a numpy array's data, a DeviceArray's pointer; None for anything else."""
    if isinstance(sample, np.ndarray):
        return sample.ctypes.data
    ptr = getattr(sample, "ptr", None)
    return int(ptr) if isinstance(ptr, int) and hasattr(sample, "__cuda_array_interface__") else None


def split_outputs(outputs: dict, frames: list) -> None:
    """Give each frame its row of every output (padding rows are dropped)."""
    for i, frame in enumerate(frames):
        frame.outputs = {name: value[i] for name, value in outputs.items()}


class InferStage:
    """Batches frames from ``inp``, runs them through ``infer`` (anything with ``infer_async(feed)``: a
    :class:`~trtkit.runtime.runner.TrtRunner` or a :class:`~trtkit.runtime.pool.RunnerPool`), puts them in ``out``.

    With a :class:`BatchRing` (``ring``), preprocessing has written the samples into rows of its pinned buffers
    (or, for a GPU preprocessing, of its device buffers, which the runner binds where they are: no copy at all):
    a batch is those rows as they are (a batch ends where a buffer's block ends), sent without any host copy, and
    its rows are released once it is collected. Otherwise, with runners (a pool's ``runners``, or one runner),
    each batch is assembled in the pinned input buffer of the runner that runs it (``host_inputs``, one copy per
    sample). The runners take turns, and a runner's buffer is refilled only after its previous call was collected
    (at most one batch in flight per runner).

    The timer records, per batch, the time this thread spends in the call (filling the batch, starting it, then
    waiting for its outputs), shared among its frames: while the engine keeps up, the wait is short; when it sets
    the pace, the waits add up to the time the engine needed, so ``fps_alone`` is what it sustains in the pipeline.
    """

    name = "infer"

    def __init__(self, infer, plan: BatchPlan, inp: Channel, out: Channel, fail, ring: BatchRing | None = None):
        self.infer = infer
        self.plan = plan
        self._ring = ring
        if ring is not None:
            ring.abort = inp._abort
        self._carry: list = []  # frames of the next block, gathered after a batch that ended with its block
        self._ended = False  # the queue gave END (frames may still be in _carry)
        self.inp, self.out = inp, out
        self.timer = StageTimer(self.name)
        self._fail = fail
        self._pending: deque = deque()
        self._working: list = []  # the frames of the batch being started or collected (named in errors)
        self._runners = _runners_of(infer)
        self._fill_pool: ThreadPoolExecutor | None = None
        self._device = DeviceBatches(plan)
        cuda = getattr(self._runners[0], "cuda", None) if self._runners else None
        self.gpu = GpuTimeline(cuda) if cuda is not None else None
        self._turn = 0
        self._in_flight = min(plan.in_flight, len(self._runners)) if self._runners else plan.in_flight

    def threads(self) -> list:
        import threading

        return [threading.Thread(target=self._work, name="trtkit-infer", daemon=True)]

    def _work(self) -> None:
        threads = self.plan.fill_threads
        self._fill_pool = ThreadPoolExecutor(threads, "trtkit-fill") if threads > 1 else None
        try:
            ended = False
            while not ended:
                frames, ended = self._gather()
                if frames:
                    self._start(frames)
                while self._pending and (ended or len(self._pending) >= self._in_flight):
                    self._finish()
            self.out.put(END)
        except Aborted:
            return
        except BaseException as exc:  # noqa: BLE001 - reported by the pipeline, naming the stage and frame
            self._fail(self.name, self._working[0].index if self._working else None, exc)
        finally:
            if self._fill_pool is not None:
                self._fill_pool.shutdown()
            self._release()

    def _release(self) -> None:
        while self._pending:  # an aborted run: let the GPU finish what reads our buffers before freeing them
            handle = self._pending.popleft()[0]
            try:
                handle.wait()
            except Exception:  # noqa: BLE001 - the run's first error is the one reported
                pass
        self._device.close()
        if self.gpu is not None:
            self.gpu.close()

    def _gather(self) -> tuple:
        """Up to ``max_batch`` frames and whether the source has ended. While batches are in flight and no frame
        comes within ``max_wait_s``, the oldest batch is collected first (its frames go on instead of waiting).
        Frames come from the queue in groups (all those waiting, up to what the batch still takes); frames taken
        beyond the batch (past the end of a ring block) are kept for the next one."""
        wait = self.plan.max_wait_s
        first = self._take(self.plan.max_batch, wait if self._pending else None)
        while first is None:
            self._finish()
            first = self._take(self.plan.max_batch, wait if self._pending else None)
        if first is END:
            return [], True
        frames = first
        deadline = time.perf_counter() + wait
        while len(frames) < self.plan.max_batch:
            more = self._take(self.plan.max_batch - len(frames), max(0.0, deadline - time.perf_counter()))
            if more is None:
                break
            if more is END:
                break
            frames += more
        frames = self._cut(frames)
        return frames, self._ended and not self._carry

    def _take(self, limit: int, timeout):
        """Frames kept from the last gathering, else up to ``limit`` from the queue (see ``Channel.get_many``)."""
        if self._carry:
            got, self._carry = self._carry[:limit], self._carry[limit:]
            return got
        if self._ended:
            return END
        got = self.inp.get_many(limit, timeout)
        self._ended = got is END
        return got

    def _cut(self, frames: list) -> list:
        """``frames`` up to the end of the first one's ring block (the rest kept for the next batch)."""
        if self._ring is None:
            return frames
        block = self._ring.place(frames[0].index)[0]
        for i, frame in enumerate(frames):
            if self._ring.place(frame.index)[0] != block:
                self._carry = frames[i:] + self._carry
                return frames[:i]
        return frames

    def _start(self, frames: list) -> None:
        self._working = frames
        t0 = time.perf_counter()
        name = self.plan.input_name
        on_device = hasattr(frames[0].sample, "__cuda_array_interface__")
        if self._runners:
            runner = self._runners[self._turn]
            self._turn = (self._turn + 1) % len(self._runners)
            handle, events = self._start_on(runner, frames, on_device)
        elif on_device:
            raise InputError(
                "Device-resident samples are batched on the GPU by runners: give the inference stage "
                "a TrtRunner or RunnerPool"
            )
        else:
            rows = self._ring_rows(frames)
            batch = rows if rows is not None else stack_samples(frames, self.plan)
            handle, events = self.infer.infer_async({name: batch}), None
        self._pending.append((handle, frames, time.perf_counter() - t0, events))

    def _start_on(self, runner, frames: list, on_device: bool) -> tuple:
        """Start ``frames`` on ``runner``; returns its handle and GPU timeline events (or None)."""
        name, gpu = self.plan.input_name, self.gpu
        start = gpu.begin(runner.stream) if gpu and on_device else None  # copies into the batch are GPU work
        if on_device:
            rows = self._ring_rows(frames)  # a device ring: the rows the GPU preprocessing wrote, bound in place
            feed = {name: rows if rows is not None else self._device.batch(runner, frames)}
        else:
            rows = self._ring_rows(frames)
            if rows is None:
                buffer = runner.host_inputs({name: batch_shape(frames, self.plan)})[name]
                rows = fill_batch(buffer, frames, self._fill_pool, self.plan.fill_threads)
            feed = {name: rows}
            start = gpu.begin(runner.stream) if gpu else None
        handle = runner.infer_async(feed)
        return handle, (gpu.end(runner.stream, start) if gpu and start is not None else None)

    def _ring_rows(self, frames: list):
        """The ring's rows holding ``frames``, to send as they are (None: copy them into a batch instead)."""
        if self._ring is None or len(frames) < self.plan.min_batch:
            return None
        return self._ring.rows(frames)

    def _finish(self) -> None:
        handle, frames, start_s, events = self._pending.popleft()
        self._working = frames
        t0 = time.perf_counter()
        outputs = handle.wait()
        if self._ring is not None:
            self._ring.release(frames)
        self.timer.add(start_s + time.perf_counter() - t0, len(frames))
        if events is not None and self.gpu is not None:
            self.gpu.collect(events)
        split_outputs(outputs, frames)
        self.out.put_many(frames)


def _on_device(name: str, frame):
    """What the CUDA array interface of ``frame.sample`` says (a ``DeviceInput``).

    Raises:
        InputError: the sample is not a device array, or not C-contiguous.
    """
    from trtkit.runtime.buffers import device_input

    dev = device_input(name, frame.sample)
    if dev is None:
        raise InputError(
            f"Frame {frame.index}: its sample is a {type(frame.sample).__name__}, the batch's first "
            f"frame's a device array: every sample must be on the device, or none"
        )
    return dev


def _runners_of(infer) -> list:
    """The runners behind ``infer`` whose pinned input buffers a batch can be assembled in (empty: none)."""
    runners = getattr(infer, "runners", None)
    if runners is None:
        runners = [infer] if hasattr(infer, "host_inputs") else []
    return [r for r in runners if hasattr(r, "host_inputs")]
