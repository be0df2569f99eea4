"""`trtkit sanitize` (no TensorRT) and `trtkit build --no-sanitize`."""

from __future__ import annotations

import json

import onnx
import pytest

from tests.rewrites.test_rewrites import placeholder_dims_model
from trtkit.cli.main import main


def test_sanitize_lists_every_rewrite_and_saves_the_model(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    src, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save(placeholder_dims_model(), str(src))
    assert main(["sanitize", str(src), "-o", str(out), "--json", str(tmp_path / "r.json")]) == 0
    text = capsys.readouterr().out
    assert "symbolic-dims" in text and "input 'a' axis 1" in text and "3 rewrite(s) applied" in text
    saved = onnx.load(str(out))
    assert [d.dim_param for d in saved.graph.input[0].type.tensor_type.shape.dim] == ["a_dim0", "a_dim1"]
    assert len(json.loads((tmp_path / "r.json").read_text())["rewrites"]) == 3


def test_sanitize_names_what_a_build_would_refuse(tmp_path, capsys, monkeypatch):
    from tests.rewrites.test_semantics import reduce_axes_input

    monkeypatch.setenv("COLUMNS", "300")
    src, out = tmp_path / "m.onnx", tmp_path / "out.onnx"
    onnx.save(reduce_axes_input(), str(src))
    assert main(["sanitize", str(src), "-o", str(out), "--json", str(tmp_path / "r.json")]) == 0
    text = capsys.readouterr().out
    assert "what a build refuses" in text and "would reduce over every axis" in text
    assert "1 node(s) that TensorRT 8.6 (assumed: TensorRT is not installed) cannot take as they are" in text
    assert json.loads((tmp_path / "r.json").read_text())["hazards"][0]["node"] == "mean"


def test_sanitize_refuses_to_overwrite_its_input(tmp_path, capsys):
    src = tmp_path / "m.onnx"
    onnx.save(placeholder_dims_model(), str(src))
    before = src.read_bytes()
    assert main(["sanitize", str(src), "-o", str(src)]) == 2
    assert "--output" in (err := capsys.readouterr().err) and "is the same file as model" in err
    assert src.read_bytes() == before


@pytest.mark.parametrize("flag, expected", [([], True), (["--no-sanitize"], False)])
def test_build_takes_no_sanitize(flag, expected):
    from trtkit.cli.main import make_parser

    args = make_parser("build").parse_args(["build", "m.onnx", *flag])
    assert args.sanitize is expected
