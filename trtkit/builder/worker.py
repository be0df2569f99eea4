"""A warm worker: one long-lived child process that runs isolated calls one after another.

:func:`~trtkit.builder.isolate.run_isolated` starts a fresh interpreter for every call, which imports tensorrt and
creates a CUDA context each time; a :class:`Worker` pays for that once, with a warm-up call (for builds: the imports
and a builder) that runs as soon as it starts, while this process goes on with its own work.

Crash containment is :func:`~trtkit.builder.isolate.run_isolated`'s: a call that kills the worker raises
:class:`~trtkit.errors.IsolationError` here, and that worker is never used again; a timeout, Ctrl-C or running out of
memory stops it. An exception the call raises comes back as itself and leaves the worker in use.

The process keeps at most one idle worker (:func:`acquire` / :func:`release`): a build takes it, or starts a new one
when it is busy, dead, was started by another process (after ``fork``) or with other environment variables; a
finished build gives it back. Each call runs in this process's current folder; the idle worker exits with this
process (its stdin closes).

Protocol (the child side is :func:`serve`): a one-shot child's payload and answer frames, one call after another; the
worker flushes its stdout and stderr before each answer, so every line it printed reaches that call's ``on_event``.
"""

from __future__ import annotations

import gc
import os
import queue
import select
import sys
import threading
import time
from typing import IO, cast

from trtkit.builder import isolate, timeline, warm
from trtkit.builder.crash_report import Tracker, timeout_error
from trtkit.errors import IsolationError
from trtkit.log import logger

# --- child side ------------------------------------------------------------------------------------------------------


def serve(channel_fd: int) -> None:
    """Entry point of a worker interpreter: run each call read from stdin, answer each on ``channel_fd``."""
    import faulthandler
    import signal

    warm.mark("worker_process_start", timeline.process_start())
    warm.mark("worker_imports_done")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop us (Ctrl-C reaches both)
    faulthandler.enable()  # a crash prints the Python stack to stderr, which the parent keeps
    isolate.child_channel_fd = channel_fd
    isolate.forward_logs()
    calls: queue.Queue = queue.Queue()
    # reading stdin in a thread: EOF (the parent is gone) ends the worker even in the middle of a call
    threading.Thread(target=_read_calls, args=(sys.stdin.buffer, calls), daemon=True).start()
    while True:
        _answer(channel_fd, calls.get())


def _read_calls(stdin, calls: queue.Queue) -> None:
    try:
        while True:
            (size,) = isolate.HEADER.unpack(isolate.read_exact(stdin, isolate.HEADER.size))
            calls.put(isolate.read_exact(stdin, size))
    except (EOFError, OSError):
        pass
    os._exit(70)  # the parent died or gave up on us: stop working for nobody


def _answer(channel_fd: int, data: bytes) -> None:
    try:
        func, args, kwargs, options = isolate.unpickle_payload(data)
        del data
        _enter(options.get("cwd"))
        message = ("result", func(*args, **kwargs))
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
        message = isolate.error_message(exc)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        isolate.send(channel_fd, message)
    except Exception as exc:  # the result itself cannot be pickled
        text = f"the result could not be sent to the parent: {exc}"
        isolate.send(channel_fd, ("error", None, "", "TypeError", text))
    del message
    gc.collect()  # what the call built (TensorRT builders, networks, engine bytes) is freed before the next


def _enter(folder) -> None:
    try:
        if folder:
            os.chdir(folder)
    except OSError:  # the parent's folder is gone; absolute paths still work
        pass


# --- parent side -----------------------------------------------------------------------------------------------------


class Worker:
    """A child process that runs picklable calls one after another (see the module docstring).

    Args:
        warmup: ``(func, args)`` to run first, as soon as the worker starts; its answer (even an error) is dropped,
            the next call waits for it.
    """

    def __init__(self, warmup: tuple | None = None):
        self.pid_of_parent = os.getpid()
        self.environment = dict(os.environ)  # the child's, fixed at its start
        self._read_fd, write_fd = isolate.channel_pipe()
        try:
            self.proc = isolate.start_child(write_fd, entry="trtkit.builder.worker:serve")
        except BaseException:
            os.close(self._read_fd)
            raise
        finally:
            os.close(write_fd)
        self.pid = self.proc.pid
        self.marks = {"worker_spawned": timeline.now()}  # reported by the first call given ``marks``
        self._frames = isolate.FrameReader(self._read_fd)
        self._lines = isolate.LineReader(cast(IO[bytes], self.proc.stdout).fileno())
        self._closed = False
        self._warming = False
        if warmup is not None:
            func, args = warmup
            self._write(isolate.make_payload(func, tuple(args), {}, {}))
            self._warming = True

    @property
    def usable(self) -> bool:
        """Alive, not stopped, started by this process (a forked copy must not share its pipes), and this process's
        environment variables are still those the worker started with (``CUDA_VISIBLE_DEVICES`` set since, say)."""
        return (
            not self._closed
            and self.pid_of_parent == os.getpid()
            and self.proc.poll() is None
            and os.environ == self.environment
        )

    def call(self, func, *args, on_event=None, timeout: float | None = None, crash_context=None, marks=None, **kwargs):
        """Run ``func(*args, **kwargs)`` in the worker; same arguments, result and errors as
        :func:`~trtkit.builder.isolate.run_isolated`.

        ``marks``: a dict that gets this side's :mod:`~trtkit.builder.timeline` marks (``worker_spawned`` once per
        worker, ``call_sent``, ``result_received``).

        A crash, a timeout (counted from this call, warm-up included), Ctrl-C or a MemoryError stops the worker.
        """
        marks = {} if marks is None else marks
        marks.update(self.marks)
        self.marks = {}
        # the worker may have been started in another folder: relative paths resolve against this process's
        payload = isolate.make_payload(func, args, kwargs, {"cwd": os.getcwd()})
        deadline = None if timeout is None else time.monotonic() + timeout
        tracker = Tracker()
        try:
            if self._warming:
                self._warming = False
                if self._pump(tracker, _debug_event, deadline, timeout) is None:
                    return self._crashed(tracker, crash_context)
            self._write(payload)
            marks["call_sent"] = timeline.now()
            answer = self._pump(tracker, on_event, deadline, timeout)
            marks["result_received"] = timeline.now()
            if answer is None:
                return self._crashed(tracker, crash_context)
            if answer[0] == "result":
                return answer[1]
            error = isolate.rebuild_exception(answer, tracker, crash_context)
            if isinstance(error, IsolationError):  # out of memory or stopped: the worker's state is not to be trusted
                self.stop()
            raise error
        except Exception:
            if self.proc.poll() is not None:
                self.stop()
            raise
        except BaseException:  # Ctrl-C while waiting: the call cannot be cancelled, so the worker is stopped
            self.stop()
            raise

    def stop(self) -> None:
        """Stop the worker (SIGTERM, then SIGKILL) and close its pipes; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            isolate.stop_child(self.proc)
        finally:
            os.close(self._read_fd)
            isolate.close_quietly(self.proc.stdin)
            isolate.close_quietly(self.proc.stdout)

    def _write(self, payload: bytes) -> None:
        stdin = cast(IO[bytes], self.proc.stdin)
        try:
            stdin.write(isolate.HEADER.pack(len(payload)) + payload)
            stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the worker is gone: _pump sees its pipes close and words the crash

    def _pump(self, tracker: Tracker, on_event, deadline, timeout):
        """Deliver events until the answer; ``None`` when the worker died first."""
        frames, lines = self._frames, self._lines
        open_fds: dict[int, isolate.FrameReader | isolate.LineReader] = {self._read_fd: frames, lines.fd: lines}
        while open_fds:
            wait = 0.5 if deadline is None else max(0.0, min(0.5, deadline - time.monotonic()))
            ready, _, _ = select.select(list(open_fds), [], [], wait)
            for fd in ready:
                if not open_fds[fd].fill():
                    del open_fds[fd]
            for line in lines.take():
                isolate.deliver({"kind": "output", "line": line}, tracker, on_event)
            for item in frames.take():
                if item[0] == "event":
                    isolate.deliver(item[1], tracker, on_event)
                else:  # the answer: what the worker printed before it is in the pipe already
                    self._drain(tracker, on_event)
                    return item
            if deadline is not None and time.monotonic() >= deadline:
                self.stop()
                raise timeout_error(timeout, tracker)
        for line in lines.flush():
            isolate.deliver({"kind": "output", "line": line}, tracker, on_event)
        return None

    def _drain(self, tracker: Tracker, on_event) -> None:
        while select.select([self._lines.fd], [], [], 0)[0] and self._lines.fill():
            pass
        for line in self._lines.take():
            isolate.deliver({"kind": "output", "line": line}, tracker, on_event)

    def _crashed(self, tracker: Tracker, crash_context):
        from trtkit.builder.crash_report import crash_error

        returncode = self.proc.wait()
        self.stop()
        raise crash_error(tracker.crash_info(returncode, isolate.crash_details(crash_context)))


def _debug_event(event: dict) -> None:
    if event.get("kind") == "output":
        logger.debug("[worker warm-up] %s", event.get("line", ""))


# --- the process's idle worker ---------------------------------------------------------------------------------------

_lock = threading.Lock()
_idle: Worker | None = None


def acquire(warmup: tuple | None = None) -> Worker:
    """The idle worker if it is usable, else a new one (started with ``warmup``)."""
    global _idle
    with _lock:
        worker, _idle = _idle, None
    if worker is not None and worker.usable:
        return worker
    if worker is not None:
        worker.stop()
    return Worker(warmup)


def release(worker: Worker) -> None:
    """Give ``worker`` back after a call: kept as the idle worker if usable and none is kept yet, else stopped."""
    global _idle
    with _lock:
        keep = worker.usable and _idle is None
        if keep:
            _idle = worker
    if not keep:
        worker.stop()


def prestart(warmup: tuple | None = None) -> None:
    """Start the idle worker now (with ``warmup``) if there is no usable one, so that it warms up while this process
    goes on with its own work."""
    global _idle
    with _lock:
        if _idle is not None and _idle.usable:
            return
        old, _idle = _idle, None
    if old is not None:
        old.stop()
    release(Worker(warmup))


def shutdown() -> None:
    """Stop the idle worker (tests; a process need not call it: the worker exits with it)."""
    global _idle
    with _lock:
        worker, _idle = _idle, None
    if worker is not None:
        worker.stop()


def run(func, *args, warmup: tuple | None = None, **kwargs):
    """:meth:`Worker.call` on this process's idle worker (or a new one), given back afterwards."""
    worker = acquire(warmup)
    try:
        return worker.call(func, *args, **kwargs)
    finally:
        release(worker)
