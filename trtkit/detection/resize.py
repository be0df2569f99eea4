"""Pillow's bilinear resize of one image spread over threads, with the very pixels of one ``Image.resize`` call.

Pillow resizes in two separable passes and releases the GIL in each. A horizontal pass computes every output row from
one input row, a vertical pass every output column from one column, so a pass can be cut into bands, each one plain
``resize`` call that changes one size only, with exactly the whole pass's result. Which pass Pillow runs first depends
on its version and the sizes, and the two orders round differently: the order is found once per pair of sizes by
resizing a random image both ways (:func:`pass_order`), and a pair whose order cannot be told is resized in one call.
(``resize(box=...)`` bands of a two-pass call would recompute the filter positions from each band's start, which need
not round alike.)
"""

from __future__ import annotations

import functools
import threading
import weakref

import numpy as np

# below this many output pixels one call is quicker than handing bands to threads
MIN_SPLIT_PIXELS = 128 * 128
# size pairs whose pass order is remembered (video: one; a photo folder: a few dozen)
MAX_ORDERS = 256


class SplitResize:
    """Bilinear resize of pillow RGB images into uint8 arrays, over ``threads`` threads (the caller's among them).

    Args:
        threads: threads working on one image (1: one plain ``resize`` call).
    """

    def __init__(self, threads: int = 1):
        from trtkit.errors import UsageError

        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise UsageError(
                f"threads must be an int of at least 1; got {threads!r}", field="threads", accepted="an int >= 1"
            )
        self.threads = threads
        self._pool = None
        self._lock = threading.Lock()

    def pool(self):
        """The worker threads (``threads - 1``), started on first use and stopped by :meth:`close` or when this
        object is collected."""
        with self._lock:
            if self._pool is None:
                from concurrent.futures import ThreadPoolExecutor

                self._pool = ThreadPoolExecutor(self.threads - 1, thread_name_prefix="trtkit-resize")
                weakref.finalize(self, self._pool.shutdown, wait=False)
            return self._pool

    def close(self) -> None:
        """Stop the worker threads (a later call starts them again)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def into(self, image, size: tuple[int, int], out: np.ndarray) -> None:
        """Resize the RGB pillow ``image`` to ``size = (width, height)`` into the ``(height, width, 3)`` uint8
        ``out`` (a view into a larger canvas is fine)."""
        from PIL import Image

        width, height = size
        if (width, height) == image.size:
            out[...] = np.asarray(image)
            return
        order = "" if self.threads == 1 or width * height < MIN_SPLIT_PIXELS else cached_pass_order(image.size, size)
        if not order:
            out[...] = np.asarray(image.resize((width, height), Image.Resampling.BILINEAR))
        elif order == "hv":
            self._pass(self._pass(image, width, horizontal=True), height, horizontal=False, out=out)
        else:
            self._pass(self._pass(image, height, horizontal=False), width, horizontal=True, out=out)

    def _bands(self, length: int) -> list[tuple[int, int]]:
        cuts = [length * k // self.threads for k in range(self.threads + 1)]
        return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]

    def _pass(self, image, length: int, *, horizontal: bool, out: np.ndarray | None = None):
        """One pass to the new width (``horizontal``) or height ``length``, by bands of rows (columns), each band in
        a thread of its own (the first in this one); into ``out`` when given, else returned as a pillow image."""
        from PIL import Image

        w, h = image.size
        size = (length, h) if horizontal else (w, length)

        def band(span):
            a, b = span
            box, part_size = ((0, a, w, b), (length, b - a)) if horizontal else ((a, 0, b, h), (b - a, length))
            part = image.crop(box).resize(part_size, Image.Resampling.BILINEAR)
            if out is not None:
                out[(slice(a, b), slice(None)) if horizontal else (slice(None), slice(a, b))] = np.asarray(part)
            return part

        bands = self._bands(h if horizontal else w)
        futures = [self.pool().submit(band, span) for span in bands[1:]]
        parts = [band(bands[0])] + [f.result() for f in futures]
        if out is not None:
            return None
        whole = Image.new("RGB", size)
        for (a, _), part in zip(bands, parts):
            whole.paste(part, (0, a) if horizontal else (a, 0))
        return whole


@functools.lru_cache(maxsize=MAX_ORDERS)
def cached_pass_order(in_size: tuple[int, int], out_size: tuple[int, int]) -> str:
    """:func:`pass_order`, remembered for the last :data:`MAX_ORDERS` pairs of sizes."""
    return pass_order(in_size, out_size)


def pass_order(in_size: tuple[int, int], out_size: tuple[int, int]) -> str:
    """Which pass this Pillow runs first resizing ``in_size`` to ``out_size`` (``(width, height)``, both changing):
    ``"hv"``, ``"vh"``, or ``""`` when a random image of that size does not tell."""
    from PIL import Image

    (w, h), (nw, nh) = in_size, out_size
    bilinear = Image.Resampling.BILINEAR
    probe = Image.fromarray(np.random.default_rng(0).integers(0, 256, (h, w, 3), dtype=np.uint8))
    whole = np.asarray(probe.resize((nw, nh), bilinear))
    if np.array_equal(np.asarray(probe.resize((nw, h), bilinear).resize((nw, nh), bilinear)), whole):
        return "hv"
    if np.array_equal(np.asarray(probe.resize((w, nh), bilinear).resize((nw, nh), bilinear)), whole):
        return "vh"
    return ""
