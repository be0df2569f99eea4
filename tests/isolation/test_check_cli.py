"""CLI glue for `trtkit build`: --fold-constants / --save-sanitized / --no-check, and stopping early with the table."""

from __future__ import annotations

import argparse
import functools
import io

import isolation_children as children
import onnx
import pytest
from onnx import TensorProto, helper

import trtkit.builder.isolate as isolate
from tests.sanitize import sanitize_models
from trtkit.cli.check_render import add_preflight_options, prepare_for_build
from trtkit.errors import ModelError


@pytest.fixture(autouse=True)
def fake_parser(monkeypatch):
    monkeypatch.setattr(isolate, "DEFAULT_TRT_FACTORY",
                        functools.partial(children.fake_trt_with_support_query, "8.6.0"))


def _args(*argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    add_preflight_options(parser)
    return parser.parse_args(list(argv))


def _console():
    from rich.console import Console

    out = io.StringIO()
    return Console(file=out, width=140, no_color=True), out


def test_defaults_fold_and_check():
    args = _args("m.onnx")
    assert (args.fold_constants, args.check, args.save_sanitized) == (True, True, None)
    args = _args("m.onnx", "--no-fold-constants", "--no-check", "--save-sanitized", "s.onnx")
    assert (args.fold_constants, args.check, args.save_sanitized) == (False, False, "s.onnx")


def test_folding_replaces_the_model_saves_it_and_reports(tmp_path):
    path = tmp_path / "cos.onnx"
    onnx.save(sanitize_models.constant_of_shape_conv(), path)
    console, _ = _console()
    model, notes = prepare_for_build(_args(str(path), "--save-sanitized", str(tmp_path / "s.onnx")), console)
    assert [n.op_type for n in model.graph.node] == ["Conv", "Relu"]
    assert notes["constant folding"].startswith("folded 5 node(s)")
    assert notes["sanitized model"] == str(tmp_path / "s.onnx")
    assert [n.op_type for n in onnx.load(tmp_path / "s.onnx").graph.node] == ["Conv", "Relu"]


def test_nothing_to_fold_keeps_the_path_and_writes_nothing(tmp_path):
    path = tmp_path / "relu.onnx"
    onnx.save(sanitize_models.plain_relu(), path)
    console, _ = _console()
    model, notes = prepare_for_build(_args(str(path), "--save-sanitized", str(tmp_path / "s.onnx")), console)
    assert model == str(path)
    assert notes == {"constant folding": "nothing to fold"}
    assert not (tmp_path / "s.onnx").exists()


def test_unsupported_op_stops_before_the_build_with_the_table(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    graph = helper.make_graph([helper.make_node("NotARealOp", ["x"], ["y"], name="odd0", domain="com.example")],
                              "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    path = tmp_path / "odd.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                      helper.make_opsetid("com.example", 1)]), path)
    console, out = _console()
    with pytest.raises(ModelError, match="cannot import 1 node\\(s\\) of .*'odd0' \\(NotARealOp\\)") as info:
        prepare_for_build(_args(str(path)), console)
    assert info.value.report.unsupported_nodes[0].name == "odd0"
    assert "NotARealOp" in out.getvalue() and "unsupported" in out.getvalue()


def test_no_check_skips_the_parser_query(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("preflight must not run with --no-check")

    monkeypatch.setattr("trtkit.builder.opcheck.preflight", refuse)
    path = tmp_path / "relu.onnx"
    onnx.save(sanitize_models.plain_relu(), path)
    console, _ = _console()
    model, _ = prepare_for_build(_args(str(path), "--no-check"), console)
    assert model == str(path)
