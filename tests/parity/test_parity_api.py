"""compare_engine_to_onnx with fake engines (callables): verdicts, shapes, trials, inputs, JSON schema."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests import models
from trtkit.errors import EngineError, InputError, ProfileError
from trtkit.parity import OnnxReference, compare_engine_to_onnx
from trtkit.parity.engine import runner_profile
from trtkit.parity.polygraphy_compat import polygraphy_verdicts
from trtkit.runtime.engine import TensorSpec

PROFILE = {"x": ((1, 3, 8, 8), (3, 3, 8, 8), (8, 3, 8, 8))}


class FakeEngine:
    """An 'engine' that runs the ONNX model itself, optionally scaled, and records what it was fed."""

    def __init__(self, model, *, scale: float = 1.0, nan_at=None, profile=None, drop=None):
        self._ref = OnnxReference(model)
        self.scale, self.nan_at, self.profile, self.drop = scale, nan_at, profile, drop
        self.feeds = []
        self.name = "fake-engine"

    def infer(self, feed):
        self.feeds.append(feed)
        out = {k: (v * self.scale).astype(v.dtype) for k, v in self._ref(feed).items() if k != self.drop}
        if self.nan_at is not None:
            next(iter(out.values()))[self.nan_at] = np.nan
        return out

    @property
    def input_specs(self):
        """Shaped like TrtRunner's: one TensorSpec per input with (min, opt, max) per profile."""
        if self.profile is None:
            return ()
        return tuple(TensorSpec(name, True, np.dtype(np.float32), (-1, 3, 8, 8), (triple,))
                     for name, triple in self.profile.items())


def test_identical_engine_passes_with_the_profile_opt_shape():
    model = models.tiny_conv()
    engine = FakeEngine(model, profile=PROFILE)
    report = compare_engine_to_onnx(model, engine, precision="fp32", trials=2)
    assert report.passed
    assert report.shapes == {"x": (3, 3, 8, 8)}
    assert [f["x"].shape for f in engine.feeds] == [(3, 3, 8, 8)] * 2
    assert report.verdict() == "PASS: 1 output(s) within tolerance for fp32 over 2 trials"
    assert report.engine == "fake-engine" and report.model == "<ModelProto>"


def test_scaled_engine_fails_with_a_clear_verdict():
    model = models.tiny_conv()
    report = compare_engine_to_onnx(model, FakeEngine(model, scale=1.05), shapes={"x": (2, 3, 8, 8)}, precision="fp16")
    assert not report.passed
    verdict = report.verdict()
    assert verdict.startswith("FAIL: 1 of 1 output(s) out of tolerance ('y'); output 'y': max abs error ")
    assert "= 5e-2 > 1e-2 allowed for fp16 (worst at index (" in verdict


def test_plain_callable_and_assumed_precision_note():
    model = models.tiny_conv(dynamic_batch=False)
    ref = OnnxReference(model)
    report = compare_engine_to_onnx(model, lambda feed: ref(feed))
    assert report.passed and report.precision == "tf32"
    assert report.notes == ["the engine has no manifest saying its precision: judged as tf32 "
                            "(give its precision if it was built otherwise)"]


def test_worst_trial_is_reported_per_output():
    model = models.tiny_conv()
    engine = FakeEngine(model, profile=PROFILE)
    calls = {"n": 0}

    def flaky(feed):
        calls["n"] += 1
        engine.scale = 1.5 if calls["n"] == 2 else 1.0
        return engine.infer(feed)

    report = compare_engine_to_onnx(model, flaky, profile=PROFILE, precision="fp16", trials=3)
    assert [r.passed for r in report.results] == [True, False, True]
    (worst,) = report.worst()
    assert worst.trial == 1 and not worst.passed


def test_nan_output_fails_and_missing_output_is_named():
    model = models.tiny_conv()
    report = compare_engine_to_onnx(model, FakeEngine(model, nan_at=(0, 1, 0, 0), profile=PROFILE), precision="fp16")
    assert "the engine output has 1 NaN and 0 Inf values" in report.verdict()
    report = compare_engine_to_onnx(model, FakeEngine(model, drop="y", profile=PROFILE), precision="fp16")
    assert report.failures() == ["output 'y': the engine has no output of that name (engine outputs: none)"]


def test_shapes_outside_the_engine_profile_are_refused_before_running():
    model = models.tiny_conv()
    engine = FakeEngine(model, profile=PROFILE)
    with pytest.raises(ProfileError, match="outside the engine's profile"):
        compare_engine_to_onnx(model, engine, shapes={"x": (16, 3, 8, 8)})
    assert engine.feeds == []


def test_inputs_from_a_file_a_feed_and_a_list(tmp_path):
    model = models.tiny_conv()
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    engine = FakeEngine(model)
    report = compare_engine_to_onnx(model, engine, inputs=tmp_path / "in.npz", precision="fp32")
    assert report.passed and report.input_source == str(tmp_path / "in.npz") and report.seed is None
    np.testing.assert_array_equal(engine.feeds[0]["x"], x)
    assert compare_engine_to_onnx(model, engine, inputs={"x": x}, precision="fp32").input_source == "given feed"
    report = compare_engine_to_onnx(model, engine, inputs=[{"x": x}, {"x": x[:1]}], precision="fp32")
    assert report.trials == 2 and report.passed
    with pytest.raises(ProfileError, match="outside the engine's profile"):
        compare_engine_to_onnx(model, FakeEngine(model, profile=PROFILE),
                               inputs={"x": np.zeros((9, 3, 8, 8), np.float32)})
    with pytest.raises(InputError, match="No inputs found"):
        compare_engine_to_onnx(model, engine, inputs=[])


def test_elementwise_check_gets_polygraphys_verdict_beside_trtkits():
    model = models.tiny_conv()
    engine = FakeEngine(model, scale=1.001, profile=PROFILE)
    strict = compare_engine_to_onnx(model, engine, precision="fp16", atol=1e-6, rtol=1e-5)
    loose = compare_engine_to_onnx(model, engine, precision="fp16", atol=0.0, rtol=2e-3)
    (s,), (lo,) = strict.worst(), loose.worst()
    assert (s.passed, s.polygraphy_passed) == (False, False) and s.elementwise_failures > 0
    assert (lo.passed, lo.polygraphy_passed) == (True, True) and lo.elementwise_failures == 0
    off = compare_engine_to_onnx(model, engine, precision="fp16", atol=1e-6, polygraphy_check=False)
    assert off.worst()[0].polygraphy_passed is None


def test_polygraphy_verdicts_directly():
    a = {"y": np.array([1.0, 2.0, 3.0], np.float32)}
    b = {"y": np.array([1.0, 2.0, 3.1], np.float32)}
    assert polygraphy_verdicts([a, a], [b, a], atol=0.05, rtol=0.0) == {(0, "y"): False, (1, "y"): True}


def test_report_json_schema():
    model = models.tiny_conv()
    report = compare_engine_to_onnx(model, FakeEngine(model, scale=1.05, profile=PROFILE), precision="fp16",
                                    trials=2, seed=3)
    data = json.loads(json.dumps(report.to_dict()))
    assert set(data) == {"schema", "passed", "verdict", "model", "engine", "precision", "max_error_ratio", "tolerance",
                         "reference_backend", "inputs", "outputs", "trials", "failures", "notes", "timings_s"}
    assert data["schema"] == "trtkit.parity/1" and data["passed"] is False
    assert data["inputs"] == {"source": "random", "seed": 3, "trials": 2, "shapes": {"x": [3, 3, 8, 8]}}
    assert data["tolerance"]["max_error_ratio"] == 1e-2
    (out,) = data["outputs"]
    assert set(out) == {"name", "trial", "passed", "reasons", "summary", "elementwise_failures",
                        "polygraphy_passed", "metrics"}
    assert set(out["metrics"]) >= {"max_abs_error", "max_abs_ref", "error_ratio", "mean_abs_error", "rel_error",
                                   "cosine", "top1_agreement", "worst_index", "nonfinite", "shape"}
    assert out["metrics"]["error_ratio"] == pytest.approx(0.05, rel=1e-3)
    assert data["max_error_ratio"] == pytest.approx(0.05, rel=1e-3) == report.max_error_ratio
    assert len(data["trials"]) == 2 and set(data["timings_s"]) == {"reference", "engine"}


def test_unusable_engine_argument():
    with pytest.raises(EngineError, match="Cannot use int as an engine"):
        compare_engine_to_onnx(models.tiny_conv(), 42)
    with pytest.raises(EngineError, match="Engine file '.*missing.engine' does not exist"):
        compare_engine_to_onnx(models.tiny_conv(), "missing.engine")


def test_runner_profile_reads_input_specs_or_gives_none():
    engine = FakeEngine(models.tiny_conv(), profile=PROFILE)
    assert runner_profile(engine, 0) == PROFILE
    assert runner_profile(engine, 1) is None
    assert runner_profile(lambda feed: feed, 0) is None


def test_image_folder_inputs_use_the_profile_batch(tmp_path):
    from PIL import Image

    for i in range(7):
        Image.new("RGB", (8, 8), color=(i * 30, 0, 200)).save(tmp_path / f"{i}.jpg")
    model = models.tiny_conv()
    engine = FakeEngine(model, profile=PROFILE)
    report = compare_engine_to_onnx(model, engine, inputs=tmp_path, precision="fp32")
    assert report.passed and report.trials == 2 and report.shapes == {"x": (3, 3, 8, 8)}
    assert report.input_source == f"images in {tmp_path}"
    assert compare_engine_to_onnx(model, engine, inputs=tmp_path, trials=1, precision="fp32").trials == 1


def test_save_arrays_writes_inputs_and_both_outputs(tmp_path):
    model = models.tiny_conv()
    path = tmp_path / "arrays.npz"
    report = compare_engine_to_onnx(model, FakeEngine(model, scale=2.0, profile=PROFILE), trials=2, save_arrays=path)
    assert report.notes[-1] == f"inputs and outputs of every trial saved to {path}"
    with np.load(path) as data:
        assert sorted(data.files) == sorted(f"trial{t}/{k}/{n}" for t in (0, 1)
                                            for k, n in (("input", "x"), ("engine", "y"), ("reference", "y")))
        np.testing.assert_allclose(data["trial1/engine/y"], 2 * data["trial1/reference/y"], rtol=1e-6)
    from trtkit.errors import TrtkitError

    with pytest.raises(TrtkitError, match="does not exist"):
        compare_engine_to_onnx(model, FakeEngine(model), save_arrays=tmp_path / "no" / "dir.npz")


def test_feeds_are_cast_to_the_engine_input_dtypes_and_unused_inputs_dropped():
    from trtkit.parity.engine import open_engine

    class Runner:
        input_specs = (TensorSpec("a", True, np.dtype(np.float16), (2,), (((2,), (2,), (2,)),)),)

        def __init__(self):
            self.fed = None

        def infer(self, feed):
            self.fed = feed
            return {}

    runner = Runner()
    with open_engine(runner) as session:
        session.infer({"a": np.ones(2, np.float32), "unused": np.zeros(1, np.float32)})
    assert list(runner.fed) == ["a"] and runner.fed["a"].dtype == np.float16
    assert session.profile == {"a": ((2,), (2,), (2,))}


def test_int8_on_random_inputs_suggests_real_inputs():
    model = models.tiny_conv()
    report = compare_engine_to_onnx(model, FakeEngine(model, profile=PROFILE), precision="int8")
    assert report.passed
    assert any("give real inputs (a folder of them, e.g. the calibration folder)" in n for n in report.notes)
