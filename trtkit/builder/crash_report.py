"""What the parent knows when a child process dies, and the error message that says so.

:class:`Tracker` follows the child's events (the last ONNX node TensorRT's parser started importing, from its VERBOSE
log line ``Parsing node: <name> [<OpType>]``; the build phase; the last lines of output). When the child dies, it
becomes a :class:`CrashInfo`, and :func:`crash_error` words an :class:`~trtkit.errors.IsolationError` naming the
signal, the node, its op and the model's opset, with next steps.
"""

from __future__ import annotations

import collections
import os
import re
import signal
from dataclasses import dataclass, field

from trtkit.errors import IsolationError
from trtkit.model import LoadedModel

# onnx-tensorrt (ModelImporter.cpp, 8.x to 11.x): LOG_VERBOSE("Parsing node: " << nodeName << " [" << op << "]");
# some versions prefix "<file>:<line>: ", so search rather than match.
PARSING_NODE = re.compile(r"Parsing node: (?P<name>.*) \[(?P<op>[^\[\]]+)\]\s*$")
_OUTPUT_TAIL_LINES = 40


@dataclass
class CrashInfo:
    """What the parent knows about a child that died (attached to :class:`IsolationError` as ``.crash``)."""

    signal: str | None = None
    exit_code: int | None = None
    node: str | None = None
    op_type: str | None = None
    phase: str | None = None
    nodes_seen: int = 0
    output_tail: list = field(default_factory=list)
    context: dict = field(default_factory=dict)


class Tracker:
    """Follows the child's events: last ONNX node the parser started, last phase, last lines of output."""

    def __init__(self):
        self.node = self.op_type = self.phase = None
        self.nodes_seen = 0
        self.node_phase = None
        self.output = collections.deque(maxlen=_OUTPUT_TAIL_LINES)

    def see(self, event: dict) -> None:
        kind = event.get("kind")
        if kind == "log":
            found = PARSING_NODE.search(str(event.get("message", "")))
            if found:
                self.node, self.op_type = found.group("name"), found.group("op").strip()
                self.nodes_seen += 1
                self.node_phase = self.phase
        elif kind == "node":
            self.node, self.op_type = event.get("name"), event.get("op_type")
            self.nodes_seen += 1
            self.node_phase = self.phase
        elif kind == "phase":
            self.phase = event.get("name")
        elif kind == "output":
            self.output.append(str(event.get("line", "")))

    def crash_info(self, returncode: int, context: dict) -> CrashInfo:
        # a node counts only while its phase is still the current one (a crash later, in the build, is not its fault)
        importing = self.node is not None and self.node_phase == self.phase
        return CrashInfo(
            signal=_signal_name(-returncode) if returncode < 0 else None,
            exit_code=returncode,
            node=self.node if importing else None,
            op_type=self.op_type if importing else None,
            phase=self.phase,
            nodes_seen=self.nodes_seen,
            output_tail=list(self.output),
            context=context,
        )


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


_SIGNAL_MEANING = {
    "SIGSEGV": "a segmentation fault: invalid memory access inside native code",
    "SIGABRT": "an abort: native code hit a failed assertion or an uncaught C++ exception",
    "SIGBUS": "a bus error: invalid memory access inside native code",
    "SIGILL": "an illegal instruction inside native code",
    "SIGFPE": "an arithmetic fault inside native code",
    "SIGKILL": "killed, most often by the kernel's out-of-memory killer",
    "SIGTERM": "terminated by another process",
}


def crash_error(info: CrashInfo) -> IsolationError:
    if info.signal is None:
        text = (
            f"The worker process {_what(info)} exited with status {info.exit_code} without answering. "
            f"{_tail_hint(info)}"
        )
    elif info.signal == "SIGKILL":
        text = memory_message(info)
    else:
        meaning = _SIGNAL_MEANING.get(info.signal, "killed by a signal")
        text = (
            f"The worker process {_what(info)} died from {info.signal} ({meaning}){_where(info)}. "
            f"This process is unharmed and no files were written. {_next_steps(info)}"
        )
    error = IsolationError(text.strip())
    error.crash = info
    return error


def _what(info: CrashInfo) -> str:
    what = info.context.get("what")
    model = info.context.get("model")
    if what and model:
        return f"running {what} of '{model}'"
    if what:
        return f"running {what}"
    return f"working on '{model}'" if model else "doing the work"


def _where(info: CrashInfo) -> str:
    opset = info.context.get("opset")
    if info.node is not None:
        detail = f"op {info.op_type}" + (f", model opset {opset}" if opset else "")
        return f" while TensorRT's ONNX parser was importing node '{info.node}' ({detail})"
    opset_text = f" (model opset {opset})" if opset else ""
    if info.phase:
        return f" during the '{info.phase}' phase{opset_text}"
    return opset_text


def _next_steps(info: CrashInfo) -> str:
    trt_version = info.context.get("trt_version")
    newer = f"a newer TensorRT than {trt_version}" if trt_version else "a newer TensorRT"
    steps = [
        "trtkit's op check shows which ops this TensorRT supports",
        "build with constant folding on, to fold constant subgraphs before parsing",
        f"try {newer}",
    ]
    if info.node is not None and info.op_type:
        steps.insert(1, f"rewrite or replace the {info.op_type} node '{info.node}'")
    return "Next: " + "; ".join(steps) + "."


def memory_message(info: CrashInfo) -> str:
    cause = (
        "killed by SIGKILL, most often the kernel's out-of-memory killer" if info.signal == "SIGKILL" else "MemoryError"
    )
    return (
        f"The worker process {_what(info)} ran out of memory{_where(info)} ({cause}). This process is unharmed "
        "and no files were written. Free memory, lower workspace_bytes, or build with smaller "
        "optimization profiles."
    )


def _tail_hint(info: CrashInfo) -> str:
    tail = [line for line in info.output_tail if line.strip()][-3:]
    return ("Its last output: " + " | ".join(tail)) if tail else "It printed nothing."


def timeout_error(timeout: float, tracker: Tracker) -> IsolationError:
    info = tracker.crash_info(0, {})
    where = f" (last ONNX node started: '{info.node}' [{info.op_type}])" if info.node else ""
    phase = f" in the '{info.phase}' phase" if info.phase else ""
    error = IsolationError(
        f"The worker process did not finish within {timeout:g} s{phase}{where} and was stopped; "
        "no files were written. Raise the timeout or simplify the model."
    )
    error.crash = info
    return error


# --- context for the message ---------------------------------------------------------------------------------------


def model_crash_context(model, what: str | None = None) -> dict:
    """``crash_context`` for :func:`run_isolated`: the model's label and opset, and the installed TensorRT version.

    Never raises: wording a crash report must not fail (a missing piece is left out).
    """
    context = {"what": what} if what else {}
    try:
        label, opset = _model_label_and_opset(model)
        context.update(model=label, opset=opset)
    except Exception:
        pass
    version = installed_trt_version()
    if version:
        context["trt_version"] = version
    return context


def _model_label_and_opset(model):
    import onnx

    if isinstance(model, LoadedModel):
        return (str(model.path) if model.path else model.name), model.opset
    if isinstance(model, (str, os.PathLike)):
        proto = onnx.load(os.fspath(model), load_external_data=False)
        label = os.fspath(model)
    elif isinstance(model, (bytes, bytearray, memoryview)):
        proto, label = onnx.load_from_string(bytes(model)), None
    else:
        proto, label = model, None
    label = label or proto.graph.name or "model"
    return label, max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=None)


def installed_trt_version() -> str | None:
    """The installed TensorRT's version (package metadata first; else by importing it, which starts no CUDA)."""
    from importlib import metadata

    for name in ("tensorrt", "tensorrt-cu12", "tensorrt-cu13", "tensorrt-cu12-bindings", "tensorrt-bindings"):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    try:
        import tensorrt

        return str(tensorrt.__version__)
    except Exception:  # not installed, or its libraries are missing
        return None
