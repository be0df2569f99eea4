"""The compatibility rewrites on the real TensorRT (8.6 on the GPU host): the failures they prevent, for real.

Run on the GPU host: ``bash .gpu/bin/gpu-run pytest -m gpu -q tests/gpu/test_prepare_gpu.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from tests.conftest import GPU_TACTIC_SOURCES
from tests.models import _model
from tests.rewrites.test_rewrites import int64_model, placeholder_dims_model
from trtkit.builder.api import build
from trtkit.builder.config import BuildConfig
from trtkit.builder.profiles import parse_shapes
from trtkit.errors import TrtkitError
from trtkit.runtime import TrtRunner

pytestmark = pytest.mark.gpu


def _config(shapes=None, **kwargs):
    return BuildConfig(profiles=[parse_shapes(shapes)] if shapes else [], tactic_sources=GPU_TACTIC_SOURCES,
                       tf32=False, profiling_verbosity="NONE", **kwargs)


def test_placeholder_dimension_names_build_once_renamed(tmp_path):
    shapes = "a:1x2,2x5,4x9 b:1x3,2x3,4x3"
    with pytest.raises(TrtkitError):
        build(placeholder_dims_model(), _config(shapes, sanitize=False))
    engine = tmp_path / "dims.engine"
    build(placeholder_dims_model(), _config(shapes), output=engine)
    a = np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    with TrtRunner(engine) as runner:
        got = runner.infer({"a": a, "b": b})["y"]
    np.testing.assert_allclose(got, a.sum() + b.sum(), rtol=1e-5)


def test_int64_io_round_trips_through_an_int32_engine(tmp_path):
    engine = tmp_path / "ids.engine"
    result = build(int64_model(), _config(), output=engine)
    assert result.manifest.to_json()["prepare"]["original_dtypes"] == {"ids": "int64", "best": "int64"}
    ids = np.array([[1, 5, 2], [7, 0, 3]], dtype=np.int64)
    with TrtRunner(engine) as runner:
        out = runner.infer({"ids": ids})["best"]
    assert out.dtype == np.int64 and out.tolist() == [1, 0]


def test_int64_io_without_argmax_round_trips(tmp_path):
    """The boundary casts alone (no ArgMax on INT32): tells a runner/cast problem from a TopK one."""
    nodes = [helper.make_node("Add", ["ids", "one"], ["next"], name="add")]
    one = numpy_helper.from_array(np.array(1, dtype=np.int64), "one")
    model = _model(nodes, [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 3])],
                   [helper.make_tensor_value_info("next", TensorProto.INT64, [2, 3])], [one])
    engine = tmp_path / "add.engine"
    build(model, _config(), output=engine)
    ids = np.array([[1, 5, 2], [7, 0, 3]], dtype=np.int64)
    with TrtRunner(engine) as runner:
        out = runner.infer({"ids": ids})["next"]
    assert out.dtype == np.int64 and out.tolist() == (ids + 1).tolist()


def test_an_opset_18_function_op_builds_expanded():
    scale = numpy_helper.from_array(np.ones(4, dtype=np.float32), "scale")
    nodes = [helper.make_node("Mish", ["x"], ["m"], name="mish"),
             helper.make_node("LayerNormalization", ["m", "scale"], ["y"], name="ln", axis=-1)]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [scale], opset=18)
    result = build(model, _config())
    done = {r["rewrite"] for r in result.manifest.to_json()["prepare"]["rewrites"] if r["status"] == "applied"}
    assert "opset" in done  # 8.6 documents opsets up to 17
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    with TrtRunner(result.engine) as runner:
        got = runner.infer({"x": x})["y"]
    np.testing.assert_allclose(got, ReferenceEvaluator(model).run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)


# ONNX backend cases the raw parser cannot take and trtkit's rewrites bring within reach (scripts/
# onnx_backend_coverage.py): Hardmax decomposed, a body that uses another function-bodied op (SoftmaxCrossEntropyLoss
# -> NegativeLogLikelihoodLoss, SwiGLU -> Swish), a context-dependent body with optional inputs left out (Attention).
# HannWindow and AffineGrid, whose sizes come from input values, are left to the backend suite's run.
REWRITTEN_CASES = [
    "test_hardmax_example",
    "test_hardmax_axis_1",
    "test_sce_mean",
    "test_sce_NCd1_mean_weight_negative_ii",
    "test_swiglu",
    "test_attention_4d_causal_with_past_and_present",
]


@pytest.mark.parametrize("name", REWRITTEN_CASES)
def test_onnx_backend_cases_the_rewrites_reach_pass(tmp_path, name):
    import tensorrt as trt

    from tests.scripts import script_module

    with script_module("scripts", "onnx_backend_suite") as suite:
        (case,) = suite.export(suite.discover(("node",), None, {name}), tmp_path)
        model = Path(case["dir"]) / "model.onnx"
        with pytest.raises(TrtkitError):  # the model as it is: the parser refuses it
            build(str(model), _config(sanitize=False))
        inputs, expected = suite.load_arrays(Path(case["dir"]))
        outputs = suite.run_trtkit(model, inputs, trt, None)
        assert suite.compare(outputs, expected, case["rtol"], case["atol"]) is None
