"""Several runners, each with its own execution context and stream, fed in turn: throughput from one Python thread.

with RunnerPool("model.engine", size=2) as pool:
    for outputs in pool.map(feeds):          # the host work of one call overlaps the GPU work of another
        ...
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator

from trtkit import _version_compat as compat
from trtkit._lazy import tensorrt
from trtkit.errors import EngineError
from trtkit.runtime.engine import check_engine_manifest, read_engine_bytes
from trtkit.runtime.runner import InferHandle, TrtRunner


class RunnerPool:
    """``size`` :class:`TrtRunner` s over one engine, used round-robin.

    Each runner owns a context and a stream, so calls on different runners overlap on the GPU and the host copies of
    one call overlap the GPU work of the others. Where contexts cannot share a profile (TensorRT 8.6 engines built
    without PROFILE_SHARING_0806) each runner deserializes its own copy of the engine.

    Args:
        engine: an engine path, bytes or a loaded engine.
        size: number of runners (at least 1).
        **runner_args: passed to every :class:`TrtRunner` (``cuda_graph``, ``profile``, ``trt``, ``cuda``...).
    """

    def __init__(self, engine, size: int = 2, **runner_args):
        if size < 1:
            raise EngineError(f"RunnerPool needs at least one runner, got size={size}")
        self._engine = engine
        self.size = size
        self._args = runner_args
        self.runners: list = []
        self._next = 0

    def __enter__(self) -> "RunnerPool":
        source = self._source()
        try:
            for _ in range(self.size):
                self.runners.append(TrtRunner(source, **self._args).activate())
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _source(self):
        if isinstance(self._engine, (str, os.PathLike, bytes, bytearray, memoryview)):
            if isinstance(self._engine, (str, os.PathLike)):
                check_engine_manifest(
                    self._engine, allow_mismatch=self._args.get("allow_mismatch", False), trt=self._args.get("trt")
                )
                return read_engine_bytes(self._engine)  # each runner deserializes its own engine
            return bytes(self._engine)
        trt = self._args.get("trt")
        if trt is None:
            trt = tensorrt()
        if compat.contexts_share_profiles(trt) or self.size == 1:
            return self._engine
        return bytes(self._engine.serialize())

    def close(self) -> None:
        """Close every runner (pending calls finish first)."""
        runners, self.runners = self.runners, []
        errors = []
        for runner in runners:
            try:
                runner.close()
            except Exception as exc:  # noqa: BLE001 - close the others first
                errors.append(exc)
        if errors:
            raise errors[0]

    def infer_async(self, feed, **kwargs) -> InferHandle:
        """Start a call on the next runner; see :meth:`TrtRunner.infer_async`."""
        if not self.runners:
            raise EngineError("RunnerPool is not active: use it inside `with RunnerPool(...) as pool:`")
        runner = self.runners[self._next]
        self._next = (self._next + 1) % len(self.runners)
        return runner.infer_async(feed, **kwargs)

    def map(self, feeds) -> Iterator[dict]:
        """Outputs for each feed of ``feeds``, in order, with up to ``size`` calls in flight."""
        pending: deque = deque()
        for feed in feeds:
            if len(pending) == len(self.runners):
                yield pending.popleft().wait()
            pending.append(self.infer_async(feed))
        while pending:
            yield pending.popleft().wait()
