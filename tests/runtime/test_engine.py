"""Loading engines: manifest check, corrupt/empty/missing files, another TensorRT version, I/O descriptions."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests import models
from tests.runtime.fakes import CONV_PROFILE, fake_engine_bytes
from trtkit.errors import EngineError, TrtkitError, UnsupportedError
from trtkit.manifest import manifest_path
from trtkit.runtime.engine import io_specs, load_engine, numpy_dtype


def write_engine(tmp_path, data, manifest=None):
    path = tmp_path / "m.engine"
    path.write_bytes(data)
    if manifest is not None:
        manifest_path(path).write_text(json.dumps(manifest))
    return path


def test_io_specs_describe_inputs_outputs_and_profiles(fake_trt_any):
    engine = load_engine(fake_engine_bytes(models.tiny_conv(), [CONV_PROFILE], fake_trt_any.__version__),
                         trt=fake_trt_any)
    specs = io_specs(engine, fake_trt_any)
    assert list(specs) == ["x", "y"]
    x, y = specs["x"], specs["y"]
    assert x.is_input and not y.is_input
    assert x.dtype == np.float32 and x.shape == (-1, 3, 8, 8)
    assert x.profile_range(0) == ((1, 3, 8, 8), (2, 3, 8, 8), (4, 3, 8, 8))


def test_static_engine_has_its_shape_as_profile(fake_trt):
    engine = load_engine(fake_engine_bytes(models.tiny_conv(dynamic_batch=False)), trt=fake_trt)
    assert io_specs(engine, fake_trt)["x"].profile_range(0) == ((1, 3, 8, 8),) * 3


def test_missing_and_empty_files(tmp_path, fake_trt):
    with pytest.raises(EngineError, match="'.*nope.engine' does not exist; build one with `trtkit build`"):
        load_engine(tmp_path / "nope.engine", trt=fake_trt)
    with pytest.raises(EngineError, match="is empty"):
        load_engine(write_engine(tmp_path, b""), trt=fake_trt)


def test_corrupt_engine_quotes_tensorrt(tmp_path, fake_trt):
    path = write_engine(tmp_path, b"\x00garbage" * 50)
    with pytest.raises(EngineError) as err:
        load_engine(path, trt=fake_trt)
    text = str(err.value)
    assert f"Engine '{path}' could not be deserialized" in text and "Rebuild it with `trtkit build`" in text
    assert "Magic tag does not match" in text


def test_engine_of_another_tensorrt_version(tmp_path, fake_trt):
    path = write_engine(tmp_path, fake_engine_bytes(models.tiny_conv(), [CONV_PROFILE], "10.8.0"))
    with pytest.raises(EngineError, match="Serialized Engine Version: 10.8.0"):
        load_engine(path, trt=fake_trt, check_manifest=False)


def _manifest(tensorrt="8.6.0", cc="9.0", gpu="NVIDIA H200"):
    return {"environment": {"tensorrt": tensorrt, "compute_capability": cc, "gpu": gpu}, "build": {}}


def test_manifest_naming_another_tensorrt_is_refused(tmp_path, fake_trt):
    path = write_engine(tmp_path, fake_engine_bytes(models.tiny_conv(), [CONV_PROFILE]), _manifest("10.3.0"))
    with pytest.raises(EngineError, match=r"built for TensorRT 10.3.0 \(this machine has 8.6.0\)"):
        load_engine(path, trt=fake_trt)


def test_manifest_mismatch_can_be_overridden_with_a_warning(tmp_path, fake_trt, caplog):
    path = write_engine(tmp_path, fake_engine_bytes(models.tiny_conv(), [CONV_PROFILE]), _manifest("10.3.0"))
    engine = load_engine(path, trt=fake_trt, allow_mismatch=True)
    assert engine.num_io_tensors == 2
    assert "loading it anyway" in caplog.text
    assert load_engine(path, trt=fake_trt, check_manifest=False).num_io_tensors == 2


def test_matching_manifest_loads(tmp_path, fake_trt):
    path = write_engine(tmp_path, fake_engine_bytes(models.tiny_conv(), [CONV_PROFILE]), _manifest())
    assert load_engine(path, trt=fake_trt).num_io_tensors == 2


def test_runner_checks_the_manifest_of_an_engine_file(tmp_path, fake_trt):
    from tests.fakes.fake_cuda import FakeCudart
    from trtkit.runtime import TrtRunner
    from trtkit.runtime.cuda import Cuda

    rt = FakeCudart()
    path = write_engine(tmp_path, fake_engine_bytes(models.tiny_conv(), [CONV_PROFILE]), _manifest("10.3.0"))
    with pytest.raises(EngineError, match="or pass allow_mismatch to try loading it anyway"):
        TrtRunner(path, trt=fake_trt, cuda=Cuda(rt)).activate()
    assert rt.live_allocations()["device"] == 0
    with TrtRunner(path, trt=fake_trt, cuda=Cuda(rt), allow_mismatch=True) as runner:
        assert runner.infer({"x": np.zeros((1, 3, 8, 8), np.float32)})["y"].shape == (1, 4, 1, 1)


def test_load_engine_rejects_other_types(fake_trt):
    with pytest.raises(TrtkitError, match=r"path_or_bytes must be an engine file path or the engine's bytes, not 42$"):
        load_engine(42, trt=fake_trt)


def test_runtime_creation_failure_is_an_engine_error():
    from tests.fakes.fake_trt import make_fake_trt

    trt = make_fake_trt("8.6.0", fail_cuda_init=True)
    with pytest.raises(EngineError, match="could not create its runtime.*trtkit doctor"):
        load_engine(fake_engine_bytes(models.tiny_conv(), [CONV_PROFILE]), trt=trt)


def test_numpy_dtypes(fake_trt_any):
    assert numpy_dtype(fake_trt_any.DataType.HALF) == np.float16
    assert numpy_dtype(fake_trt_any.DataType.INT32) == np.int32
    with pytest.raises(UnsupportedError, match="TensorRT type FP8 have no numpy equivalent"):
        numpy_dtype(fake_trt_any.DataType.FP8)
