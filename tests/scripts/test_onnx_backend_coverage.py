"""scripts/onnx_backend_coverage.py: what stops TensorRT 8.6.0's parser, with and without trtkit's prepare, and the
ranking of reasons over cases."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.models import _model

pytestmark = pytest.mark.bench  # a benchmark harness's test: pytest -m bench


def _vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def hardmax_int64_model():
    nodes = [helper.make_node("Hardmax", ["x"], ["h"], axis=1), helper.make_node("ArgMax", ["h"], ["y"], axis=1)]
    return _model(nodes, [_vi("x", TensorProto.FLOAT, [2, 3])], [_vi("y", TensorProto.INT64, [2, 1])], opset=17)


def test_blockers_name_ops_outside_the_860_list_and_types_an_engine_cannot_take(coverage):
    target = coverage.parser_target()
    assert not target.supported("Hardmax", 17) and target.supported("ArgMax", 17)
    assert not target.supported("NonZero", 17)  # 8.6.0's own parser lacks it, though the 8.6-GA list has it
    supported = frozenset(op for op in coverage._all_ops() if target.supported(op, 0))
    assert coverage.blockers(hardmax_int64_model(), supported) == ["op Hardmax", "output INT64"]
    custom = _model([helper.make_node("Thing", ["x"], ["y"], domain="ai.onnx.ml")],
                    [_vi("x", TensorProto.UINT16, [2])], [_vi("y", TensorProto.FLOAT, [2])])
    assert coverage.blockers(custom, supported) == ["input UINT16", "op ai.onnx.ml.Thing"]


def test_a_case_trtkit_clears_is_checked_with_onnxruntime_on_its_own_data(coverage, tmp_path):
    pytest.importorskip("onnxruntime")
    import onnx

    folder = tmp_path / "case"
    folder.mkdir()
    onnx.save(hardmax_int64_model(), folder / "model.onnx")
    x = np.array([[0.1, 3.0, 2.0], [5.0, 5.0, -1.0]], dtype=np.float32)
    coverage.suite._save_arrays(folder / "data.npz", {"x": x}, {"y": np.array([[1], [0]], dtype=np.int64)})
    case = {"name": "case", "kind": "node", "rtol": 1e-3, "atol": 1e-7, "dir": str(folder), "ops": ["Hardmax"]}
    entry = coverage.check_case(case)
    assert entry["raw"] == ["op Hardmax", "output INT64"]
    assert entry["trtkit"] == [] and {"decompose:applied", "int64-io:applied"} <= set(entry["rewrites"])
    assert entry["ort"] == "match", entry.get("ort_error")
    # a wrong expectation is a mismatch, and the ranking counts it apart from parser blockers
    coverage.suite._save_arrays(folder / "data.npz", {"x": x}, {"y": np.array([[2], [0]], dtype=np.int64)})
    wrong = coverage.check_case(case)
    assert wrong["ort"] == "mismatch" and wrong["ort_original"] == "mismatch"
    ranked = dict(coverage.ranked({"a": entry, "b": wrong}, "trtkit"))
    assert ranked == {"onnxruntime mismatch (the case itself)": 1}
    assert dict(coverage.ranked({"a": entry, "b": wrong}, "raw")) == {"op Hardmax": 2, "dtype INT64": 2}
    assert coverage.summary({"a": entry, "b": wrong}) == {"cases": 2, "exported": 2, "raw_clear": 0,
                                                          "trtkit_clear": 2, "trtkit_clear_ort_match": 1,
                                                          "gained": 1}
    assert coverage.gained({"a": entry, "b": wrong}) == ["a"]


def test_the_suite_reads_case_names_from_a_file(coverage, tmp_path):
    names = tmp_path / "gained.txt"
    names.write_text("test_hardmax_example\n\ntest_sce_mean\n")
    assert coverage.suite.case_names(None, str(names)) == {"test_hardmax_example", "test_sce_mean"}
    assert coverage.suite.case_names("test_abs", str(names)) == {"test_abs", "test_hardmax_example", "test_sce_mean"}
    assert coverage.suite.case_names(None, None) is None
