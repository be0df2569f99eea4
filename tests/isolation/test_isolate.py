"""The isolation machinery: results, events, exceptions and crashes of a child process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import isolation_children as children
import pytest

from trtkit.builder.crash_report import model_crash_context
from trtkit.builder.isolate import ChildTraceback, run_isolated
from trtkit.errors import IsolationError, ParseError, ProfileError, TrtkitError

CONTEXT = {"model": "attn.onnx", "opset": 21, "trt_version": "8.6.0", "what": "the build"}


def test_returns_result_of_call_with_args_and_kwargs():
    assert run_isolated(children.add, 2, 3, scale=4) == 20


def test_large_result_comes_back_whole():
    assert run_isolated(children.big_result, 20_000_000) == b"\x01" * 20_000_000


def test_events_and_output_stream_in_order():
    events = []
    assert run_isolated(children.stream_then_return, 500, on_event=events.append) == "done"
    progress = [e["i"] for e in events if e["kind"] == "progress"]
    assert progress == list(range(500))
    assert events[-1] == {"kind": "output", "line": "hello from the child's stdout"}


def test_sigsegv_names_signal_node_op_opset_and_next_steps():
    with pytest.raises(IsolationError) as info:
        run_isolated(children.parse_then_crash, "SIGSEGV", crash_context=CONTEXT)
    message = str(info.value)
    assert "SIGSEGV" in message
    assert "importing node '/attn/Where' (op Where, model opset 21)" in message
    assert "trtkit's op check shows which ops this TensorRT supports" in message
    assert "build with constant folding on" in message and "newer TensorRT than 8.6.0" in message
    crash = info.value.crash
    assert (crash.signal, crash.node, crash.op_type, crash.nodes_seen) == ("SIGSEGV", "/attn/Where", "Where", 2)


def test_crash_after_parsing_names_the_phase_not_a_node():
    with pytest.raises(IsolationError, match=r"SIGSEGV .* during the 'build' phase \(model opset 21\)") as info:
        run_isolated(children.crash_during_build, crash_context=CONTEXT)
    assert info.value.crash.node is None


def test_real_segfault_in_native_code_is_contained():
    with pytest.raises(IsolationError, match="SIGSEGV") as info:
        run_isolated(children.segfault_via_ctypes)
    # faulthandler in the child prints the Python stack; the parent keeps it
    assert any("Segmentation fault" in line for line in info.value.crash.output_tail)


def test_abort_is_reported_as_sigabrt():
    with pytest.raises(IsolationError, match="SIGABRT .*failed assertion or an uncaught C\\+\\+ exception"):
        run_isolated(children.abort, crash_context=CONTEXT)


def test_memory_error_in_the_child_reports_out_of_memory():
    with pytest.raises(IsolationError, match="ran out of memory .*MemoryError"):
        run_isolated(children.run_out_of_memory)


def test_sigkill_is_reported_as_probable_oom_kill():
    with pytest.raises(IsolationError, match="ran out of memory .*SIGKILL, most often the kernel's out-of-memory"):
        run_isolated(children.sigkill_self)


def test_exit_without_answer_reports_status():
    with pytest.raises(IsolationError, match="exited with status 3 without answering"):
        run_isolated(children.exit_quietly)


@pytest.mark.parametrize("func, cls, text", [
    (children.raise_parse_error, ParseError, "node 'x' \\(Foo\\): no importer"),
    (children.raise_profile_error, ProfileError, "outside profile 0"),
    (children.raise_value_error, ValueError, "a bug, not bad input"),
    (children.raise_unpicklable, children.Unpicklable, "odd failure"),
])
def test_exceptions_come_back_with_class_and_message(func, cls, text):
    with pytest.raises(cls, match=text) as info:
        run_isolated(func)
    assert type(info.value) is cls
    assert isinstance(info.value.__cause__, ChildTraceback)
    assert func.__name__ in str(info.value.__cause__)


def test_parse_error_keeps_its_attributes():
    with pytest.raises(ParseError) as info:
        run_isolated(children.raise_parse_error)
    assert info.value.errors == ["issue"]


def test_unpicklable_function_is_refused_before_starting():
    with pytest.raises(TrtkitError, match="cannot be pickled.*isolate=False"):
        run_isolated(lambda: 1)


def test_unpicklable_result_is_an_error_not_a_hang():
    with pytest.raises(TypeError, match="could not be sent to the parent"):
        run_isolated(children.return_lambda)


def test_timeout_stops_the_child(tmp_path):
    marker = tmp_path / "pid"
    with pytest.raises(IsolationError, match="did not finish within 1 s in the 'sleep' phase"):
        run_isolated(children.sleep_forever, str(marker), timeout=1)
    assert not _alive(int(marker.read_text()))


# The parent script sets Python's own SIGINT handler: a process started with SIGINT ignored (a background job of a
# non-interactive shell, as CI runners start them) passes SIG_IGN on, and Python then installs no handler, so the
# test's SIGINT would be ignored rather than raise KeyboardInterrupt.
_PARENT = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, {children!r})
import isolation_children
from trtkit.builder import worker
from trtkit.builder.isolate import run_isolated
{setup}
print("ready", flush=True)
try:
    {runner}(isolation_children.sleep_forever, {marker!r})
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""
# the one-shot child, and the warm worker (started by a first call before the one interrupted)
RUNNERS = {"one-shot": ("", "run_isolated"), "warm worker": ("worker.run(isolation_children.pid)", "worker.run")}


def _start_parent(tmp_path, marker, runner="one-shot"):
    setup, call = RUNNERS[runner]
    script = _PARENT.format(children=str(Path(children.__file__).parent), marker=str(marker), setup=setup,
                            runner=call)
    token = f"trtkit-ctrl-c-{os.getpid()}-{time.monotonic_ns()}"
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "TRTKIT_TEST_TOKEN": token})
    assert parent.stdout.readline().strip() == "ready"
    return parent, token


@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_ctrl_c_in_parent_stops_the_child(tmp_path, runner):
    marker = tmp_path / "pid"
    parent, token = _start_parent(tmp_path, marker, runner)
    _wait_for(marker.exists)
    child_pid = int(marker.read_text())
    parent.send_signal(signal.SIGINT)
    out, _ = parent.communicate(timeout=30)
    assert "interrupted" in out and parent.returncode == 0
    _wait_for(lambda: not _alive(child_pid))
    assert _processes_with(token) == []


@pytest.mark.parametrize("delay", [0.0, 0.01, 0.03, 0.08, 0.2])
def test_ctrl_c_while_the_child_starts_stops_both(tmp_path, delay):
    """A Ctrl-C as the child is being started (before it runs the function): parent and child both end."""
    parent, token = _start_parent(tmp_path, tmp_path / "pid")
    time.sleep(delay)
    parent.send_signal(signal.SIGINT)
    out, _ = parent.communicate(timeout=30)
    assert "interrupted" in out or parent.returncode != 0, out
    _wait_for(lambda: _processes_with(token) == [], timeout=20)


def _processes_with(token: str) -> list:
    """Live (non-zombie) processes whose environment holds ``token``: the parent script and its children."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if token.encode() in f.read() and _alive(int(entry)):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def test_model_crash_context_reads_label_and_opset(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]), path)
    context = model_crash_context(str(path), "the check")
    assert context["model"] == str(path) and context["opset"] == 19 and context["what"] == "the check"
    assert "model" not in model_crash_context(b"not onnx")  # never raises, leaves out what it cannot read


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie counts as gone: it is only waiting to be reaped
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _wait_for(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")
