"""The function the builder passes down to calibration builds the FP32 statistics engine it describes."""

import numpy as np

from tests import models
from tests.fakes.fake_trt.runtime import parse_fake_engine
from trtkit.builder.builder import statistics_engine_builder
from trtkit.builder.config import BuildConfig, CalibrationSettings
from trtkit.builder.profiles import parse_shapes


def test_the_statistics_engine_is_fp32_with_the_users_profiles_and_its_model(fake_trt):
    feeds = [{"x": np.zeros((2, 3, 8, 8), np.float32)}]
    config = BuildConfig(precision="int8", int8_mode="qdq", profiles=[parse_shapes("x:1x3x8x8,2x3x8x8,4x3x8x8")],
                         calibration=CalibrationSettings(source=feeds), require_precision=True, optimization_level=3)
    model = models.tiny_conv()
    header, onnx_bytes = parse_fake_engine(statistics_engine_builder(config, fake_trt)(model))
    assert header["profiles"] == [{"x": [[1, 3, 8, 8], [2, 3, 8, 8], [4, 3, 8, 8]]}]
    assert not {"INT8", "FP16"} & set(header["build_flags"])  # FP32 (TF32 as the user's config allows)
    assert onnx_bytes == model.SerializeToString()  # the model it was given, not the one in the config
