"""`trtkit build`'s prepare options: --fold-constants / --save-sanitized / --no-check / --no-sanitize, and the op
table when the parser refuses the model, all from the build's one child process."""

from __future__ import annotations

import argparse
import functools
import json

import isolation_children as children
import onnx
import pytest
from onnx import TensorProto, helper

import trtkit.builder.isolate as isolate
from tests.sanitize import sanitize_models
from trtkit.cli.main import main
from trtkit.cli.options import add_prepare_options


@pytest.fixture(autouse=True)
def fake_parser(monkeypatch):
    monkeypatch.setattr(isolate, "DEFAULT_TRT_FACTORY",
                        functools.partial(children.fake_trt_with_support_query, "8.6.0"))
    monkeypatch.setenv("COLUMNS", "200")


def _args(*argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    add_prepare_options(parser)
    return parser.parse_args(list(argv))


def test_defaults_sanitize_fold_and_check():
    args = _args("m.onnx")
    assert (args.sanitize, args.fold_constants, args.check, args.save_sanitized) == (True, True, True, None)
    args = _args("m.onnx", "--no-sanitize", "--no-fold-constants", "--no-check", "--save-sanitized", "s.onnx")
    assert (args.sanitize, args.fold_constants, args.check, args.save_sanitized) == (False, False, False, "s.onnx")


def _build(path, *argv):
    return main(["build", str(path), "--profiling-verbosity", "NONE", *map(str, argv)])


def test_folding_in_the_build_saves_the_prepared_model_and_reports(tmp_path, capsys):
    path = tmp_path / "cos.onnx"
    onnx.save(sanitize_models.constant_of_shape_conv(), path)
    assert _build(path, "--save-sanitized", tmp_path / "s.onnx") == 0
    out = capsys.readouterr().out
    assert "folded 5 node(s)" in out and str(tmp_path / "s.onnx") in out
    assert [n.op_type for n in onnx.load(tmp_path / "s.onnx").graph.node] == ["Conv", "Relu"]
    manifest = json.loads((tmp_path / "cos.fp32.engine.manifest.json").read_text())
    assert [r["rewrite"] for r in manifest["prepare"]["rewrites"]] == ["fold-constants"]


def test_nothing_to_prepare_writes_nothing(tmp_path, capsys):
    path = tmp_path / "relu.onnx"
    onnx.save(sanitize_models.plain_relu(), path)
    assert _build(path, "--save-sanitized", tmp_path / "s.onnx") == 0
    out = capsys.readouterr().out
    assert "nothing to fold" in out and "none needed" in out
    # not a TTY: one plain line per phase, the build's with its layer count
    phases = [line.split(": ", 1)[1].split(" ")[0] for line in out.splitlines() if line.startswith("relu.onnx: ")]
    assert phases == ["prepare", "parse", "configure", "build", "inspect"]  # the op check only after a failed parse
    assert "layers (1 timed, 0 cached)" in out
    assert not (tmp_path / "s.onnx").exists()


def test_unsupported_op_fails_the_parse_with_the_table(tmp_path, capsys):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    graph = helper.make_graph([helper.make_node("NotARealOp", ["x"], ["y"], name="odd0", domain="com.example")],
                              "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    path = tmp_path / "odd.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                      helper.make_opsetid("com.example", 1)]), path)
    assert _build(path) == 1
    captured = capsys.readouterr()
    assert "NotARealOp" in captured.out and "unsupported" in captured.out
    assert "odd0" in captured.err
    assert not (tmp_path / "odd.engine").exists()


def test_no_check_builds_without_asking_the_parser(monkeypatch):
    from tests import models
    from tests.fakes.fake_trt import make_fake_trt
    from trtkit.builder import BuildConfig, build

    def refuse(*args, **kwargs):
        raise AssertionError("the op check must not run with check=False")

    monkeypatch.setattr("trtkit.builder.opcheck.check_with_parser", refuse)
    config = BuildConfig(check=False, profiling_verbosity="NONE")
    assert build(models.tiny_conv(dynamic_batch=False), config, trt=make_fake_trt()).engine
