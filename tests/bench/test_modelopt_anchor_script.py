"""``benchmarks/int8_vs_modelopt_h200.py --fake``: the ModelOpt anchor end to end on the fake backend, ModelOpt's
call made in a child process against a stand-in package (tests/fakes/modelopt_stub); and its placement diff."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from tests import models

pytestmark = pytest.mark.bench  # a benchmark harness's test: pytest -m bench

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "int8_vs_modelopt_h200.py"
STUB = ROOT / "tests" / "fakes" / "modelopt_stub"


def _run(tmp_path, *extra):
    # opset 19: onnx's reference evaluator (the fake engine's) runs DequantizeLinear from 19 on
    onnx.save(models.conv_detector(size=32, classes=8, opset=19), tmp_path / "det.onnx")
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--fake", "--model", str(tmp_path / "det.onnx"), "--val-images", "6",
         "--calib", "8", "--bench-seconds", "0.05", "--rounds", "2", "--modelopt-python", sys.executable,
         "--modelopt-path", str(STUB), "--out", str(tmp_path / "out"), "--cache", str(tmp_path / "cache"),
         "--work", str(tmp_path / "work"), "--results", str(tmp_path / "results"), *extra],
        capture_output=True, text=True, timeout=280, cwd=ROOT)


def test_both_quantizers_see_one_array_and_every_engine_is_scored_and_timed(tmp_path):
    proc = _run(tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((tmp_path / "out" / "int8-vs-modelopt-h200.json").read_text())
    assert json.loads((tmp_path / "results" / "int8-vs-modelopt-h200.json").read_text()) == data
    assert not data["errors"], data["errors"]
    assert set(data["rows"]) == {"trtkit", "modelopt_entropy", "modelopt_max", "fp16"}
    for key, row in data["rows"].items():
        assert row["images_per_s"] > 0 and len(row["images_per_s_rounds"]) == 2 and "map" in row, key
    assert data["trtkit"] == data["rows"]["trtkit"] and data["modelopt"] == data["rows"]["modelopt_entropy"]
    assert {"images_per_s", "map"} <= set(data["trtkit"]) and {"images_per_s", "map"} <= set(data["modelopt"])
    # the first engine rotates from round to round
    assert [turn[0] for turn in data["timing_order"]] == ["trtkit", "modelopt_entropy"]
    assert set(data["targets"]) == {"modelopt_entropy", "modelopt_max"}
    assert {"images_per_s_ratio", "map_delta", "met"} <= set(data["targets"]["modelopt_entropy"])
    # ModelOpt was called with the calibration array trtkit calibrated from
    calib = tmp_path / "work" / "calib" / "calib.npy"
    assert data["calibration"]["shape"] == [8, 3, 32, 32]
    args = json.loads((tmp_path / "work" / "modelopt" / "detector.modelopt.max.fp16.onnx.args.json").read_text())
    assert args["calibration_method"] == "max" and args["calibration_data"] == {"images": [8, 3, 32, 32]}
    assert args["high_precision_dtype"] == "fp16" and args["calibration_eps"] == ["cpu"]
    assert "from 8 samples" in " ".join(data["rows"]["trtkit"]["precision_notes"])
    assert calib.exists() and "no calibration" in " ".join(data["rows"]["modelopt_max"]["precision_notes"])
    assert data["modelopt_quantize"]["entropy"]["samples"] == 8
    # ModelOpt rewrites the model it is given: it was given a copy
    given = models.conv_detector(size=32, classes=8, opset=19).SerializeToString()
    assert (tmp_path / "det.onnx").read_bytes() == given
    placement = data["placement"]["modelopt_entropy"]
    # trtkit keeps the one (final) layer in higher precision, the stand-in quantizes it
    assert placement["trtkit"] == {} and placement["modelopt"] == {"Conv activation": 1, "Conv weight": 1}
    assert placement["only_modelopt"]["head_conv:0"] == {"op": "Conv", "kind": "activation", "tensor": "images"}
    # a second call reuses ModelOpt's models and the calibration cache
    again = _run(tmp_path, "--no-fp16")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    data = json.loads((tmp_path / "out" / "int8-vs-modelopt-h200.json").read_text())
    assert data["modelopt_quantize"]["max"]["reused"] is True
    assert "from calibration cache" in " ".join(data["rows"]["trtkit"]["precision_notes"])


def test_a_failing_modelopt_is_recorded_and_trtkit_still_measured(tmp_path):
    proc = _run(tmp_path, "--methods", "max", "--modelopt-path", str(tmp_path / "nowhere"), "--no-fp16")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((tmp_path / "out" / "int8-vs-modelopt-h200.json").read_text())
    assert "ModelOpt max exited 1" in data["errors"]["modelopt_max/quantize"]
    assert "No module named 'modelopt'" in data["errors"]["modelopt_max/quantize"]
    assert set(data["rows"]) == {"trtkit"} and data["modelopt"] == {} and data["trtkit"]["images_per_s"] > 0


def _qdq(graph_nodes, initializers):
    graph = helper.make_graph(graph_nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def _pair(tensor, name):
    return [helper.make_node("QuantizeLinear", [tensor, "s", "z"], [f"{name}_q"], name=f"{name}_Q"),
            helper.make_node("DequantizeLinear", [f"{name}_q", "s", "z"], [f"{name}_dq"], name=f"{name}_DQ")]


def test_placement_diff_names_the_inputs_only_one_model_quantizes():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from int8_vs_modelopt_h200 import placement_diff

    consts = [helper.make_tensor("w", TensorProto.FLOAT, [1, 1, 1, 1], [1.0]),
              helper.make_tensor("s", TensorProto.FLOAT, [], [1.0]), helper.make_tensor("z", TensorProto.INT8, [], [0])]
    ours = _qdq([*_pair("x", "x"), *_pair("w", "w"), helper.make_node("Conv", ["x_dq", "w_dq"], ["c"], name="conv"),
                 helper.make_node("Relu", ["c"], ["r"], name="relu"), helper.make_node("Add", ["r", "c"], ["y"],
                                                                                      name="add")], consts)
    # theirs: the input through a Cast, the weight not quantized, the residual add's both inputs quantized
    theirs = _qdq([helper.make_node("Cast", ["x"], ["xc"], name="cast", to=TensorProto.FLOAT), *_pair("xc", "x"),
                   helper.make_node("Conv", ["x_dq", "w"], ["c"], name="conv"),
                   helper.make_node("Relu", ["c"], ["r"], name="relu"), *_pair("r", "r"), *_pair("c", "c"),
                   helper.make_node("Add", ["r_dq", "c_dq"], ["y"], name="add")], consts)
    diff = placement_diff(ours, theirs)
    assert diff["both"] == {"Conv activation": 1}
    assert diff["only_trtkit"] == {"conv:1": {"op": "Conv", "kind": "weight", "tensor": "w"}}
    assert set(diff["only_modelopt"]) == {"add:0", "add:1"}
    assert diff["modelopt"] == {"Add activation": 2, "Conv activation": 1}
    assert diff["trtkit"] == {"Conv activation": 1, "Conv weight": 1}
