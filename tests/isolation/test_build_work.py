"""What a build costs beyond the raw API's one import, one builder, one parse and one build: the heavy TensorRT calls
happen once, in the build worker only, and the build's phase log (``timings_s``) says when each step ended."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import isolation_children as children
import pytest
from onnx import TensorProto, helper

import trtkit.builder.isolate as isolate
from tests.fakes.fake_trt import make_fake_trt
from tests.fakes.fake_trt.trace import TRACE_ENV, read_trace, write_package
from trtkit.builder import timeline, warm, worker
from trtkit.builder.api import build, build_isolated
from trtkit.builder.builder import build_serialized
from trtkit.builder.config import BuildConfig
from trtkit.builder.progress import counted
from trtkit.errors import ParseError
from trtkit.log import make_trt_logger
from trtkit.manifest import read_manifest

DIGITS = Path(__file__).resolve().parent.parent / "data" / "digits_cnn.onnx"
SHAPES = "images:1x1x8x8,32x1x8x8,64x1x8x8"

# the steps of a fresh, isolated `trtkit build`, each at or after the one before it (the worker's start-up overlaps
# the caller's checks, so only each process's own order, and the hand-overs between them, are fixed)
CALLER = ["process_start", "build_called", "worker_spawned", "inputs_checked", "call_sent", "result_received",
          "written", "exit"]
WORKER = ["worker_process_start", "worker_imports_done", "build_modules_imported", "tensorrt_imported",
          "builder_created", "worker_ready", "call_received", "build_started", "model_loaded", "builder_ready",
          "prepared", "parsed", "configured", "built", "serialized", "detail_done"]

# what trtkit imports, beyond what this interpreter imported before it (cuda-bindings 12 installs a .pth file that
# imports the `cuda` package at every start-up: not trtkit's doing)
_SCRIPT = textwrap.dedent("""
    import json, sys
    before = set(sys.modules)
    from trtkit.cli.main import main
    for name in ("a", "b"):
        code = main(["build", sys.argv[1], "-o", name + ".engine", "--shapes", sys.argv[2], "--json", name + ".json"])
        assert code == 0, code
    heavy = sorted(m for m in set(sys.modules) - before if m.split(".")[0] in ("tensorrt", "cuda", "onnx_graphsurgeon"))
    print(json.dumps(heavy))
""")


def _in_order(timings: dict, steps: list) -> bool:
    return [timings[s] for s in steps] == sorted(timings[s] for s in steps)


def test_a_fresh_trtkit_build_does_the_heavy_work_once_and_only_in_its_worker(tmp_path):
    """Two `trtkit build`s in one fresh process, on a fake tensorrt that traces its heavy calls per process."""
    env = {**os.environ, "PYTHONPATH": str(write_package(tmp_path / "fake")), TRACE_ENV: str(tmp_path / "trace")}
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, str(DIGITS), SHAPES], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.splitlines()[-1]) == []  # the caller imports neither tensorrt nor cuda-python
    per_process = read_trace(tmp_path / "trace")
    assert len(per_process) == 1  # one process did TensorRT work: the build worker (the caller made no fake)
    (calls,) = per_process.values()
    # the raw script's one import, one Builder and one parse per build; no op-check parse; the layer detail's
    # deserialize, inspector and (dynamic shapes: formats need them set) execution context per build
    assert dict(calls) == {"import": 1, "Builder": 1, "parse": 2, "Runtime": 2, "deserialize_cuda_engine": 2,
                           "create_engine_inspector": 2, "create_execution_context": 2}

    first = json.loads((tmp_path / "a.json").read_text())["timings_s"]
    assert set(first) == set(CALLER + WORKER) and first["process_start"] == 0.0
    assert _in_order(first, CALLER) and _in_order(first, WORKER)
    assert first["worker_spawned"] <= first["worker_process_start"] + 0.05  # /proc's start has 10 ms ticks
    assert first["worker_ready"] <= first["call_sent"] <= first["call_received"]
    assert first["detail_done"] <= first["result_received"]
    second = json.loads((tmp_path / "b.json").read_text())["timings_s"]
    assert "worker_reused" in second and "worker_spawned" not in second and "tensorrt_imported" not in second
    # the manifest on disk was written before its own write: it has the steps up to the result
    saved = read_manifest(tmp_path / "a.engine").timings_s
    assert "result_received" in saved and "written" not in saved and "exit" not in saved


def _model(op="Relu", domain=""):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"], name=f"/m/{op}", domain=domain)], "m", [x], [y])
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(graph, opset_imports=opsets)


def test_a_model_that_parses_is_parsed_once_and_a_failed_parse_still_carries_the_op_table():
    trt = make_fake_trt()
    result = build_serialized(_model(), trt=trt)
    assert result.engine and trt.calls["parse"] == 1 and trt.calls["supports_model"] == 0
    assert _in_order(result.marks, ["build_started", "model_loaded", "builder_ready", "prepared", "parsed",
                                    "configured", "built", "serialized", "detail_done"])

    trt, phases = make_fake_trt(), []
    with pytest.raises(ParseError, match="No importer registered for op: NotARealOp") as info:
        build_serialized(_model("NotARealOp", "com.example"), trt=trt, on_phase=phases.append)
    report = info.value.report
    assert report is not None and [(r.op_type, r.status) for r in report.rows] == [("NotARealOp", "unsupported")]
    assert trt.calls["parse"] == 1 and trt.calls["supports_model"] == 1 and phases[-2:] == ["parse", "check"]

    trt = make_fake_trt()
    with pytest.raises(ParseError) as info:
        build_serialized(_model("NotARealOp", "com.example"), BuildConfig(check=False), trt=trt)
    assert info.value.report is None and trt.calls["supports_model"] == 0


def test_a_kept_builder_serves_one_build_at_a_time_and_its_logger_follows_that_build():
    trt = make_fake_trt()
    logger = make_trt_logger(trt, min_severity="ERROR")
    builder = trt.Builder(logger)
    warm.keep(trt, logger, builder)
    seen = []
    try:
        with warm.borrow(trt, "WARNING", lambda s, m: seen.append(m)) as (lent_logger, lent_builder):
            assert (lent_logger, lent_builder) == (logger, builder)
            with warm.borrow(trt, "INFO", None) as inner:  # a build inside the build makes its own
                assert inner == (None, None)
            logger.log(trt.ILogger.Severity.WARNING, "during")
        logger.log(trt.ILogger.Severity.WARNING, "after")  # back at ERROR, no sink: the build's sink hears nothing
        with warm.borrow(make_fake_trt(), "INFO", None) as other:  # another tensorrt module is not lent this one
            assert other == (None, None)
        result = build_serialized(_model(), trt=trt)
    finally:
        warm.forget()
    assert seen == ["during"] and trt.calls["Builder"] == 1 and result.engine


def test_process_start_is_when_the_process_began():
    code = "from trtkit.builder.timeline import now, process_start; print(now() - process_start())"
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    wall = time.monotonic() - started
    age = float(done.stdout)
    assert 0.0 < age <= wall + 0.02  # imports took some time; no more than the process lived (10 ms ticks)
    assert timeline.relative({"b": 12.5, "a": 10.0, "c": None}) == {"a": 0.0, "b": 2.5}
    assert timeline.relative({"process_start": 9.0, "x": 10.25}) == {"process_start": 0.0, "x": 1.25}


def test_an_isolated_build_sends_of_the_verbose_lines_only_those_its_progress_counts(monkeypatch):
    monkeypatch.setattr(isolate, "DEFAULT_TRT_FACTORY", functools.partial(children.fake_trt, "8.6.0"))
    worker.shutdown()
    try:
        lines: list = []
        build_isolated(_model(), on_log=lambda s, m: lines.append((s, m)), log_severity="WARNING", progress_lines=True)
        verbose = [m for s, m in lines if s == "VERBOSE"]
        assert verbose and all(counted(m) for m in verbose)  # the fake also logs "Fastest Tactic" lines: not sent
        lines.clear()
        build_isolated(_model(), on_log=lambda s, m: lines.append((s, m)), log_severity="WARNING")
        assert not [m for s, m in lines if s == "VERBOSE"]
        events: list = []
        build(_model(), on_progress=events.append)
        assert events[-1].phase == "inspect" and events[-1].layers_done == events[-1].layers_total == 1
    finally:
        worker.shutdown()
