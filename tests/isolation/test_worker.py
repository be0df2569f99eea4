"""The warm worker: calls run one after another in one child process, a crash is contained and reported like a
one-shot child's, and the next call gets a new worker; isolated builds reuse it."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import isolation_children as children
import onnx
import pytest
from onnx import TensorProto, helper
from test_isolate import _alive

import trtkit.builder.isolate as isolate
from trtkit.builder import worker
from trtkit.builder.api import build
from trtkit.errors import IsolationError, ParseError

CONTEXT = {"model": "attn.onnx", "opset": 21, "trt_version": "8.6.0", "what": "the build"}


@pytest.fixture(autouse=True)
def no_idle_worker():
    worker.shutdown()
    yield
    worker.shutdown()


def test_calls_run_one_after_another_in_one_child():
    first, second = worker.run(children.pid), worker.run(children.pid)
    assert first == second != os.getpid()
    assert worker.run(children.add, 2, 3, scale=4) == 20


def test_each_calls_output_and_events_reach_that_call():
    seen = {1: [], 2: []}
    for call in (1, 2):
        worker.run(children.stream_then_return, 3, on_event=seen[call].append)
    for events in seen.values():
        assert [e["i"] for e in events if e["kind"] == "progress"] == [0, 1, 2]
        assert [e["line"] for e in events if e["kind"] == "output"] == ["hello from the child's stdout"]


def test_an_exception_comes_back_and_the_worker_stays():
    before = worker.run(children.pid)
    with pytest.raises(ParseError, match="no importer") as info:
        worker.run(children.raise_parse_error)
    assert info.value.errors == ["issue"]
    assert worker.run(children.pid) == before


def test_a_crash_is_reported_and_the_next_call_gets_a_new_worker():
    before = worker.run(children.pid)
    with pytest.raises(IsolationError) as info:
        worker.run(children.parse_then_crash, "SIGSEGV", crash_context=CONTEXT)
    message = str(info.value)
    assert "SIGSEGV" in message and "importing node '/attn/Where' (op Where, model opset 21)" in message
    assert info.value.crash.signal == "SIGSEGV"
    after = worker.run(children.pid)
    assert after != before and not _alive(before)


def test_a_timeout_stops_the_worker(tmp_path):
    marker = tmp_path / "pid"
    with pytest.raises(IsolationError, match="did not finish within 1 s in the 'sleep' phase"):
        worker.run(children.sleep_forever, str(marker), timeout=1)
    stopped = int(marker.read_text())
    assert not _alive(stopped)
    assert worker.run(children.pid) != stopped


def test_a_call_sees_this_process_folder(tmp_path, monkeypatch):
    worker.prestart()
    monkeypatch.chdir(tmp_path)
    assert Path(worker.run(children.cwd)).resolve() == tmp_path.resolve()


def test_a_warm_up_that_fails_does_not_fail_the_first_call():
    assert worker.run(children.add, 1, 1, warmup=(children.raise_value_error, ())) == 2


def _model(op="Relu", opset=17):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"], name=f"/m/{op}")], "m", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _pids(path: Path) -> list:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def test_isolated_builds_reuse_one_worker_and_a_crash_gets_a_new_one(tmp_path, monkeypatch):
    record = tmp_path / "pids"
    model = tmp_path / "m.onnx"
    onnx.save(_model(), model)
    monkeypatch.setattr(isolate, "DEFAULT_TRT_FACTORY", functools.partial(children.recording_fake_trt, str(record)))
    build(str(model), output=tmp_path / "a.engine")
    build(str(model), output=tmp_path / "b.engine")
    pids = set(_pids(record))  # the warm-up's and both builds' fake tensorrt: one process, not this one
    assert len(pids) == 1 and os.getpid() not in pids
    (warm,) = pids

    crashing = tmp_path / "crash.onnx"
    onnx.save(_where_model(), crashing)
    monkeypatch.setattr(isolate, "DEFAULT_TRT_FACTORY",
                        functools.partial(children.recording_crashing_fake_trt, str(record)))
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(IsolationError, match=r"SIGSEGV.*node '/m/Where' \(op Where, model opset 21\)"):
        build(str(crashing), output=out / "crash.engine")
    assert list(out.iterdir()) == []
    assert not _alive(warm)

    monkeypatch.setattr(isolate, "DEFAULT_TRT_FACTORY", functools.partial(children.recording_fake_trt, str(record)))
    result = build(str(model))
    assert result.engine
    assert _pids(record)[-1] not in (warm, os.getpid())


def _where_model():
    shapes = [("c", TensorProto.BOOL), ("a", TensorProto.FLOAT), ("b", TensorProto.FLOAT)]
    inputs = [helper.make_tensor_value_info(n, t, [1, 4]) for n, t in shapes]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Where", ["c", "a", "b"], ["y"], name="/m/Where")], "w", inputs, [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


_SHIM = '''
import os, sys
with open(os.environ["SHIM_RECORD"], "a") as f:
    f.write(f"{os.getpid()}\\n")
from tests.fakes.fake_trt import make_fake_trt
sys.modules[__name__] = make_fake_trt("8.6.0")
'''


def test_the_parent_of_an_isolated_build_does_not_import_tensorrt(tmp_path):
    """A fresh process builds twice: tensorrt (a stand-in that records who imports it) is imported by one worker."""
    (tmp_path / "shim" / "tensorrt").mkdir(parents=True)
    (tmp_path / "shim" / "tensorrt" / "__init__.py").write_text(_SHIM)
    onnx.save(_model(), tmp_path / "m.onnx")
    script = textwrap.dedent("""
        import os, sys
        import trtkit
        trtkit.build("m.onnx", output="a.engine")
        trtkit.build("m.onnx", output="b.engine")
        print(os.getpid(), "tensorrt" in sys.modules)
    """)
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "shim"), "SHIM_RECORD": str(tmp_path / "record")}
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    parent, imported = done.stdout.split()
    importers = _pids(tmp_path / "record")
    assert imported == "False" and int(parent) not in importers
    assert len(set(importers)) == 1
    assert (tmp_path / "a.engine").stat().st_size and (tmp_path / "b.engine").stat().st_size


def test_a_changed_environment_gets_a_new_worker(monkeypatch):
    before = worker.run(children.pid)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert worker.run(children.env, "CUDA_VISIBLE_DEVICES") == "1"
    assert worker.run(children.pid) != before


def test_a_large_answer_after_many_events_comes_back_whole():
    events = []
    assert worker.run(children.stream_then_return, 2000, on_event=events.append) == "done"
    assert len([e for e in events if e["kind"] == "progress"]) == 2000
    assert worker.run(children.big_result, 5_000_001) == b"\x01" * 5_000_001
    assert worker.run(children.add, 1, 2) == 3  # the reader is back to small frames
