"""Shape-tensor inputs on the real TensorRT (8.6 on the GPU host): the CPU tests' round trip (tests/runtime and
tests/builder ``test_shape_inputs.py``), and onnx's own test_expand_shape_model cases that failed before.

Run on the GPU host: ``bash .gpu/bin/gpu-run pytest -m gpu -q tests/gpu/test_shape_inputs_gpu.py``.
"""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

from tests import models
from tests.conftest import GPU_TACTIC_SOURCES
from trtkit.builder import BuildConfig, build, parse_shapes, shape_tensor_inputs
from trtkit.errors import InputError, ProfileError
from trtkit.runtime import TrtRunner

pytestmark = pytest.mark.gpu

X3 = np.arange(3, dtype=np.float32).reshape(3, 1)
X12 = np.arange(12, dtype=np.float32)


def _config(shapes=None, verbosity="NONE"):
    return BuildConfig(profiles=[parse_shapes(shapes)] if shapes else [], tactic_sources=GPU_TACTIC_SOURCES,
                       tf32=False, profiling_verbosity=verbosity)


def _expected(model, feed):
    return ReferenceEvaluator(model).run(None, feed)[0]


def test_tensorrt_parses_the_inputs_as_shape_tensors():
    assert shape_tensor_inputs(models.expand_shape()) == ["shape"]
    assert shape_tensor_inputs(models.reshape_shape()) == ["shape"]


def test_without_values_the_build_fails_naming_the_input():
    with pytest.raises(ProfileError, match=r"'shape' \(dims \[3\]\) as shape tensors.*Add for example 'shape:"):
        build(models.expand_shape(), _config())


@pytest.mark.parametrize("verbosity", ["NONE", "DETAILED"])  # DETAILED: the inspector's context gets opt values
def test_expand_round_trip_for_two_values_and_a_refusal_outside_the_profile(tmp_path, verbosity):
    model = models.expand_shape()
    engine = tmp_path / "expand.engine"
    result = build(model, _config("shape:1x3x1,2x3x2,4x3x4", verbosity), output=engine)
    assert result.manifest.model.shape_inputs == ["shape"]
    with TrtRunner(engine) as runner:
        for values in [(2, 3, 2), (4, 3, 1), (2, 3, 2)]:
            feed = {"x": X3, "shape": np.array(values, np.int64)}
            got = runner.infer(feed)["y"]
            assert got.shape == values and np.array_equal(got, _expected(model, feed)), (values, got)
        with pytest.raises(InputError, match=r"Input 'shape': values \(5, 3, 1\) are outside profile 0"):
            runner.infer({"x": X3, "shape": np.array([5, 3, 1], np.int64)})


def test_reshape_round_trip_where_the_max_values_make_no_shape(tmp_path):
    model = models.reshape_shape()
    engine = tmp_path / "reshape.engine"
    build(model, _config("shape:2x4,3x4,3x6"), output=engine)
    with TrtRunner(engine) as runner:
        for values in [(3, 4), (2, 6), (3, 4)]:
            feed = {"x": X12, "shape": np.array(values, np.int64)}
            assert np.array_equal(runner.infer(feed)["y"], _expected(model, feed)), values


def test_outputs_grow_past_the_opt_values(tmp_path):
    model = models.expand_shape(rank=2)
    engine = tmp_path / "expand2.engine"
    build(model, _config("shape:1x1,1x1,2x4"), output=engine)  # (2, 4) does not broadcast with x (3, 1)
    with TrtRunner(engine) as runner:
        for values in [(1, 1), (1, 4), (1, 2)]:
            feed = {"x": X3, "shape": np.array(values, np.int64)}
            assert np.array_equal(runner.infer(feed)["y"], _expected(model, feed)), values


def test_cuda_graph_requested_runs_plain_and_follows_the_values(tmp_path, caplog, monkeypatch):
    import logging

    model = models.expand_shape()
    engine = tmp_path / "expand.engine"
    build(model, _config("shape:1x3x1,2x3x2,4x3x4"), output=engine)
    monkeypatch.setattr(logging.getLogger("trtkit"), "propagate", True)
    with caplog.at_level(logging.INFO, logger="trtkit"):
        with TrtRunner(engine, cuda_graph=True) as runner:
            for values in [(2, 3, 2), (4, 3, 4), (2, 3, 2), (4, 3, 4)]:
                feed = {"x": X3, "shape": np.array(values, np.int64)}
                assert np.array_equal(runner.infer(feed)["y"], _expected(model, feed)), values
            assert runner.stats().graphs == 0
    assert "Running without CUDA graphs" in caplog.text


CASES = sorted(glob.glob(os.path.join(os.path.dirname(onnx.__file__),
                                      "backend/test/data/simple/test_expand_shape_model*")))


@pytest.mark.parametrize("case", CASES, ids=os.path.basename)
def test_onnx_backend_expand_shape_cases_pass(tmp_path, case):
    model = onnx.load(os.path.join(case, "model.onnx"))
    arrays = {}
    for path in sorted(glob.glob(os.path.join(case, "test_data_set_0", "*.pb"))):
        tensor = onnx.TensorProto()
        with open(path, "rb") as f:
            tensor.ParseFromString(f.read())
        arrays[os.path.basename(path)] = (tensor.name, numpy_helper.to_array(tensor))
    inputs = dict(v for k, v in arrays.items() if k.startswith("input"))
    (_, want), = [v for k, v in arrays.items() if k.startswith("output")]
    values = "x".join(str(int(v)) for v in inputs["shape"])
    engine = tmp_path / "case.engine"
    build(model, _config(f"shape:{values}"), output=engine)
    with TrtRunner(engine) as runner:
        got = runner.infer(inputs)
    np.testing.assert_allclose(next(iter(got.values())), want, rtol=1e-6)


def test_onnx_backend_hannwindow_case_runs_or_is_refused_naming_its_0d_shape_input(tmp_path):
    # test_hannwindow_expanded: a 0-d INT32 input whose value is the window's length. The scoreboard's run on 8.6 hit
    # a numpy broadcast error here (the profile values TensorRT reported for it were empty); the runner now takes them
    # from the engine's manifest, so it should match onnx's expected output (or, failing that, name the input)
    from pathlib import Path

    import tensorrt as trt

    from tests.scripts import script_module
    from trtkit.errors import UnsupportedError

    with script_module("scripts", "onnx_backend_suite") as suite:
        (case,) = suite.export(suite.discover(("node",), None, {"test_hannwindow_expanded"}), tmp_path)
        model = Path(case["dir"]) / "model.onnx"
        inputs, expected = suite.load_arrays(Path(case["dir"]))
        try:
            outputs = suite.run_trtkit(model, inputs, trt, None)
        except UnsupportedError as exc:
            assert "Shape-tensor input 'x' (shape (): 1 value(s)) has 0 min/opt/max value(s)" in str(exc), exc
        else:
            assert suite.compare(outputs, expected, case["rtol"], case["atol"]) is None
