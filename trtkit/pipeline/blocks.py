"""Blocks: runs of consecutive frames that move through the pipeline as one item.

A frame pipeline pays, per frame, a Python object, a queue operation in every channel, a timer entry and a sink
call. When the frames come in batches already (samples preprocessed elsewhere, a stacked array of images), a
:class:`BlockSource` hands each batch on as one :class:`Block`: every stage's callable gets the block, the
inference stage sends its samples as one batch (from the batch ring's buffer the preprocessing filled, without any
host copy) and the sinks get the block (``write_block``; a sink without it gets the block's frames one by one).

What stays as in a frame pipeline: frames in = frames out, in order; back-pressure (a channel's capacity then
counts blocks); Ctrl-C stops reading at the next block and drains; an error names the stage and the frame (the
block's first frame, or the one trtkit's own per-frame loops were at). What differs:

- A block is one engine call: it holds at most the engine's batch, and is never merged with the next one (so it
  never waits for frames either: ``max_wait_s`` only bounds how long the inference stage waits for the next block
  before it collects a batch already in flight).
- Statistics are per block: each frame of a block counts as the block's time divided by its frames, so a stage's
  avg stays per frame and its min/max/p99 are over the blocks' per-frame means.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trtkit.errors import InputError
from trtkit.pipeline.batching import InferStage
from trtkit.pipeline.stages import END, Frame


@dataclass
class Block:
    """Consecutive frames and what the stages made of them, one row (or list entry) per frame.

    Attributes:
        count: frames in the block.
        images: what the source delivered, ``count`` of them (a stacked array or a list; None if not kept).
        names: one name per frame (None: ``frame N``).
        index: the first frame's position among all frames, from 0 (set by the pipeline).
        seq: the block's position among all blocks, from 0 (set by the pipeline; picks its batch ring buffer).
        samples: the model inputs, one row per frame (``count`` rows).
        meta: what preprocessing tells postprocessing, one entry per frame (or None).
        outputs: the engine's outputs, output name -> array of ``count`` rows.
        results: what postprocessing made of them, one entry per frame (or None).
        at: the offset of the frame a per-frame loop is working on (named in errors; 0: the first).
    """

    count: int
    images: Any = None
    names: list | None = None
    index: int = 0
    seq: int = 0
    samples: Any = None
    meta: list | None = None
    outputs: dict = field(default_factory=dict)
    results: list | None = None
    at: int = 0

    def name(self, i: int) -> str:
        return self.names[i] if self.names is not None else f"frame {self.index + i}"

    def frames(self) -> list:
        """The block as :class:`~trtkit.pipeline.stages.Frame` s (for a sink that writes frames)."""
        return [
            Frame(
                self.index + i,
                self.images[i] if self.images is not None else None,
                self.name(i),
                meta=self.meta[i] if self.meta is not None else None,
                outputs={k: v[i] for k, v in self.outputs.items()},
                result=self.results[i] if self.results is not None else None,
            )
            for i in range(self.count)
        ]


class BlockSource:
    """Blocks from an iterable of batches: each item an array (or list) of frames, stacked on its first axis, or a
    ``(names, batch)`` pair. Each batch becomes one :class:`Block` (at most the engine's batch frames)."""

    name = "read"
    blocks = True  # what makes a Pipeline a block pipeline

    def __init__(self, batches):
        self._batches = batches
        self.skipped: list = []

    def info(self) -> dict:
        return {"kind": "blocks"}

    def __iter__(self):
        for item in self._batches:
            names, batch = item if isinstance(item, tuple) else (None, item)
            yield Block(len(batch), images=batch, names=list(names) if names is not None else None)

    def close(self) -> None:
        pass


class BlockCallbackSink:
    """Calls ``fn(block)`` for every :class:`Block`, in order."""

    name = "sink"

    def __init__(self, fn):
        self.fn = fn

    def write_block(self, block: Block) -> None:
        self.fn(block)

    def write(self, frame) -> None:  # a frame pipeline: a block of one
        self.fn(
            Block(
                1,
                images=[frame.image],
                names=[frame.name],
                index=frame.index,
                meta=[frame.meta],
                outputs={k: np.asarray(v)[None] for k, v in frame.outputs.items()},
                results=[frame.result],
            )
        )

    def close(self) -> None:
        pass

    def discard(self) -> None:
        pass


def write_block(sinks: list, block: Block) -> None:
    """Hand ``block`` to every sink: ``write_block`` where a sink has it, else its frames one by one."""
    frames = None
    for sink in sinks:
        whole = getattr(sink, "write_block", None)
        if whole is not None:
            whole(block)
            continue
        if frames is None:
            frames = block.frames()
        for frame in frames:
            sink.write(frame)


class BlockInferStage(InferStage):
    """The inference stage of a block pipeline: one engine call per block, up to ``plan.in_flight`` in flight.

    A block whose samples are the batch ring buffer the preprocessing filled (``BatchRing.acquire_slot``) is sent
    as it is; other host samples are copied into the runner's pinned input buffer (one copy per block); a block
    smaller than the engine's smallest batch is padded with zeros (the padding's outputs are dropped).
    """

    def _gather(self) -> tuple:
        wait = self.plan.max_wait_s
        got = self.inp.get_many(1, wait if self._pending else None)
        while got is None:
            self._finish()
            got = self.inp.get_many(1, wait if self._pending else None)
        return ([], True) if got is END else (got, False)

    def _start(self, blocks: list) -> None:
        self._working = blocks
        block = blocks[0]
        t0 = time.perf_counter()
        if block.count > self.plan.max_batch:
            raise InputError(
                f"A block of {block.count} frames (frames {block.index}..{block.index + block.count - 1}); the "
                f"engine takes at most {self.plan.max_batch} per call: make the source's batches that size or smaller"
            )
        gpu, events = self.gpu, None
        if self._runners:
            runner = self._runners[self._turn]
            self._turn = (self._turn + 1) % len(self._runners)
            feed = {self.plan.input_name: self._rows_on(runner, block)}
            start = gpu.begin(runner.stream) if gpu else None
            handle = runner.infer_async(feed)
            events = gpu.end(runner.stream, start) if gpu and start is not None else None
        else:
            handle = self.infer.infer_async({self.plan.input_name: self._padded(block.samples)})
        self._pending.append((handle, blocks, time.perf_counter() - t0, events))
        self.batches += 1

    def _rows_on(self, runner, block: Block):
        samples = block.samples
        n = block.count
        if n >= self.plan.min_batch and (
            hasattr(samples, "__cuda_array_interface__")
            or (self._ring is not None and self._ring.holds(block.seq, samples))
        ):
            return samples
        if hasattr(samples, "__cuda_array_interface__"):
            raise InputError(
                f"A block of {n} device-resident frames (frames {block.index}..{block.index + n - 1}); the engine "
                f"takes at least {self.plan.min_batch} per call: make the source's batches that size"
            )
        samples = np.asarray(samples)
        shape = (max(n, self.plan.min_batch), *samples.shape[1:])
        buffer = runner.host_inputs({self.plan.input_name: shape})[self.plan.input_name]
        buffer[:n] = samples
        buffer[n:] = 0
        return buffer

    def _padded(self, samples):
        samples = np.asarray(samples)
        short = self.plan.min_batch - len(samples)
        if short <= 0:
            return samples
        return np.concatenate([samples, np.zeros((short, *samples.shape[1:]), samples.dtype)])

    def _finish(self) -> None:
        handle, blocks, start_s, events = self._pending.popleft()
        self._working = blocks
        block = blocks[0]
        t0 = time.perf_counter()
        outputs = handle.wait()
        if self._ring is not None:
            self._ring.release_slot(block.seq)
            block.samples = None  # the buffer will hold another block
        self.timer.add(start_s + time.perf_counter() - t0, block.count)
        if events is not None and self.gpu is not None:
            self.gpu.collect(events)
        block.outputs = {name: value[: block.count] for name, value in outputs.items()}
        self.out.put_many(blocks)


def block_stage_functions(processing, pre, ring=None) -> dict:
    """The block versions of :func:`~trtkit.pipeline.api.stage_functions`: ``preprocess`` fills the block's
    batch ring buffer in one step (``pre.into_block(images, out)`` where ``pre`` has it, else ``pre.into`` or
    ``pre`` frame by frame), ``postprocess`` and ``annotate`` run frame by frame inside the block's one call."""

    def samples_for(block: Block):
        if ring is not None:
            return ring.acquire_slot(block.seq)[: block.count]
        shape = getattr(pre, "shape", None)
        if shape is None or not callable(getattr(pre, "into", None)):
            return None
        return np.empty((block.count, *shape), dtype=pre.target.dtype)

    def preprocess(block: Block):
        out = samples_for(block)
        if out is not None and callable(getattr(pre, "into_block", None)):
            block.meta = pre.into_block(block.images, out)
        elif out is not None:
            block.meta = each_frame(block, lambda i: pre.into(block.images[i], out[i]))
        else:
            pairs = each_frame(block, lambda i: pre(block.images[i]))
            out, block.meta = np.stack([p[0] for p in pairs]), [p[1] for p in pairs]
        block.samples = out

    def postprocess(block: Block):
        block.results = each_frame(
            block,
            lambda i: processing.post(
                {k: v[i] for k, v in block.outputs.items()}, _entry(block.meta, i), block.images[i]
            ),
        )

    def annotate(block: Block):
        block.images = each_frame(block, lambda i: processing.draw(block.images[i], _entry(block.results, i)))

    return {
        "preprocess": preprocess,
        "postprocess": postprocess if processing.post else None,
        "annotate": annotate if processing.draw else None,
    }


def each_frame(block: Block, fn) -> list:
    """``[fn(i) for i in range(block.count)]``, with ``block.at`` on the frame being worked on (named if it fails)."""
    results = []
    for i in range(block.count):
        block.at = i
        results.append(fn(i))
    block.at = 0
    return results


def _entry(values, i: int):
    return values[i] if values is not None else None
