"""A video file encoded in a child process: :class:`ProcessVideoWriter` has the interface of
:class:`~trtkit.pipeline.video.VideoWriter`, copies each frame into a slot of a shared-memory ring and lets a child
Python process encode it.

Why: PyAV's encode call holds the GIL for part of its work, so in a pipeline the encoder and the Python threads of the
other stages (decode, preprocess, the inference stage) wait for each other; a child process has its own GIL. The child
is ``python -m trtkit.pipeline.encoder_process`` (no re-import of the caller's main module, as multiprocessing's
``spawn`` would do), in its own session (a Ctrl-C in the terminal reaches the parent only, which then closes the file
through the child), started when the writer is created so its imports overlap the pipeline's start.

Protocol on the child's stdin/stdout, one line per message: ``open SHM HEIGHT WIDTH SLOTS`` (with the first frame),
``frame K`` (slot K holds the next frame), ``close`` / ``discard``; the child answers ``ready PARTIAL_PATH`` once
started, ``free K`` (slot K may be refilled), ``closed`` / ``discarded``, or ``error TEXT``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from trtkit.errors import InputError, TrtkitError

SLOTS = 4  # frames in the shared ring: the parent fills one while the child encodes the others


class ProcessVideoWriter:
    """A video file written by a child process; same behaviour as ``VideoWriter`` (checks the path now, writes a
    hidden partial file, renames it on :meth:`close`, removes it on :meth:`discard`).

    Args:
        path, fps, codec, options: as for :class:`~trtkit.pipeline.video.VideoWriter`.
        slots: frames in the shared-memory ring (how far the parent may run ahead of the encoder).

    Raises (on creation):
        TrtkitError: the path is not writable; this FFmpeg has no such encoder; PyAV is missing.
        InputError: ``options`` are not encoder options (see :func:`~trtkit.pipeline.video.encoder_options`).
    """

    def __init__(self, path, fps=30, codec: str | None = None, slots: int = SLOTS, options: dict | None = None):
        from trtkit._atomic import check_writable
        from trtkit.pipeline.video import check_encoder, default_codec, encoder_options

        self.path = Path(path)
        check_writable(self.path)
        self.codec = codec or default_codec(self.path)
        check_encoder(self.codec)
        self.options = encoder_options(self.codec, options)
        self.fps = fps if isinstance(fps, Fraction) else Fraction(fps).limit_denominator(1001)
        self.slots = max(2, int(slots))
        self.frames = 0
        self._shm: Any = None
        self._ring: Any = None  # (slots, height, width, 3) uint8 over the shared memory, from the first frame
        self._free: list = []
        self._done = False
        self._started = False  # the child said "ready"
        self._partial: Path | None = None  # the child's hidden partial file (removed here if the child dies)
        package_root = str(Path(__file__).resolve().parents[2])
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p),
        }
        args = [sys.executable, "-m", "trtkit.pipeline.encoder_process", str(self.path), str(self.fps), self.codec]
        args.append(json.dumps(self.options))
        self._child: Any = subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, start_new_session=True
        )

    def write(self, image: np.ndarray) -> None:
        """Copy ``image`` (HxWx3 uint8 RGB) into a free slot (waiting for the encoder if none is) and hand it on.

        Raises:
            InputError: the frame's size differs from the first frame's.
            TrtkitError: the encoder process failed (its error) or ended.
        """
        from trtkit.pipeline.video import even_frame

        image = even_frame(np.ascontiguousarray(image, dtype=np.uint8))
        if self._ring is None:
            self._open(image.shape)
        elif image.shape != self._ring.shape[1:]:
            height, width = self._ring.shape[1:3]
            raise InputError(
                f"Frame {self.frames} is {image.shape[1]}x{image.shape[0]}; the video '{self.path}' "
                f"is {width}x{height}: every frame must have the same size"
            )
        while not self._free:
            self._answer()
        slot = self._free.pop()
        self._ring[slot] = image
        self._send(f"frame {slot}")
        self.frames += 1

    def ready(self) -> None:
        """Wait until the child has started (its imports done, its partial file created).

        Raises:
            TrtkitError: the child failed to start (its error).
        """
        while not self._started:
            self._answer()

    def close(self) -> Path:
        """Let the child flush the encoder and rename the file (a file with no frame is not kept)."""
        if self._done:
            return self.path
        try:
            self._send("close")
            while self._answer() != "closed":
                pass
        except BaseException:
            self.discard()
            raise
        self._end()
        return self.path

    def discard(self) -> None:
        """Close without keeping anything."""
        if self._done:
            return
        try:
            self._send("discard")
            while self._answer() != "discarded":
                pass
        except (TrtkitError, OSError):
            pass  # the child is gone: what it left is its partial file, removed below
        self._end(kill=True)
        if self._partial is not None:
            self._partial.unlink(missing_ok=True)

    def _open(self, shape: tuple) -> None:
        from multiprocessing import shared_memory

        self._shm = shared_memory.SharedMemory(create=True, size=self.slots * int(np.prod(shape)))
        self._ring = np.ndarray((self.slots, *shape), np.uint8, self._shm.buf)
        self._free = list(range(self.slots))
        self._send(f"open {self._shm.name} {shape[0]} {shape[1]} {self.slots}")

    def _send(self, line: str) -> None:
        try:
            self._child.stdin.write(line.encode() + b"\n")
            self._child.stdin.flush()
        except OSError as exc:
            raise TrtkitError(f"The encoder process for '{self.path}' ended ({self._status()})") from exc

    def _answer(self) -> str:
        """Read one answer: a freed slot goes back to the free list; an error raises."""
        line = self._child.stdout.readline().decode().rstrip("\n")
        if not line:
            raise TrtkitError(f"The encoder process for '{self.path}' ended ({self._status()})")
        word, _, rest = line.partition(" ")
        if word == "free":
            self._free.append(int(rest))
        elif word == "ready":
            self._started, self._partial = True, Path(rest)
        elif word == "error":
            raise TrtkitError(f"Encoding '{self.path}' failed: {rest}")
        return word

    def _status(self) -> str:
        code = self._child.poll()
        return "still running" if code is None else f"exit code {code}"

    def _end(self, kill: bool = False) -> None:
        self._done = True
        for pipe in (self._child.stdin, self._child.stdout):
            try:
                pipe.close()
            except OSError:
                pass
        try:
            self._child.wait(timeout=None if not kill else 5)
        except subprocess.TimeoutExpired:
            self._child.kill()
            self._child.wait()
        if self._shm is not None:
            self._ring = None
            self._shm.close()
            self._shm.unlink()
            self._shm = None


def _serve(path: str, fps: str, codec: str, inp, out, options: str = "{}") -> None:
    """The child's loop (see the module docstring); ``options``: the encoder's, as JSON."""
    from multiprocessing import resource_tracker, shared_memory

    from trtkit.pipeline.video import VideoWriter

    writer: Any = None
    shm: Any = None
    ring: Any = None

    def say(text: str) -> None:
        out.write(text.encode() + b"\n")
        out.flush()

    try:
        writer = VideoWriter(path, fps=Fraction(fps), codec=codec, options=json.loads(options))
        say(f"ready {writer.partial_path}")
        for raw in inp:
            word, *args = raw.decode().split()
            if word == "open":
                shm = shared_memory.SharedMemory(name=args[0])
                resource_tracker.unregister(shm._name, "shared_memory")  # type: ignore[attr-defined]  # the parent owns (and unlinks) it
                height, width, slots = (int(a) for a in args[1:])
                ring = np.ndarray((slots, height, width, 3), np.uint8, shm.buf)
            elif word == "frame":
                writer.write(ring[int(args[0])])
                say(f"free {args[0]}")
            elif word == "close":
                writer.close()
                say("closed")
                return
            elif word == "discard":
                writer.discard()
                say("discarded")
                return
        writer.discard()  # the parent went away without a word: keep nothing
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
        if writer is not None:
            writer.discard()
        try:
            say(f"error {type(exc).__name__}: {exc}".replace("\n", " "))
        except OSError:
            pass
    finally:
        ring = None
        if shm is not None:
            shm.close()


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2], sys.argv[3], sys.stdin.buffer, sys.stdout.buffer, *sys.argv[4:5])
