"""The CPU statistics pass (ONNX Runtime) against histograms made by hand from onnx's reference evaluator."""

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

from calibrators.cpu_statistics import collect_histograms_cpu
from calibrators.histogram import HistogramSet
from tests.quant.qmodels import yolo_like
from trtkit.errors import CalibrationError
from trtkit.model import with_outputs
from trtkit.quant.qdq import plan_qdq

pytest.importorskip("onnxruntime")


def _feeds(seed=0, batches=3):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)} for _ in range(batches)]


def test_histograms_match_the_reference_evaluators_tensors():
    model = yolo_like()
    tensors = plan_qdq(model).activations
    hists, samples = collect_histograms_cpu(model, tensors, _feeds())
    assert samples == 6
    assert list(hists.tensors) == tensors  # in plan order
    marked = [t for t in tensors if t != "x"]
    probe = ReferenceEvaluator(with_outputs(model, marked))
    expected = HistogramSet()
    for feed in _feeds():
        values = probe.run(marked, feed)
        expected.update({"x": feed["x"], **dict(zip(marked, values))})
    for name in tensors:
        got, want = hists[name], expected[name]
        assert got.amax == pytest.approx(want.amax, rel=1e-5)
        assert got.count == want.count
        assert got.range == pytest.approx(want.range, rel=1e-5)
        # float rounding may move a value at a bin edge by one bin
        assert np.abs(got.counts - want.counts).sum() <= 2


def test_unknown_tensor_is_named():
    with pytest.raises(CalibrationError, match="no tensor\\(s\\) nope to calibrate"):
        collect_histograms_cpu(yolo_like(), ["nope"], _feeds())
