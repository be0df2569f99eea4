"""Issue 14, item 7: `inspect --check` without TensorRT says the check did not happen (exit 1) and shows the op lists
shipped with trtkit (trtkit/builder/data/onnx_ops.json, made by scripts/onnx_op_table.py from onnx-tensorrt's
docs/operators.md)."""

import importlib.util
import json
from pathlib import Path

import pytest

from tests import models
from trtkit.builder import opcheck
from trtkit.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = """# Supported ONNX Operators

TensorRT 9.9 supports operators in the inclusive range of opset 9 to opset 21.

| Operator                  | Supported  | Supported Types | Restrictions |
|---------------------------|------------|-----------------|--------------|
| Abs                       | Y          | FP32 |
| Bernoulli                 | N          |
| Conv                      | Y          | FP32, FP16 | 2D or 3D only |
"""


def _script():
    spec = importlib.util.spec_from_file_location("onnx_op_table", ROOT / "scripts" / "onnx_op_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_script_reads_operators_md(tmp_path):
    md = tmp_path / "operators.md"
    md.write_text(SAMPLE)
    out = tmp_path / "ops.json"
    assert _script().main(["--out", str(out), f"9.9={md}"]) == 0
    v = json.loads(out.read_text())["versions"]["9.9"]
    assert v["supported"] == ["Abs", "Conv"] and v["unsupported"] == ["Bernoulli"]
    assert (v["min_opset"], v["max_opset"]) == (9, 21)


def test_the_shipped_table_covers_the_supported_versions():
    table = opcheck.op_table()
    assert list(table) == ["8.6", "10.1"]
    for version, entry in table.items():
        assert {"Conv", "Relu", "MatMul", "Resize"} <= entry["supported"], version
        assert not entry["supported"] & entry["unsupported"]
        assert "onnx-tensorrt" in entry["source"] and "docs/operators.md" in entry["source"]
    assert table["8.6"]["max_opset"] == 17 and table["10.1"]["max_opset"] == 20
    assert "Gelu" in table["10.1"]["supported"] and "Gelu" not in table["8.6"]["supported"]


def test_inspect_check_without_tensorrt_says_the_check_did_not_happen(tmp_path, capsys, monkeypatch):
    pytest.importorskip("onnx")
    monkeypatch.setitem(__import__("sys").modules, "tensorrt", None)  # as on a machine without TensorRT
    from trtkit import _lazy

    _lazy.import_module.cache_clear()
    model = tmp_path / "m.onnx"
    model.write_bytes(models.tiny_conv().SerializeToString())
    code = cli_main.main(["inspect", str(model), "--check", "--json", str(tmp_path / "check.json")])
    out = capsys.readouterr()
    _lazy.import_module.cache_clear()
    assert code == 1 and "the op check did not happen" in out.err and out.err.count("\n") == 1
    assert "listed" in out.out and "8.6" in out.out and "published operator lists" in out.out
    assert "not installed" not in out.out  # the reason is said once, on stderr
    assert all(len(line) <= 160 for line in out.out.splitlines()) and "Conv" in out.out
    written = json.loads((tmp_path / "check.json").read_text())["check"]
    assert written["queried"] is False and "not installed" in written["not_asked"]
    report = opcheck.preflight(str(model), isolate=False)
    assert report.queried is False and report.to_json()["listed"]["Conv"] == {"8.6": True, "10.1": True}
    assert cli_main.main(["inspect", str(model)]) == 0  # without --check nothing is missing


def test_a_patch_release_that_lacks_listed_ops_is_answered_for_itself():
    from trtkit.builder.op_support import entry_for, table_status

    # 8.6-GA's operators.md (8.6.1) lists NonZero; TensorRT 8.6.0's own parser has no importer for it
    assert table_status("NonZero", "8.6") is True
    assert table_status("NonZero", "8.6.1.6") is True
    assert table_status("NonZero", "8.6.0") is False
    assert table_status("Conv", "8.6.0") is True
    assert "RoiAlign" in entry_for("8.6.0.12")["unsupported"]
    assert entry_for("9.1.0") is None


def test_regenerating_the_table_keeps_the_measured_patch_differences(tmp_path):
    source = tmp_path / "operators.md"
    source.write_text(SAMPLE)
    out = tmp_path / "ops.json"
    _script().main([f"8.6={source}", "--out", str(out)])
    shipped = json.loads((ROOT / "trtkit" / "builder" / "data" / "onnx_ops.json").read_text())
    made = json.loads(out.read_text())
    assert made["versions"]["8.6"]["patch_differences"] == shipped["versions"]["8.6"]["patch_differences"]
