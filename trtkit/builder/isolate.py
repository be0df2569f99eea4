"""Run work in a child process, so a crash inside TensorRT raises an error here instead of killing this process.

TensorRT's ONNX parser can segfault on valid models, which Python cannot catch. :func:`run_isolated` runs a picklable
callable in a fresh interpreter and returns its result, streaming the child's events (TensorRT log lines, build
phases) as they happen; if the child dies by a signal, :class:`~trtkit.errors.IsolationError` names it and, from
TensorRT's VERBOSE log, the ONNX node being imported.

A fresh interpreter rather than ``multiprocessing``: forking a process that may hold a CUDA context is unsafe, and
``spawn``/``forkserver`` re-import the caller's ``__main__``, re-running unguarded scripts. POSIX only.

Protocol: the parent writes one pickled ``(sys.path, func, args, kwargs, options)`` frame to the child's stdin and
keeps it open (the child exits when it closes); the child writes ``("event", dict)`` frames, then ``("result",
value)`` or ``("error", exception, traceback_text)``, to a dedicated pipe. Its stdout and stderr come as ``output``
events, and what it logs to trtkit's logger as ``record`` events that the parent logs again, as if it had run here.
"""

from __future__ import annotations

import logging
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from typing import IO, Callable, cast

import trtkit
from trtkit.builder.crash_report import (
    PARSING_NODE,
    Tracker,
    crash_error,
    memory_message,
    timeout_error,
)
from trtkit.builder.progress import counted
from trtkit.errors import IsolationError, TrtkitError

HEADER = struct.Struct("!Q")
_PIPE_BYTES = 1 << 20
_LARGE_FRAME = 1 << 20
_TERMINATE_GRACE_S = 5.0

# --- child side ------------------------------------------------------------------------------------------------------

child_channel_fd: int | None = None
_channel_lock = threading.Lock()


def emit(event: dict) -> None:
    """Send an event to the parent's ``on_event`` callback.

    In a child started by :func:`run_isolated` the event travels through the pipe; in a plain process it goes nowhere.
    Never raises (it is called from TensorRT's logger).
    """
    try:
        if child_channel_fd is not None:
            send(child_channel_fd, ("event", dict(event)))
    except Exception:  # an event lost is better than an exception inside TensorRT's callback
        pass


def log_sink(severity: str, message: str) -> None:
    """Picklable ``on_log`` for code run in the child: emits ``{"kind": "log", "severity", "message"}``."""
    emit({"kind": "log", "severity": str(severity), "message": str(message)})


class _RecordSink(logging.Handler):
    """Sends each log record of the child to the parent as a ``record`` event (see :func:`forward_logs`)."""

    def emit(self, record: logging.LogRecord) -> None:
        emit({"kind": "record", "name": record.name, "level": record.levelno, "message": record.getMessage()})


def forward_logs() -> None:
    """In a child: send what trtkit's logger (and Python's warnings) record to the parent instead of this process's
    stderr; the parent logs each record again (:func:`deliver`)."""
    logging.captureWarnings(True)
    for name in ("trtkit", "py.warnings"):
        child_logger = logging.getLogger(name)
        child_logger.addHandler(_RecordSink())
        child_logger.propagate = False


def deliver(event: dict, tracker: Tracker, on_event) -> None:
    """An event of a child, in the parent: seen by the crash tracker, a log record logged again here, then passed to
    ``on_event``."""
    tracker.see(event)
    if event.get("kind") == "record":
        logging.getLogger(str(event.get("name", "trtkit"))).log(
            int(event.get("level", logging.WARNING)), "%s", event.get("message", "")
        )
    if on_event is not None:
        on_event(event)


def phase_sink(*args) -> None:
    """Picklable ``on_phase`` for code run in the child: emits ``{"kind": "phase", "name", "args"}``."""
    emit({"kind": "phase", "name": str(args[0]) if args else "", "args": list(args)})


def send(fd: int, message) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    with _channel_lock:  # header and data written apart: an engine's bytes are not copied once more to join them
        _write_all(fd, HEADER.pack(len(data)))
        _write_all(fd, data)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def read_exact(stream, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            raise EOFError("parent closed the pipe")
        data += chunk
    return data


def _child_main(channel_fd: int) -> None:
    """Entry point of the child interpreter (see the module docstring for the protocol)."""
    global child_channel_fd
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop us (Ctrl-C reaches both)
    import faulthandler

    faulthandler.enable()  # a crash prints the Python stack to stderr, which the parent keeps
    forward_logs()
    stdin = sys.stdin.buffer
    (size,) = HEADER.unpack(read_exact(stdin, HEADER.size))
    data = read_exact(stdin, size)
    child_channel_fd = channel_fd
    threading.Thread(target=_exit_when_parent_goes, args=(stdin,), daemon=True).start()
    try:
        func, args, kwargs, _ = unpickle_payload(data)
        del data
        message = ("result", func(*args, **kwargs))
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
        message = error_message(exc)
    _finish(channel_fd, message)


def unpickle_payload(data: bytes):
    # sys.path first: the callable's module may live in a folder only the parent had on its path (tests, scripts)
    (size,) = HEADER.unpack_from(data, 0)
    for entry in reversed(pickle.loads(data[HEADER.size : HEADER.size + size])):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    return pickle.loads(data[HEADER.size + size :])


def _exit_when_parent_goes(stdin) -> None:
    try:
        while stdin.read(1 << 16):
            pass
    except OSError:
        pass
    os._exit(70)  # the parent died or gave up on us: stop building for nobody


def error_message(exc: BaseException):
    import traceback

    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    exc.__traceback__ = None
    try:
        pickle.loads(pickle.dumps(exc))
        return ("error", exc, text)
    except Exception:  # an exception that does not survive pickling: keep its class name and message
        return ("error", None, text, f"{type(exc).__module__}.{type(exc).__qualname__}", str(exc))


def _finish(channel_fd: int, message) -> None:
    try:
        send(channel_fd, message)
    except Exception as exc:  # the result itself cannot be pickled
        send(channel_fd, ("error", None, "", "TypeError", f"the result could not be sent to the parent: {exc}"))
    sys.stdout.flush()
    sys.stderr.flush()
    # skip interpreter teardown: TensorRT objects destroyed at exit have crashed processes that already succeeded
    os._exit(0)


# --- parent side -----------------------------------------------------------------------------------------------------


def run_isolated(
    func,
    *args,
    on_event: Callable[[dict], None] | None = None,
    timeout: float | None = None,
    crash_context=None,
    **kwargs,
):
    """Call ``func(*args, **kwargs)`` in a child Python process and return its result.

    Args:
        func: a picklable callable (a module-level function, or ``functools.partial`` of one). It may call
            :func:`emit` (or pass :func:`log_sink` / :func:`phase_sink` as callbacks) to stream events.
        *args, **kwargs: its arguments, picklable. The keywords below belong to ``run_isolated`` itself.
        on_event: called in this process, in order, with each event dict the child emits, plus
            ``{"kind": "output", "line": ...}`` for each line the child writes to stdout/stderr.
        timeout: seconds before the child is stopped and :class:`IsolationError` raised (``None``: no limit).
        crash_context: dict, or callable returning one, used only to word a crash: ``model`` (a label),
            ``opset``, ``trt_version``, ``what`` (e.g. "the build").

    Returns:
        What ``func`` returned.

    Raises:
        IsolationError: the child died by a signal (message names it, and the ONNX node being parsed when known),
            ran out of memory, exited without answering, or exceeded ``timeout``. The error has a ``.crash``
            attribute (:class:`~trtkit.builder.crash_report.CrashInfo`).
        Exception: an exception raised by ``func`` is raised again here, same class and message (its traceback in
            the child is chained as the cause).
        KeyboardInterrupt: Ctrl-C; the child is stopped first.
    """
    payload = make_payload(func, args, kwargs, {})
    tracker = Tracker()
    read_fd, write_fd = channel_pipe()
    proc: subprocess.Popen | None = None
    # Ctrl-C (KeyboardInterrupt) may arrive at any line from here on: every path out stops the child once it exists,
    # and the child, which ignores SIGINT, also exits by itself when its stdin closes (see _exit_when_parent_goes).
    try:
        try:
            proc = start_child(write_fd)
        finally:
            os.close(write_fd)
        stdin = cast(IO[bytes], proc.stdin)  # the child is started with stdin=PIPE
        stdin.write(HEADER.pack(len(payload)) + payload)
        stdin.flush()
        outcome = _pump(proc, read_fd, tracker, on_event, timeout)
        return _resolve(outcome, proc, tracker, crash_context)
    except BaseException:
        if proc is not None:
            stop_child(proc)
        raise
    finally:
        os.close(read_fd)
        if proc is not None:
            close_quietly(proc.stdin)
            close_quietly(proc.stdout)


def channel_pipe() -> tuple:
    """``(read_fd, write_fd)`` of a new pipe for a child's frames, its buffer enlarged where Linux allows (fewer
    round trips between the two processes for a large answer such as an engine)."""
    read_fd, write_fd = os.pipe()
    try:
        import fcntl

        fcntl.fcntl(read_fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), _PIPE_BYTES)
    except (ImportError, OSError):  # not Linux, or over /proc/sys/fs/pipe-max-size: the default size works too
        pass
    return read_fd, write_fd


def make_payload(func, args, kwargs, options) -> bytes:
    path_part = pickle.dumps([p for p in sys.path if p], protocol=pickle.HIGHEST_PROTOCOL)
    try:
        rest = pickle.dumps((func, args, kwargs, options), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise TrtkitError(
            f"Cannot run {getattr(func, '__qualname__', func)!r} in a child process: its function or arguments "
            f"cannot be pickled ({exc}). Pass module-level functions and plain data, or build with isolate=False."
        ) from exc
    return HEADER.pack(len(path_part)) + path_part + rest


def start_child(write_fd: int, entry: str = "trtkit.builder.isolate:_child_main") -> subprocess.Popen:
    """A new interpreter running ``entry`` (``module:function``, called with the channel's fd)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(trtkit.__file__)))
    module, _, function = entry.partition(":")
    # SIGINT ignored first of all: a Ctrl-C reaching the child while it starts must not kill it half-way (the parent
    # gets the same Ctrl-C and stops it)
    code = (
        f"import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); import sys; sys.path.insert(0, {root!r}); "
        f"from {module} import {function}; {function}({write_fd})"
    )
    try:
        return subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            pass_fds=(write_fd,),
            close_fds=True,
        )
    except OSError as exc:
        raise IsolationError(f"Could not start a child Python process ({sys.executable}): {exc}") from exc


def _pump(proc, read_fd: int, tracker: Tracker, on_event, timeout):
    """Deliver events until the child answers or both its pipes close; returns the answer or ``None``."""
    deadline = None if timeout is None else time.monotonic() + timeout
    frames, lines = FrameReader(read_fd), LineReader(proc.stdout.fileno())
    open_fds: dict[int, FrameReader | LineReader] = {read_fd: frames, proc.stdout.fileno(): lines}
    answer = None
    while open_fds:
        wait = 0.5 if deadline is None else max(0.0, min(0.5, deadline - time.monotonic()))
        ready, _, _ = select.select(list(open_fds), [], [], wait)
        for fd in ready:
            reader = open_fds[fd]
            if not reader.fill():
                del open_fds[fd]
            for item in reader.take():
                if reader is lines:
                    item = ("event", {"kind": "output", "line": item})
                if item[0] == "event":
                    deliver(item[1], tracker, on_event)
                else:
                    answer = item
        if deadline is not None and time.monotonic() >= deadline and answer is None:
            stop_child(proc)
            raise timeout_error(timeout, tracker)
        if answer is not None and read_fd not in open_fds:
            break
    for line in lines.flush():
        deliver({"kind": "output", "line": line}, tracker, on_event)
    return answer


class FrameReader:
    """Frames from a pipe. Small frames (events) gather in one buffer; a large one (an answer holding an engine) is
    read straight into a buffer of its own size, and unpickled from there without a copy."""

    def __init__(self, fd: int):
        self.fd, self.buffer = fd, bytearray()
        self.large: bytearray | None = None
        self.filled = 0

    def fill(self) -> bool:
        if self.large is not None:
            with memoryview(self.large) as view:
                count = os.readv(self.fd, [view[self.filled :]])
            self.filled += count
            return bool(count)
        chunk = os.read(self.fd, _PIPE_BYTES)
        self.buffer += chunk
        if len(self.buffer) >= HEADER.size:
            (size,) = HEADER.unpack_from(self.buffer)
            if size >= _LARGE_FRAME and len(self.buffer) < HEADER.size + size:
                self.large = bytearray(size)
                self.filled = len(self.buffer) - HEADER.size
                self.large[: self.filled] = self.buffer[HEADER.size :]
                self.buffer.clear()
        return bool(chunk)

    def take(self) -> list:
        items: list = []
        if self.large is not None:
            if self.filled < len(self.large):
                return items
            frame, self.large = self.large, None
            items.append(_loads(frame))
        while len(self.buffer) >= HEADER.size:
            (size,) = HEADER.unpack_from(self.buffer)
            if len(self.buffer) < HEADER.size + size:
                break
            with memoryview(self.buffer) as view:
                item = _loads(view[HEADER.size : HEADER.size + size])
            del self.buffer[: HEADER.size + size]
            items.append(item)
        return items


def _loads(frame):
    try:
        return pickle.loads(frame)
    except Exception as exc:  # e.g. the answer's class cannot be imported here
        return (
            "error",
            None,
            "",
            "trtkit.errors.IsolationError",
            f"The worker process answered, but its answer cannot be read here: {exc}",
        )


class LineReader:
    def __init__(self, fd: int):
        self.fd, self.buffer = fd, b""

    def fill(self) -> bool:
        chunk = os.read(self.fd, 1 << 16)
        self.buffer += chunk
        return bool(chunk)

    def take(self) -> list:
        *complete, self.buffer = self.buffer.split(b"\n")
        return [line.decode("utf-8", "replace").rstrip("\r") for line in complete]

    def flush(self) -> list:
        rest, self.buffer = self.buffer, b""
        return [rest.decode("utf-8", "replace")] if rest.strip() else []


def stop_child(proc: subprocess.Popen) -> None:
    """Terminate the child: SIGTERM, then SIGKILL if it does not exit within a few seconds, or at once if this wait
    is itself interrupted (a second Ctrl-C must not leave the child running)."""
    if proc.poll() is not None:
        return
    try:
        proc.terminate()
        proc.wait(timeout=_TERMINATE_GRACE_S)
    except BaseException as exc:  # TimeoutExpired, or KeyboardInterrupt while waiting
        try:
            proc.kill()
            proc.wait(timeout=_TERMINATE_GRACE_S)
        except (OSError, subprocess.TimeoutExpired):
            pass
        if not isinstance(exc, subprocess.TimeoutExpired):
            raise


def close_quietly(stream) -> None:
    try:
        if stream is not None:
            stream.close()
    except OSError:
        pass


def _resolve(outcome, proc: subprocess.Popen, tracker: Tracker, crash_context):
    returncode = proc.wait()
    if outcome is not None and outcome[0] == "result":
        return outcome[1]  # answered; a crash while tearing down afterwards does not matter
    if outcome is not None and outcome[0] == "error":
        raise rebuild_exception(outcome, tracker, crash_context)
    raise crash_error(tracker.crash_info(returncode, crash_details(crash_context)))


def crash_details(crash_context) -> dict:
    try:
        value = crash_context() if callable(crash_context) else crash_context
    except Exception:  # wording a crash must not fail
        return {}
    return dict(value or {})


class ChildTraceback(Exception):
    """The traceback of an exception raised in the child process (chained as ``__cause__``)."""

    def __str__(self) -> str:
        return "\n" + (self.args[0] if self.args else "")


def rebuild_exception(outcome, tracker: Tracker, crash_context) -> BaseException:
    exc, text = outcome[1], outcome[2]
    if exc is None:
        exc = _from_name(outcome[3], outcome[4])
    if isinstance(exc, MemoryError):
        info = tracker.crash_info(0, crash_details(crash_context))
        error = IsolationError(memory_message(info))
        error.crash = info
        return error
    if not isinstance(exc, Exception):  # SystemExit, KeyboardInterrupt...: the child stopped, not a failure mode
        error = IsolationError(f"The worker process stopped with {type(exc).__name__}({exc}) before answering.")
        error.crash = tracker.crash_info(0, crash_details(crash_context))
        return error
    if text:
        exc.__cause__ = ChildTraceback(text)
    return exc


def _from_name(qualified: str, message: str) -> BaseException:
    import importlib

    module, _, name = qualified.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module or "builtins"), name)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            exc = cls.__new__(cls)
            Exception.__init__(exc, message)
            return exc
    except Exception:
        pass
    return TrtkitError(f"{qualified}: {message}")


# --- the isolated build ----------------------------------------------------------------------------------------------

# Where the child gets its ``tensorrt`` module: ``None`` imports the installed one; CPU tests set a picklable factory
# (a module-level function returning a fake module) here or pass ``trt_factory``.
DEFAULT_TRT_FACTORY: Callable[[], object] | None = None

_SEVERITY_RANK = {"VERBOSE": 0, "INFO": 1, "WARNING": 2, "ERROR": 3, "INTERNAL_ERROR": 4}


class ChildLog:
    """TensorRT log sink in the child: node lines become compact ``node`` events, the rest is filtered by severity;
    with ``progress``, the lines below it that build progress counts (:func:`trtkit.builder.progress.counted`) are
    sent too."""

    def __init__(self, min_severity: str, progress: bool = False):
        self.threshold = _SEVERITY_RANK.get(min_severity, 1)
        self.progress = progress

    def __call__(self, severity: str, message: str) -> None:
        rank = _SEVERITY_RANK.get(severity, 1)
        if rank == 0:
            found = PARSING_NODE.search(message)
            if found:
                emit({"kind": "node", "name": found.group("name"), "op_type": found.group("op").strip()})
        if rank >= self.threshold or (self.progress and counted(message)):
            log_sink(severity, message)
