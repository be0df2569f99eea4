"""Isolation, pre-flight check and constant folding against the real TensorRT (GPU host).

Run: ``bash .gpu/bin/gpu-run pytest -m gpu -q tests/gpu/test_isolation_gpu.py``. Every build uses the tactic sources
``EDGE_MASK_CONVOLUTIONS, JIT_CONVOLUTIONS`` only (the host's bundle stubs cuBLAS/cuDNN).

Whatever TensorRT's parser does with the attention candidates (parse, refuse, or segfault as 8.6.0 does on some),
this test process must survive and every refusal must name a node. ``scripts/make_parser_crasher.py OUT_DIR`` tells
which candidates crash.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.conftest import GPU_TACTIC_SOURCES
from tests.sanitize import sanitize_models
from trtkit.builder.api import build
from trtkit.builder.config import BuildConfig
from trtkit.builder.opcheck import preflight
from trtkit.builder.profiles import parse_shapes
from trtkit.builder.sanitize import fold_constants
from trtkit.errors import IsolationError, ParseError, TrtkitError

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
OPSET = 21


def _crasher_script():
    spec = importlib.util.spec_from_file_location("make_parser_crasher", ROOT / "scripts" / "make_parser_crasher.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CRASHER = _crasher_script()


def _config(model) -> BuildConfig:
    profiles = []
    dims = {v.name: [d.dim_value or d.dim_param for d in v.type.tensor_type.shape.dim] for v in model.graph.input}
    if any(isinstance(d, str) for shape in dims.values() for d in shape):
        spec = " ".join(f"{name}:" + ",".join("x".join(str(s if isinstance(s, int) else n) for s in shape)
                                               for n in (1, 8, 16))
                        for name, shape in dims.items())
        profiles = [parse_shapes(spec)]
    return BuildConfig(profiles=profiles, tactic_sources=GPU_TACTIC_SOURCES, tf32=False)


@pytest.mark.parametrize("name", sorted(CRASHER.CANDIDATES))
def test_attention_candidate_never_takes_down_the_process(name, tmp_path):
    model = CRASHER.CANDIDATES[name](OPSET)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    output = tmp_path / "out" / f"{name}.engine"
    output.parent.mkdir()
    nodes = {n.name for n in model.graph.node}
    try:
        result = build(str(path), _config(model), output=output)  # isolated: the default
    except IsolationError as exc:
        message = str(exc)
        assert exc.crash.signal, message
        assert exc.crash.node in nodes, message
        assert f"node '{exc.crash.node}' (op {exc.crash.op_type}, model opset" in message
        assert "preflight(model)" in message and "fold_constants=True" in message
        assert list(output.parent.iterdir()) == []
        return
    except TrtkitError as exc:  # a clean refusal names the node (by name on 10+, by index on 8.6)
        message = str(exc)
        assert any(n in message for n in nodes) or "node #" in message, message
        assert list(output.parent.iterdir()) == []
        return
    assert result.engine and output.exists()


@pytest.mark.parametrize("name", sorted(CRASHER.CANDIDATES))
def test_preflight_reports_instead_of_crashing(name):
    model = CRASHER.CANDIDATES[name](OPSET)
    report = preflight(model.SerializeToString())
    assert report.rows and report.trt_version
    if report.crash:
        assert not report.ok
        assert any(r.status == "crashed" for r in report.rows), report.crash
    elif not report.ok:
        assert report.unsupported_nodes, report.to_json()


def test_constant_of_shape_conv_needs_folding_then_matches_onnx(tmp_path):
    from onnx.reference import ReferenceEvaluator

    from trtkit import TrtRunner
    from trtkit import _version_compat as compat
    from trtkit._lazy import tensorrt

    model = sanitize_models.constant_of_shape_conv()
    config = BuildConfig(tactic_sources=GPU_TACTIC_SOURCES, tf32=False)
    if compat.version(tensorrt()) < (10,):
        # 8.6's Conv importer wants the bias as an initializer; here it comes from ConstantOfShape. The build folds
        # constants by default (that is the fix), so the failure shows with folding and the rewrites off
        with pytest.raises(ParseError) as info:
            build(model, dataclasses.replace(config, fold_constants=False, sanitize=False))
        assert "conv0" in str(info.value) or "node #5" in str(info.value) or "Conv" in str(info.value)
    folded, report = fold_constants(model)
    assert report.changed and [n.op_type for n in folded.graph.node] == ["Conv", "Relu"]
    engine = tmp_path / "cos_conv.engine"
    build(model, config, output=engine)  # the default build folds it itself
    x = np.random.default_rng(3).standard_normal((1, 3, 16, 16)).astype(np.float32)
    with TrtRunner(engine) as runner:
        y = runner.infer({"x": x})["y"]
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)


def test_folded_shape_chain_builds_and_matches(tmp_path):
    from onnx.reference import ReferenceEvaluator

    from trtkit import TrtRunner

    model = sanitize_models.static_shape_chain()
    folded, report = fold_constants(model)
    assert report.changed
    engine = tmp_path / "chain.engine"
    build(folded, BuildConfig(tactic_sources=GPU_TACTIC_SOURCES, tf32=False), output=engine)
    x = np.random.default_rng(4).standard_normal((2, 3, 4, 5)).astype(np.float32)
    with TrtRunner(engine) as runner:
        y = runner.infer({"x": x})["y"]
    np.testing.assert_array_equal(y, ReferenceEvaluator(model).run(None, {"x": x})[0])
