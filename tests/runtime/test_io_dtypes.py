"""TrtRunner takes and returns the model's own dtypes where the engine's differ (INT64 on TensorRT 8.6, FLOAT64)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.rewrites.test_rewrites import float64_model, int64_model
from trtkit.builder import BuildConfig, build
from trtkit.errors import InputError
from trtkit.runtime import TrtRunner
from trtkit.runtime.cuda import Cuda
from trtkit.testing.fake_cuda import FakeCudart
from trtkit.testing.fake_trt import make_fake_trt


def _engine(tmp_path, version="8.6.0", sanitize=True, model=int64_model, name="ids"):
    trt = make_fake_trt(version)
    path = tmp_path / f"{name}.engine"
    build(model(), BuildConfig(profiling_verbosity="NONE", sanitize=sanitize), output=path, trt=trt)
    return path, trt


IDS = np.array([[1, 5, 2], [7, 0, 3]], dtype=np.int64)


def test_int64_in_and_out_on_an_engine_without_int64_io(tmp_path):
    path, trt = _engine(tmp_path)
    with TrtRunner(path, trt=trt, cuda=Cuda(FakeCudart())) as runner:
        assert {s.name: str(s.dtype) for s in runner.input_specs + runner.output_specs} == \
            {"ids": "int32", "best": "int32"}
        out = runner.infer({"ids": IDS})
    assert out["best"].dtype == np.int64 and out["best"].tolist() == [1, 0]


def test_without_the_rewrite_the_engine_refuses_int64_feeds(tmp_path):
    path, trt = _engine(tmp_path, sanitize=False)
    with TrtRunner(path, trt=trt, cuda=Cuda(FakeCudart())) as runner:
        with pytest.raises(InputError, match="ids"):
            runner.infer({"ids": IDS})


def test_a_value_beyond_int32_is_refused_naming_the_tensor(tmp_path):
    path, trt = _engine(tmp_path)
    with TrtRunner(path, trt=trt, cuda=Cuda(FakeCudart())) as runner:
        with pytest.raises(InputError, match=r"Input 'ids': value 4294967296 does not fit in INT32"):
            runner.infer({"ids": IDS * 0 + (1 << 32)})


def test_the_manifest_records_the_original_dtypes(tmp_path):
    import json

    path, _ = _engine(tmp_path)
    manifest = json.loads((tmp_path / "ids.engine.manifest.json").read_text())
    assert manifest["prepare"]["original_dtypes"] == {"ids": "int64", "best": "int64"}


def test_engines_with_int64_io_need_no_conversion(tmp_path):
    path, trt = _engine(tmp_path, version="10.8.0")
    with TrtRunner(path, trt=trt, cuda=Cuda(FakeCudart())) as runner:
        assert str(runner.input_specs[0].dtype) == "int64"
        assert runner.infer({"ids": IDS})["best"].tolist() == [1, 0]


X = np.array([[1.25, -3.0, 1e-3], [7.0, 0.0, 1e30]])
SCALE = np.array([0.5, 2.0, -1.0])


@pytest.mark.parametrize("version", ["8.6.0", "10.8.0"])
def test_float64_in_and_out_on_engines_that_have_no_fp64_io(tmp_path, version):
    path, trt = _engine(tmp_path, version=version, model=float64_model, name="doubles")
    with TrtRunner(path, trt=trt, cuda=Cuda(FakeCudart())) as runner:
        assert {str(s.dtype) for s in runner.input_specs + runner.output_specs} == {"float32"}
        out = runner.infer({"x": X})
    assert out["scaled"].dtype == np.float64 and out["total"].dtype == np.float64
    np.testing.assert_allclose(out["scaled"], X * SCALE, rtol=1e-6)
    np.testing.assert_allclose(out["total"], (X * SCALE).sum(), rtol=1e-6)


def test_without_the_rewrite_the_engine_refuses_float64_feeds(tmp_path):
    path, trt = _engine(tmp_path, sanitize=False, model=float64_model, name="doubles")
    with TrtRunner(path, trt=trt, cuda=Cuda(FakeCudart())) as runner:
        with pytest.raises(InputError, match="Input 'x': dtype float64, expected float32"):
            runner.infer({"x": X})


def test_a_float64_value_beyond_float32_is_refused_naming_the_tensor(tmp_path):
    path, trt = _engine(tmp_path, model=float64_model, name="doubles")
    with TrtRunner(path, trt=trt, cuda=Cuda(FakeCudart())) as runner:
        with pytest.raises(InputError, match=r"Input 'x': value -1e\+300 is beyond FLOAT32's range"):
            runner.infer({"x": X * 0 - 1e300})
        # infinities and NaN have FLOAT32 forms: they pass through as TensorRT would compute with them
        out = runner.infer({"x": np.where(X == 7.0, np.inf, X)})
    assert np.isposinf(out["scaled"][1, 0]) and np.isposinf(out["total"]) and out["scaled"].dtype == np.float64


def test_the_manifest_records_float64_as_the_original_dtype(tmp_path):
    import json

    _engine(tmp_path, model=float64_model, name="doubles")
    manifest = json.loads((tmp_path / "doubles.engine.manifest.json").read_text())
    assert manifest["prepare"]["original_dtypes"] == {"x": "float64", "scaled": "float64", "total": "float64"}
    assert {r["rewrite"] for r in manifest["prepare"]["rewrites"]} >= {"float64-io"}
