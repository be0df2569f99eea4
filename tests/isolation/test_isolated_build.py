"""trtkit.builder(..., isolate=True): the build runs in a child; a crash there raises here and writes nothing."""

from __future__ import annotations

import functools
import logging

import isolation_children as children
import onnx
import pytest
from onnx import TensorProto, helper

import trtkit.builder.isolate as isolate
from trtkit.builder.api import build, build_isolated
from trtkit.errors import IsolationError, ParseError


def _attention_like_model(opset=21):
    q = helper.make_tensor_value_info("q", TensorProto.FLOAT, [1, 4, 8])
    mask = helper.make_tensor_value_info("mask", TensorProto.BOOL, [1, 4, 4])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4, 8])
    nodes = [
        helper.make_node("Transpose", ["q"], ["kT"], name="/attn/Transpose", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kT"], ["scores"], name="/attn/MatMul"),
        helper.make_node("Constant", [], ["ninf"], name="/attn/NegInf",
                         value=helper.make_tensor("v", TensorProto.FLOAT, [], [-1e9])),
        helper.make_node("Where", ["mask", "scores", "ninf"], ["masked"], name="/attn/Where"),
        helper.make_node("Softmax", ["masked"], ["probs"], name="/attn/Softmax", axis=-1),
        helper.make_node("MatMul", ["probs", "q"], ["out"], name="/attn/MatMul_1"),
    ]
    graph = helper.make_graph(nodes, "attn", [q, mask], [out])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.fixture
def crashing_trt(monkeypatch):
    monkeypatch.setattr(isolate, "DEFAULT_TRT_FACTORY", functools.partial(children.crashing_fake_trt, "8.6.0"))


def test_parser_crash_raises_isolation_error_and_writes_nothing(tmp_path, crashing_trt):
    model_path = tmp_path / "attn.onnx"
    onnx.save(_attention_like_model(), model_path)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    with pytest.raises(IsolationError) as info:
        build(str(model_path), output=out_dir / "attn.engine")
    message = str(info.value)
    assert "SIGSEGV" in message
    assert "node '/attn/Where' (op Where, model opset 21)" in message
    assert "trtkit's op check shows which ops this TensorRT supports" in message
    assert list(out_dir.iterdir()) == []


def test_isolated_build_streams_phases_and_logs(monkeypatch):
    monkeypatch.setattr(isolate, "DEFAULT_TRT_FACTORY", functools.partial(children.fake_trt, "8.6.0"))
    phases, logs = [], []
    model = _attention_like_model(17)
    result = build_isolated(model, on_phase=phases.append, on_log=lambda s, m: logs.append((s, m)),
                            log_severity="VERBOSE")
    assert result.engine and result.manifest.to_json()["model"]["opset"] == 17
    assert phases == ["prepare", "parse", "configure", "build", "inspect"]  # the op check only after a failed parse
    assert ("VERBOSE", "Parsing node: /attn/Where [Where]") in logs


def test_isolated_build_hides_verbose_lines_below_the_asked_severity(monkeypatch):
    monkeypatch.setattr(isolate, "DEFAULT_TRT_FACTORY", functools.partial(children.fake_trt, "8.6.0"))
    logs = []
    build_isolated(_attention_like_model(17), on_log=lambda s, m: logs.append((s, m)), log_severity="INFO")
    assert not [line for line in logs if line[0] == "VERBOSE"]


def test_parse_error_in_child_comes_back_as_parse_error(monkeypatch):
    from tests.fakes.fake_trt.builder import UNSUPPORTED_OPS

    monkeypatch.setattr(isolate, "DEFAULT_TRT_FACTORY", functools.partial(children.fake_trt, "10.8.0"))
    op = sorted(UNSUPPORTED_OPS)[0]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"], name="odd", domain="com.example")], "g", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    with pytest.raises(ParseError, match=f"node 'odd' \\({op}\\)") as info:
        build_isolated(model)
    assert info.value.errors and info.value.errors[0].node_name == "odd"


def test_a_warning_the_build_worker_logs_reaches_the_callers_log(tmp_path, monkeypatch, capsys, caplog):
    """A default (isolated) build warns as an in-process build does: on the CLI's stderr, and as a record on the
    library caller's ``trtkit`` logger."""
    from trtkit.builder import worker
    from trtkit.builder.config import BuildConfig
    from trtkit.cli.main import main

    monkeypatch.setattr(isolate, "DEFAULT_TRT_FACTORY", functools.partial(children.fake_trt, "8.6.0"))
    worker.shutdown()
    model, cache = tmp_path / "m.onnx", tmp_path / "t.cache"
    onnx.save(_attention_like_model(17), model)
    warning = f"Timing cache '{cache}' does not load (not a TensorRT timing cache, or one TensorRT cannot read); "\
              "replacing it with a new one"
    try:
        cache.write_bytes(b"\x00not a timing cache")
        code = main(["build", str(model), "-o", str(tmp_path / "m.engine"), "--timing-cache", str(cache),
                     "--timing-cache-reset"])
        err = capsys.readouterr().err
        assert code == 0 and "".join(warning.split()) in "".join(err.split()), err  # rich wraps long lines
        cache.write_bytes(b"\x00not a timing cache")
        with caplog.at_level(logging.WARNING, logger="trtkit"):
            build(str(model), BuildConfig(timing_cache=str(cache), timing_cache_reset=True))
        assert [r.getMessage() for r in caplog.records if r.name == "trtkit"] == [warning]
    finally:
        worker.shutdown()
