"""TrtRunner takes and returns the model's own dtypes where the engine's differ (INT64 on TensorRT 8.6, FLOAT64)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.fakes.fake_cuda import FakeCudart
from tests.fakes.fake_trt import make_fake_trt
from tests.rewrites.test_rewrites import float64_model, int64_model
from trtkit.builder import BuildConfig, build
from trtkit.errors import InputError
from trtkit.runtime import TrtRunner
from trtkit.runtime.cuda import Cuda


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


def _uint16_model():
    from tests.rewrites.test_narrow_io import narrow_model

    return narrow_model()


def _uint32_model():
    from onnx import TensorProto

    from tests.rewrites.test_narrow_io import narrow_model

    return narrow_model(TensorProto.UINT32)


def test_uint16_in_and_out_on_engines_that_have_no_uint16_io(tmp_path):
    path, trt = _engine(tmp_path, model=_uint16_model, name="narrow")
    a, b = np.array([3, 700, 65535, 0], dtype=np.uint16), np.array([5, 699, 1, 0], dtype=np.uint16)
    with TrtRunner(path, trt=trt, cuda=Cuda(FakeCudart())) as runner:
        assert {s.name: str(s.dtype) for s in runner.input_specs} == {"a": "int32", "b": "int32"}
        out = runner.infer({"a": a, "b": b})
    assert out["d"].dtype == np.uint16 and out["d"].tolist() == [65531, 690, 65525, 65526]
    assert out["g"].tolist() == [False, True, True, False] and out["f"].tolist() == [3.0, 700.0, 65535.0, 0.0]


def test_without_the_rewrite_the_parser_refuses_uint16_io(tmp_path):
    from trtkit.errors import TrtkitError

    with pytest.raises(TrtkitError, match="UINT16"):
        _engine(tmp_path, sanitize=False, model=_uint16_model, name="narrow")


def test_a_uint32_value_beyond_int32_is_refused_naming_the_tensor(tmp_path):
    path, trt = _engine(tmp_path, model=_uint32_model, name="narrow32")
    big = np.array([1 << 31, 0, 0, 0], dtype=np.uint32)
    with TrtRunner(path, trt=trt, cuda=Cuda(FakeCudart())) as runner:
        with pytest.raises(InputError, match=r"Input 'a': value 2147483648 does not fit in INT32, which this engine "
                                             r"takes for the model's UINT32 \(TensorRT has no UINT32 I/O\)"):
            runner.infer({"a": big, "b": big})
        top = np.array([(1 << 31) - 1, 0, 0, 0], dtype=np.uint32)
        assert runner.infer({"a": top, "b": top * 0})["d"].tolist() == [(1 << 31) - 11] + [4294967286] * 3


def test_uint32_is_int64_on_engines_with_int64_io(tmp_path):
    import json

    path, trt = _engine(tmp_path, version="10.8.0", model=_uint32_model, name="narrow32")
    manifest = json.loads((tmp_path / "narrow32.engine.manifest.json").read_text())
    assert manifest["prepare"]["original_dtypes"] == {"a": "uint32", "b": "uint32", "d": "uint32"}
    big = np.array([(1 << 32) - 1, 0, 0, 0], dtype=np.uint32)
    with TrtRunner(path, trt=trt, cuda=Cuda(FakeCudart())) as runner:
        assert str(runner.input_specs[0].dtype) == "int64"
        assert runner.infer({"a": big, "b": big * 0})["d"].tolist() == [(1 << 32) - 11] + [4294967286] * 3
