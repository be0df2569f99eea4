"""Pre-flight op check: the parser's own answer, node names, static notes, crash containment, rendering."""

from __future__ import annotations

import functools
import io

import isolation_children as children
import onnx
import pytest
from onnx import TensorProto, helper

from trtkit.builder.opcheck import max_documented_opset, preflight, static_note
from trtkit.cli.check_render import failure_message, render_check


def _model(opset=17, odd_op="NotARealOp"):
    """x → Relu → [odd op, custom domain] → Sigmoid → Where(mask, ., x) → y"""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    mask = helper.make_tensor_value_info("mask", TensorProto.BOOL, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu0"),
        helper.make_node(odd_op, ["a"], ["b"], name="odd0", domain="com.example"),
        helper.make_node("Sigmoid", ["b"], ["c"], name="sig0"),
        helper.make_node("Relu", ["c"], ["d"]),  # unnamed: the parser calls it node_of_d
        helper.make_node("Where", ["mask", "d", "x"], ["y"], name="/attn/Where"),
    ]
    graph = helper.make_graph(nodes, "m", [x, mask], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                   helper.make_opsetid("com.example", 1)])


def _clean_model(opset=17):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu0"), helper.make_node("Sigmoid", ["a"], ["y"], name="s")]
    return helper.make_model(helper.make_graph(nodes, "clean", [x], [y]),
                             opset_imports=[helper.make_opsetid("", opset)])


def _render(report) -> str:
    from rich.console import Console

    out = io.StringIO()
    Console(file=out, width=160, no_color=True).print(render_check(report))
    return out.getvalue()


def test_rows_list_every_op_with_count_domain_and_opset():
    report = preflight(_model(), trt=children.fake_trt_with_support_query("8.6.0"))
    rows = {(r.op_type, r.domain): r for r in report.rows}
    assert [r.op_type for r in report.rows] == ["Relu", "NotARealOp", "Sigmoid", "Where"]
    assert rows[("Relu", "ai.onnx")].count == 2 and rows[("Relu", "ai.onnx")].opset == 17
    assert rows[("NotARealOp", "com.example")].opset == 1
    assert "needs a TensorRT plugin" in rows[("NotARealOp", "com.example")].note


@pytest.mark.parametrize("version", ["8.6.0", "10.0.1", "10.8.0"])
def test_unsupported_op_is_named_with_its_node(version):
    report = preflight(_model(), trt=children.fake_trt_with_support_query(version))
    assert not report.ok and report.queried and report.trt_version == version
    odd = [n for n in report.unsupported_nodes if n.op_type == "NotARealOp"]
    assert [(n.index, n.name) for n in odd] == [(1, "odd0")]
    assert odd[0].reason == "no importer for NotARealOp in this TensorRT"
    statuses = {r.op_type: r.status for r in report.rows}
    assert statuses == {"Relu": "supported", "NotARealOp": "unsupported", "Sigmoid": "supported",
                        "Where": "supported"}
    assert any("No importer registered for op: NotARealOp" in e for e in report.errors)


def test_subgraphs_are_named_only_where_the_parser_judges_each():
    v86 = preflight(_model(), trt=children.fake_trt_with_support_query("8.6.0"))
    v10 = preflight(_model(), trt=children.fake_trt_with_support_query("10.8.0"))
    assert v86.unsupported_subgraphs == []
    assert v10.unsupported_subgraphs == [["sig0", "node_of_d", "/attn/Where"]]


def test_supported_model_is_ok():
    report = preflight(_clean_model(), trt=children.fake_trt_with_support_query("8.6.0"))
    assert report.ok and not report.unsupported_nodes
    assert {r.status for r in report.rows} == {"supported"}
    assert "every op is supported" in _render(report)


def test_parser_crash_in_child_becomes_part_of_the_report():
    factory = functools.partial(children.fake_trt_with_support_query, "8.6.0", "Where")
    report = preflight(_model(opset=21, odd_op="Relu"), trt_factory=factory)
    assert not report.ok
    assert "SIGSEGV" in report.crash and "'/attn/Where' (op Where, model opset 21)" in report.crash
    where = [r for r in report.rows if r.op_type == "Where"][0]
    assert where.status == "crashed" and where.nodes == ["/attn/Where"]
    assert report.unsupported_nodes[0].reason == "crashed TensorRT's parser (SIGSEGV)"
    text = _render(report)
    assert "crashed the parser" in text and "SIGSEGV" in text


def test_isolated_query_gives_the_same_answer_as_in_process():
    factory = functools.partial(children.fake_trt_with_support_query, "10.8.0")
    isolated = preflight(_model(), trt_factory=factory)
    local = preflight(_model(), trt=factory())
    assert isolated.to_json() == local.to_json()


def test_without_tensorrt_only_static_knowledge_is_shown(monkeypatch):
    from trtkit.errors import DependencyError

    def missing(*args, **kwargs):
        raise DependencyError("TensorRT's Python package is not installed")

    monkeypatch.setattr("trtkit.builder.opcheck.query_parser", missing)
    report = preflight(_model(odd_op="Unique"), isolate=False)
    assert not report.queried and report.ok
    assert {r.status for r in report.rows} == {"unknown"}
    assert report.not_asked == "TensorRT's Python package is not installed" and not report.notes
    assert "onnx-tensorrt's published operator lists" in _render(report)


def test_opset_newer_than_documented_is_noted():
    report = preflight(_clean_model(opset=21), trt=children.fake_trt_with_support_query("8.6.0"))
    assert any("opset 21" in n and "up to 17" in n for n in report.notes)
    assert max_documented_opset((10, 16)) == 24 and max_documented_opset((10, 2)) == 20
    assert max_documented_opset((7, 1)) is None


def test_static_notes_are_specific():
    assert static_note("Gelu") == "supported in TensorRT 10.1 (onnx-tensorrt's operator lists for 8.6, 10.1)"
    assert "no native TensorRT support: marked unsupported" in static_note("Unique")
    assert "no native TensorRT support: not listed" in static_note("NotARealOp")
    assert static_note("Conv") == ""


def test_render_lists_ops_nodes_errors_and_verdict():
    text = _render(preflight(_model(), trt=children.fake_trt_with_support_query("8.6.0")))
    for expected in ("ops vs. TensorRT 8.6.0", "NotARealOp", "unsupported", "#1 odd0 (NotARealOp)",
                     "cannot parse the model as is", "--fold-constants"):
        assert expected in text


def test_failure_message_names_nodes_and_next_steps():
    report = preflight(_model(), trt=children.fake_trt_with_support_query("8.6.0"))
    message = failure_message(report)
    assert message.startswith("TensorRT 8.6.0's ONNX parser cannot import 1 node(s) of 'm':")
    assert "'odd0' (NotARealOp)" in message and "The op check's table lists every op" in message


def test_path_input_labels_the_report_with_the_path(tmp_path):
    path = tmp_path / "clean.onnx"
    onnx.save(_clean_model(), path)
    report = preflight(str(path), trt=children.fake_trt_with_support_query("8.6.0"))
    assert report.model == str(path)


def test_notes_when_constant_folding_would_change_the_model():
    from tests.sanitize import sanitize_models

    report = preflight(sanitize_models.constant_of_shape_conv(),
                       trt=children.fake_trt_with_support_query("8.6.0"))
    assert any(n.startswith("constant folding would change this model: folded 5 node(s)")
               for n in report.notes)
    plain = preflight(_clean_model(), trt=children.fake_trt_with_support_query("8.6.0"))
    assert not any("fold" in n for n in plain.notes)


def test_a_failing_query_degrades_to_static_knowledge(monkeypatch):
    def broken(*args, **kwargs):
        raise TypeError("supports_model(): incompatible function arguments")

    monkeypatch.setattr("trtkit.builder.opcheck.query_parser", broken)
    report = preflight(_clean_model(), isolate=False)
    assert report.ok and not report.queried
    assert "TypeError: supports_model(): incompatible function arguments" in report.not_asked
