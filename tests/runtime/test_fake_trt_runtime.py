"""The fake TensorRT runtime looks like each version's real one where trtkit depends on it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests import models
from tests.runtime.fakes import CONV_PROFILE, fake_engine_bytes
from trtkit import _version_compat as compat
from trtkit.runtime.engine import load_engine


def engine_for(trt, build_flags=()):
    return load_engine(fake_engine_bytes(models.tiny_conv(), [CONV_PROFILE], trt.__version__, build_flags), trt=trt)


def test_device_memory_and_context_creation_per_version(fake_trt_any):
    engine = engine_for(fake_trt_any)
    major = int(fake_trt_any.__version__.split(".")[0])
    assert hasattr(engine, "device_memory_size") == (major < 11)
    assert hasattr(engine, "device_memory_size_v2") == (major >= 10)  # from 10.1 (see the 10.0 test below)
    assert hasattr(engine, "create_execution_context_without_device_memory") == (major < 11)
    assert hasattr(fake_trt_any, "ExecutionContextAllocationStrategy") == (major >= 10)
    assert compat.device_memory_size(engine) > 0
    assert compat.create_execution_context(fake_trt_any, engine).active_optimization_profile == 0
    assert compat.contexts_share_profiles(fake_trt_any) == (major >= 10)


def test_profile_sharing_on_86_follows_the_preview_feature(fake_trt):
    plain, shared = engine_for(fake_trt), engine_for(fake_trt, ["PROFILE_SHARING_0806"])
    first, second = plain.create_execution_context(), plain.create_execution_context()
    assert first.active_optimization_profile == 0 and second.active_optimization_profile == -1
    assert not second.set_optimization_profile_async(0, 0)
    a, b = shared.create_execution_context(), shared.create_execution_context()
    assert b.active_optimization_profile == 0 and b.set_optimization_profile_async(0, 0)
    del a, first


def test_serialize_round_trip_and_version_check(fake_trt_any):
    engine = engine_for(fake_trt_any)
    again = load_engine(bytes(engine.serialize()), trt=fake_trt_any)
    assert [again.get_tensor_name(i) for i in range(again.num_io_tensors)] == ["x", "y"]


def test_inspector_json_matches_the_version(fake_trt_any):
    major = int(fake_trt_any.__version__.split(".")[0])
    engine = engine_for(fake_trt_any, ["FP16"] if major < 11 else [])
    info = engine.create_engine_inspector().get_engine_information(fake_trt_any.LayerInformationFormat.JSON)
    layers = compat.inspector_layers(info)
    assert [layer.layer_type for layer in layers] == ["Conv", "Relu", "GlobalAveragePool"]
    assert ("I/O Tensors" in json.loads(info)) == (major >= 11)


def test_context_refuses_unset_shapes_and_unbound_tensors(fake_trt):
    engine = engine_for(fake_trt)
    context = engine.create_execution_context()
    from tests.fakes.fake_cuda import FakeCudart

    rt = FakeCudart()
    stream = int(rt.cudaStreamCreateWithFlags(1)[1])
    assert not context.execute_async_v3(stream)  # no shape, no addresses
    assert not context.set_input_shape("x", (5, 3, 8, 8))  # outside the profile
    assert context.set_input_shape("x", (2, 3, 8, 8))
    assert tuple(context.get_tensor_shape("y")) == (2, 4, 1, 1)
    host = np.zeros((2, 3, 8, 8), np.float32)
    context.set_tensor_address("x", host.ctypes.data)
    context.set_tensor_address("y", host.ctypes.data)
    assert not context.execute_async_v3(stream)  # host memory is not device memory


@pytest.mark.parametrize("data", [b"", b"TRTKIT-FAKE-ENGINE\x00"])
def test_truncated_engines_are_refused(fake_trt, data):
    from trtkit.errors import EngineError

    with pytest.raises(EngineError, match="could not be deserialized"):
        load_engine(data + b"x", trt=fake_trt)


def test_device_memory_v2_arrives_in_10_1():
    from tests.fakes.fake_trt import make_fake_trt

    assert not hasattr(engine_for(make_fake_trt("10.0.1")), "device_memory_size_v2")
    assert hasattr(engine_for(make_fake_trt("10.1.0")), "device_memory_size_v2")
