"""TensorRT's own INT8 calibrators (TensorRT 8.6 to 10.x), fed from trtkit's data sources through cuda-python.

The class is made at call time on ``trt.IInt8EntropyCalibrator2`` or ``trt.IInt8MinMaxCalibrator`` of the given
``tensorrt`` module (TensorRT 11 has neither). TensorRT calls it from C++: an exception must not cross back into
TensorRT, so every callback catches, logs, records the error in ``calibrator.error`` and ends calibration;
:meth:`raise_if_failed` re-raises it after the build.
"""

from __future__ import annotations

import logging

import numpy as np

from trtkit import _version_compat as compat
from trtkit.errors import CalibrationError, UnsupportedError
from trtkit.runtime.cuda import Cuda

logger = logging.getLogger("trtkit")

_BASES = {"entropy": "IInt8EntropyCalibrator2", "minmax": "IInt8MinMaxCalibrator"}


def calibrator_base(trt, algorithm: str):
    """The TensorRT calibrator base class for ``algorithm``.

    Raises:
        UnsupportedError: this TensorRT has no such calibrator (11), or the algorithm has no native calibrator
            (mse); the message says what to use instead.
    """
    if algorithm not in _BASES:
        raise UnsupportedError(
            f"TensorRT has no native '{algorithm}' calibrator; use int8_mode 'qdq' (trtkit computes the scales) or "
            "the entropy or minmax algorithm.",
            field="int8_mode",
        )
    base = getattr(trt, _BASES[algorithm], None)
    if base is None:
        raise UnsupportedError(
            f"trt.{_BASES[algorithm]} does not exist in TensorRT {compat.version_string(trt)}; INT8 calibrators exist "
            f"in TensorRT 8.6 to 10.x (removed in 11: use --int8-mode qdq)."
        )
    return base


def make_calibrator(trt, session, *, cuda=None):
    """A TensorRT calibrator fed by a :class:`~calibrators.session.CalibrationSession`.

    Args:
        trt: the ``tensorrt`` module.
        session: data, batch size, cache and provenance.
        cuda: a :class:`trtkit.runtime.cuda.Cuda` (default: over cuda-python; tests pass one over the fake).

    Returns:
        An instance of a subclass of TensorRT's calibrator for ``session.algorithm``.
    """
    base = calibrator_base(trt, session.algorithm)

    class TrtkitCalibrator(base):
        """Feeds device buffers to TensorRT; reads and writes the calibration cache."""

        def __init__(self):
            base.__init__(self)
            self._state = _FeedState(session, cuda)

        @property
        def error(self):
            return self._state.error

        @property
        def samples(self) -> int:
            return self._state.samples

        def get_batch_size(self):
            return int(session.batch_size)

        def get_batch(self, names, *args):
            return self._state.next_pointers(list(names))

        def read_calibration_cache(self, *args):
            return self._state.read_cache()

        def write_calibration_cache(self, cache, *args):
            self._state.write_cache(cache)

        def raise_if_failed(self) -> None:
            """Re-raise an error recorded in a callback; free device buffers."""
            self._state.close()
            if self._state.error is not None:
                raise self._state.error

        def close(self) -> None:
            self._state.close()

    return TrtkitCalibrator()


class _FeedState:
    """The calibrator's work, apart from TensorRT's class so it can be tested on its own."""

    def __init__(self, session, cuda=None):
        self.session = session
        self._cuda = cuda
        self._batches = None
        self._buffers: dict[str, tuple[int, int]] = {}  # name → (pointer, bytes)
        self._stream = None
        self.error: Exception | None = None
        self.samples = 0

    @property
    def cuda(self):
        if self._cuda is None:
            self._cuda = Cuda()
        return self._cuda

    def next_pointers(self, names: list) -> list | None:
        if self.error is not None:
            return None
        try:
            if self._batches is None:
                self._batches = iter(self.session.batches())
            feed = next(self._batches, None)
            if feed is None:
                logger.info("Calibration: fed %d sample(s) to TensorRT.", self.samples)
                self.close()  # TensorRT is done with the previous batch once it asks for the next
                return None
            pointers = [self._upload(name, feed) for name in names]
            self.samples += self.session.batch_size
            return pointers
        except Exception as exc:  # never let an exception cross into TensorRT
            return self._fail(exc)

    def _upload(self, name: str, feed: dict) -> int:
        if name not in feed:
            raise CalibrationError(
                f"TensorRT asked for calibration input '{name}' but the calibration data has {sorted(feed)}."
            )
        array = np.ascontiguousarray(feed[name], dtype=np.float32)
        ptr = self._buffer(name, array.nbytes)
        if self._stream is None:
            self._stream = self.cuda.stream_create()
        self.cuda.memcpy_htod_async(ptr, array.ctypes.data, array.nbytes, self._stream)
        self.cuda.stream_synchronize(self._stream)
        return ptr

    def _buffer(self, name: str, nbytes: int) -> int:
        ptr, size = self._buffers.get(name, (0, 0))
        if size < nbytes:
            if ptr:
                self.cuda.free(ptr)
            ptr = self.cuda.malloc(nbytes)
            self._buffers[name] = (ptr, nbytes)
        return ptr

    def read_cache(self):
        table = self.session.cached
        if table is None:
            return None
        logger.info("Calibration cache matches; TensorRT skips calibration.")
        return table.to_text().encode()

    def write_cache(self, cache) -> None:
        try:
            self.session.save(bytes(cache), samples=self.samples or None)
        except Exception as exc:
            self._fail(exc)

    def _fail(self, exc: Exception):
        if not isinstance(exc, CalibrationError):
            exc = CalibrationError(f"Calibration failed: {type(exc).__name__}: {exc}")
        logger.error("%s", exc)
        self.error = exc
        return None

    def close(self) -> None:
        for ptr, _ in self._buffers.values():
            try:
                self.cuda.free(ptr)
            except Exception as exc:  # freeing must not hide the calibration result
                logger.warning("Freeing a calibration buffer failed: %s", exc)
        self._buffers.clear()
        if self._stream is not None:
            try:
                self.cuda.stream_destroy(self._stream)
            finally:
                self._stream = None
