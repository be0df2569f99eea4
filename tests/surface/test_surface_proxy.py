"""The name-checking proxy of the surface tier, on a tiny synthetic "real" module (default tier, no TensorRT)."""

from __future__ import annotations

import enum
import importlib.util
import sys
import types
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("surface_proxy", Path(__file__).with_name("surface_proxy.py"))
proxy = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("surface_proxy", proxy)
_spec.loader.exec_module(proxy)


def _real_module():
    """Shaped like pybind11 bindings: signatures in docstrings, properties, enums."""
    real = types.ModuleType("tensorrt_bindings")
    real.__version__ = "11.4.0.106"

    class BuilderFlag(enum.IntEnum):
        TF32 = 0

    class IBuilderConfig:
        def set_flag(self, flag):
            "set_flag(self: tensorrt_bindings.tensorrt.IBuilderConfig, flag: BuilderFlag) -> None"

        num_profiles = property(lambda self: 0)

    class Builder:
        def create_builder_config(self):
            "create_builder_config(self: tensorrt_bindings.tensorrt.Builder) -> " \
                "tensorrt_bindings.tensorrt.IBuilderConfig"

    class ILogger:
        def __init__(self):
            pass

    real.BuilderFlag, real.IBuilderConfig, real.Builder, real.ILogger = BuilderFlag, IBuilderConfig, Builder, ILogger
    return real


def _fake_module():
    fake = types.ModuleType("tensorrt")
    fake.__version__ = "11.4.0.106"
    fake.BuilderFlag = enum.IntEnum("BuilderFlag", {"TF32": 3, "FP16": 4})

    class IBuilderConfig:
        def __init__(self):
            self.flags = set()

        def set_flag(self, flag):
            self.flags.add(flag)

        def num_profiles(self):  # wrong kind: a property in the real module
            return 0

    class Builder:
        def __init__(self, logger):
            self.logger = logger

        def create_builder_config(self):
            return IBuilderConfig()

    class ILogger:
        def __init__(self):
            pass

    fake.IBuilderConfig, fake.Builder, fake.ILogger = IBuilderConfig, Builder, ILogger
    return fake


def trtkit_like_configure(trt):
    """Stands for trtkit code (its frame's module is not trtkit, so 'used by' names this test module)."""
    builder = trt.Builder(None)
    config = builder.create_builder_config()
    config.set_flag(trt.BuilderFlag.FP16)


def test_a_name_missing_in_the_real_module_fails_naming_version_and_attribute():
    trt, log = proxy.make_surface(_fake_module(), _real_module(), "11.4.0.106")
    with pytest.raises(proxy.MissingOnSurface,
                       match=r"TensorRT 11\.4\.0\.106 has no attribute BuilderFlag\.FP16 "
                             r"\(used by .*trtkit_like_configure\)"):
        trtkit_like_configure(trt)
    assert "Builder.create_builder_config" in log.used()
    assert log.probed_missing() == ["BuilderFlag.FP16"]


def test_hasattr_probes_see_the_real_surface():
    trt, _ = proxy.make_surface(_fake_module(), _real_module(), "11.4.0.106")
    assert hasattr(trt.BuilderFlag, "TF32") and not hasattr(trt.BuilderFlag, "FP16")
    assert set(trt.BuilderFlag.__members__) == {"TF32"}


def test_returned_objects_are_checked_as_the_real_class_from_the_signature():
    trt, log = proxy.make_surface(_fake_module(), _real_module(), "11.4.0.106")
    config = trt.Builder(None).create_builder_config()
    assert isinstance(config, proxy.InstanceProxy)
    with pytest.raises(proxy.MissingOnSurface, match="has no attribute IBuilderConfig.flags"):
        config.flags  # noqa: B018 - a fake-only attribute
    with pytest.raises(proxy.MissingOnSurface, match="no attribute IBuilderConfig.max_workspace_size to set"):
        config.max_workspace_size = 1


def test_a_property_that_the_fake_made_a_method_is_reported():
    trt, log = proxy.make_surface(_fake_module(), _real_module(), "11.4.0.106")
    trt.Builder(None).create_builder_config().num_profiles  # noqa: B018
    [gap] = log.fake_gaps
    assert gap.startswith("IBuilderConfig.num_profiles is a property in the real TensorRT but a method in the fake")
    assert gap.endswith("test_a_property_that_the_fake_made_a_method_is_reported)")


def test_a_name_the_fake_lacks_is_a_gap_not_a_silent_false():
    real = _real_module()
    real.IInt8Calibrator = type("IInt8Calibrator", (), {})
    trt, log = proxy.make_surface(_fake_module(), real, "10.8.0.43")
    assert not hasattr(trt, "IInt8Calibrator")
    [gap] = log.fake_gaps
    assert gap.startswith("IInt8Calibrator (used by ") and gap.endswith("a_gap_not_a_silent_false)")


def test_subclassing_and_isinstance_go_to_the_target_class():
    fake = _fake_module()
    trt, _ = proxy.make_surface(fake, _real_module(), "11.4.0.106")

    class MyLogger(trt.ILogger):
        def __init__(self):
            trt.ILogger.__init__(self)

    logger = MyLogger()
    assert isinstance(logger, fake.ILogger) and isinstance(logger, trt.ILogger)
    assert trt.Builder(logger).create_builder_config() is not None


def test_a_call_no_real_signature_accepts_is_refused_and_logged():
    real = _real_module()
    real.IBuilderConfig.set_timing_cache = lambda self, cache, ignore_mismatch: True
    real.IBuilderConfig.set_timing_cache.__doc__ = (
        "set_timing_cache(self: tensorrt_bindings.tensorrt.IBuilderConfig, cache: tensorrt_bindings.tensorrt."
        "ITimingCache, ignore_mismatch: bool) -> bool")
    fake = _fake_module()
    fake.IBuilderConfig.set_timing_cache = lambda self, cache, ignore_mismatch=False: True
    trt, log = proxy.make_surface(fake, real, "8.6.1")
    config = trt.Builder(None).create_builder_config()
    assert config.set_timing_cache("cache", True) is True
    with pytest.raises(proxy.CallMismatch, match=r"TensorRT 8\.6\.1: IBuilderConfig\.set_timing_cache\(<arg>\) "
                                                 r"matches none of its signatures \(cache, ignore_mismatch\)"):
        config.set_timing_cache("cache")  # the fake would accept it; TensorRT 8.6 would not
    assert len(log.call_errors) == 1


def test_signatures_are_read_from_pybind_docstrings_with_overloads_and_defaults():
    func = types.SimpleNamespace(__doc__=(
        "create_execution_context(*args, **kwargs)\nOverloaded function.\n\n"
        "1. create_execution_context(self: tensorrt.ICudaEngine, strategy: tensorrt.ExecutionContextAllocationStrategy"
        " = <ExecutionContextAllocationStrategy.STATIC: 0>) -> tensorrt.IExecutionContext\n\n"
        "2. create_execution_context(self: tensorrt.ICudaEngine, runtime_config: tensorrt.IRuntimeConfig = None) "
        "-> tensorrt.IExecutionContext\n"))
    sigs = proxy.signatures(func, "create_execution_context")
    assert sigs == [[("strategy", True)], [("runtime_config", True)]]
    assert proxy.fits(sigs[0], 0, {}) and proxy.fits(sigs[0], 1, {}) and not proxy.fits(sigs[0], 2, {})
    assert proxy.fits(sigs[1], 0, {"runtime_config": None}) and not proxy.fits(sigs[0], 0, {"stream": 1})
