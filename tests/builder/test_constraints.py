"""--precision-constraints: the math layers are set to the asked precision with the matching builder flag, and the
builds where constraints mean nothing are refused with the reason."""

import pytest

from tests import models
from tests.fakes.fake_trt import make_fake_trt
from trtkit.builder import constraints
from trtkit.builder.builder import build_serialized
from trtkit.builder.config import BuildConfig, CalibrationSettings
from trtkit.builder.profiles import parse_shapes
from trtkit.errors import TrtkitError, UnsupportedError

PROFILE = [parse_shapes("x:1x3x8x8,2x3x8x8,4x3x8x8")]


def _recording_apply(monkeypatch):
    """Record what constraints.apply did to the network and the builder config."""
    seen = {}
    real = constraints.apply

    def apply(trt, network, bconfig, precision, mode):
        names = real(trt, network, bconfig, precision, mode)
        seen["layers"] = {network.get_layer(i).name: network.get_layer(i).precision for i in range(network.num_layers)}
        seen["flags"] = {f.name for f in bconfig.flags}
        return names

    monkeypatch.setattr(constraints, "apply", apply)
    return seen


@pytest.mark.parametrize("mode, flag", [("prefer", "PREFER_PRECISION_CONSTRAINTS"),
                                        ("obey", "OBEY_PRECISION_CONSTRAINTS")])
def test_fp16_flag_build_sets_only_the_convolutions_to_half(monkeypatch, mode, flag):
    trt = make_fake_trt("8.6.0")
    seen = _recording_apply(monkeypatch)
    result = build_serialized(models.tiny_conv(), BuildConfig(precision="fp16", fp16_mode="flag", profiles=PROFILE,
                                                              precision_constraints=mode), trt=trt)
    assert flag in seen["flags"] and "FP16" in seen["flags"]
    conv = [name for name, dt in seen["layers"].items() if dt is not None]
    assert conv and all(seen["layers"][n] == trt.DataType.HALF for n in conv)
    assert any(dt is None for dt in seen["layers"].values())  # the ReLU is left to TensorRT
    notes = " ".join(result.manifest.to_json()["build"]["precision_plan"]["notes"])
    assert f"precision constraints ({mode}): {len(conv)} convolution/matrix multiply layer(s) set to FP16" in notes
    assert result.manifest.to_json()["build"]["precision_constraints"] == mode


def test_int8_calibrator_build_sets_int8(monkeypatch):
    import numpy as np

    trt = make_fake_trt("10.8.0")
    seen = _recording_apply(monkeypatch)
    feeds = [{"x": np.random.default_rng(i).standard_normal((2, 3, 8, 8)).astype("float32")} for i in range(2)]
    build_serialized(models.tiny_conv(), BuildConfig(
        precision="int8", int8_mode="calibrator", profiles=PROFILE, precision_constraints="prefer",
        calibration=CalibrationSettings(source=feeds)), trt=trt)
    assert trt.DataType.INT8 in seen["layers"].values()


def test_none_leaves_every_layer_and_flag_alone(monkeypatch):
    seen = _recording_apply(monkeypatch)
    build_serialized(models.tiny_conv(), BuildConfig(precision="fp16", fp16_mode="flag", profiles=PROFILE),
                     trt=make_fake_trt("8.6.0"))
    assert set(seen["layers"].values()) == {None}
    assert not {"PREFER_PRECISION_CONSTRAINTS", "OBEY_PRECISION_CONSTRAINTS"} & seen["flags"]


@pytest.mark.parametrize("version, options, message", [
    ("8.6.0", {"precision": "fp32"}, "precision_constraints 'obey' needs an FP16, BF16 or INT8 build"),
    ("10.8.0", {"precision": "fp16", "fp16_mode": "cast"}, "strongly typed, so its types already come from"),
    ("8.6.0", {"precision": "int8", "int8_mode": "qdq"}, "does not apply to INT8 mode 'qdq'"),
])
def test_refused_where_constraints_mean_nothing(version, options, message):
    with pytest.raises(UnsupportedError, match=message):
        build_serialized(models.tiny_conv(), BuildConfig(profiles=PROFILE, precision_constraints="obey", **options),
                         trt=make_fake_trt(version))


def test_unknown_mode_is_named():
    with pytest.raises(TrtkitError,
                       match="precision_constraints must be one of 'none', 'prefer', 'obey', not 'always'"):
        BuildConfig(precision_constraints="always")


def test_cli_option_reaches_the_config():
    import argparse

    from trtkit.cli.options import add_build_options, config_from_args

    parser = argparse.ArgumentParser()
    add_build_options(parser)
    args = parser.parse_args(["--fp16", "--precision-constraints", "prefer"])
    assert config_from_args(args).precision_constraints == "prefer"
