"""Numpy inputs passed to :meth:`TrtRunner.infer` call after call, page-locked where they are.

A numpy input is normally copied into the runner's pinned buffer, then transferred from there. An application that
refills one preprocessing buffer per frame passes the same array every call: the second time a runner sees that
array, it page-locks it in place (``cudaHostRegister``) and the transfer reads it where it is, inside the CUDA graph,
with no host copy.

Safety rests on three rules:

- The array is page-locked only while it lives: a weak reference's callback, which numpy runs before it frees the
  memory, unregisters it. The runner keeps no array alive.
- Only synchronous :meth:`~TrtRunner.infer` reads from an array in place (the caller holds it and is blocked until the
  transfer is done); ``infer_async`` copies, so its caller may refill the array at once.
- Every registration has its own serial number, part of the key of the graphs that read from it, so a graph made for
  an array that has died is never replayed for another array that happens to live at the same address.

Arrays below :data:`MIN_BYTES`, non-contiguous ones, and ones CUDA refuses to register are copied. Page-locking an
array and capturing a graph for it costs far more than one copy, so after :data:`MAX_SHORT_LIVED` arrays released
within :data:`SHORT_LIVED_CALLS` calls the runner stops page-locking new arrays.
"""

from __future__ import annotations

import itertools
import logging
import threading
import weakref

import numpy as np

from trtkit.errors import CudaError

logger = logging.getLogger("trtkit")

# Smallest array page-locked in place: below it, copying into the pinned buffer costs less than a microsecond.
MIN_BYTES = 64 << 10
# At most this many arrays (and bytes) page-locked per runner: page-locked memory cannot be swapped out.
MAX_ARRAYS = 8
MAX_BYTES = 1 << 30
# Arrays seen once, remembered (weakly) to spot the second sighting; forgotten in bulk past this many.
_RECENT = 32
# An array released after fewer calls than this cost more to page-lock than its copies would have; after this many
# such arrays, a runner page-locks no more.
SHORT_LIVED_CALLS = 16
MAX_SHORT_LIVED = 4

_SERIALS = itertools.count(1)


class Locked:
    """A page-locked array: its registration's serial number (never reused), where it is, how large, a weak
    reference to it, and how many calls have read it in place."""

    __slots__ = ("serial", "ptr", "nbytes", "ref", "calls")

    def __init__(self, serial: int, ptr: int, nbytes: int, ref: weakref.ref):
        self.serial, self.ptr, self.nbytes, self.ref, self.calls = serial, ptr, nbytes, ref, 0


class ReusedInputs:
    """The arrays one runner has page-locked in place, and those it has seen once.

    Args:
        cuda: a :class:`~trtkit.runtime.cuda.Cuda` (``host_register`` / ``host_unregister``).
    """

    def __init__(self, cuda):
        self.cuda = cuda
        self.max_arrays, self.max_bytes, self.min_bytes = MAX_ARRAYS, MAX_BYTES, MIN_BYTES  # the limits as they are now
        self._locked: dict[int, Locked] = {}  # id(array) -> its registration
        self._recent: dict[int, tuple] = {}  # id(array) -> (array, call) seen in one call
        self._refused: dict[int, weakref.ref] = {}  # id(array) -> array CUDA would not register (not retried)
        # callbacks run on whichever thread drops an array, or inside a garbage collection this very thread started
        self._lock = threading.RLock()
        self.released: list[int] = []  # serials unregistered since the owner last pruned its graphs
        self.short_lived = 0  # arrays released within SHORT_LIVED_CALLS calls
        self.enabled = True  # False once short_lived reaches MAX_SHORT_LIVED: new arrays are copied

    def __len__(self) -> int:
        return len(self._locked)

    def locked(self, array: np.ndarray, call: int) -> Locked | None:
        """``array``'s registration if it is page-locked; else remember it, and page-lock it if an earlier call
        was given it too.

        ``array`` must be a numpy array of the input's dtype (the caller checked); it is read in place only by a
        synchronous call. ``call`` numbers the owner's calls: asking twice within one call is one sighting.
        """
        key = id(array)
        entry = self._locked.get(key)
        if entry is not None and entry.ref() is array and entry.nbytes == array.nbytes:
            entry.calls += 1
            return entry
        if not self.enabled:
            return None
        seen = self._recent.get(key)
        if seen is not None and seen[0]() is array:
            if seen[1] == call:
                return None
            del self._recent[key]
            return self._register(array)
        if array.nbytes >= self.min_bytes and array.flags.c_contiguous and not self._was_refused(array):
            if len(self._recent) >= _RECENT:
                self._recent.clear()
            self._recent[key] = (weakref.ref(array), call)
        return None

    def _was_refused(self, array) -> bool:
        ref = self._refused.get(id(array))
        return ref is not None and ref() is array

    def _register(self, array: np.ndarray) -> Locked | None:
        nbytes = array.nbytes
        with self._lock:
            room = (
                len(self._locked) < self.max_arrays
                and sum(e.nbytes for e in list(self._locked.values())) + nbytes <= self.max_bytes
            )
            if not room:
                self._refuse(array, "the runner's page-locked arrays are at their limit")
                return None
            ptr = array.ctypes.data
            try:
                self.cuda.host_register(ptr, nbytes)
            except CudaError as exc:
                self.cuda.clear_last_error()
                self._refuse(array, str(exc))
                return None
            serial = next(_SERIALS)
            key = id(array)

            def died(_ref, key: int = key) -> None:
                self._release(key)

            entry = Locked(serial, ptr, nbytes, weakref.ref(array, died))
            self._locked[key] = entry
            return entry

    def _refuse(self, array, reason: str) -> None:
        logger.debug(
            "input array at %#x (%d bytes) is copied, not page-locked in place: %s",
            array.ctypes.data,
            array.nbytes,
            reason,
        )
        if len(self._refused) >= _RECENT:
            self._refused.clear()
        self._refused[id(array)] = weakref.ref(array)
        return None

    def _release(self, key: int) -> None:
        """The array died (numpy has not freed its memory yet): unregister it."""
        with self._lock:
            entry = self._locked.pop(key, None)
            if entry is None:
                return
            self.released.append(entry.serial)
            if entry.calls < SHORT_LIVED_CALLS:
                self.short_lived += 1
                if self.short_lived >= MAX_SHORT_LIVED and self.enabled:
                    self.enabled = False
                    logger.info(
                        "%d input arrays died within %d calls of being page-locked in place: this runner "
                        "now copies new arrays instead (keep one input buffer and refill it to skip the "
                        "copy)",
                        self.short_lived,
                        SHORT_LIVED_CALLS,
                    )
            try:
                self.cuda.host_unregister(entry.ptr)
            except Exception:  # noqa: BLE001 - runs inside numpy's deallocation: nothing to raise to
                logger.debug("cudaHostUnregister(%#x) failed", entry.ptr, exc_info=True)

    def take_released(self) -> list[int]:
        """The serials unregistered since the last call (arrays that died), for the owner to drop their graphs."""
        with self._lock:
            serials, self.released = self.released, []
        return serials

    def clear(self) -> None:
        """Unregister every array (the owner has synchronized: nothing reads them any more)."""
        with self._lock:
            entries, self._locked = list(self._locked.values()), {}
            self._recent.clear()
            self._refused.clear()
            self.released.extend(e.serial for e in entries)
        errors = []
        for entry in entries:  # dropping the weak references cancels their callbacks
            try:
                self.cuda.host_unregister(entry.ptr)
            except CudaError as exc:
                errors.append(exc)
        if errors:
            raise errors[0]
