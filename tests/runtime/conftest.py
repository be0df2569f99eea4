"""Fixtures for runtime tests: a fake CUDA runtime, a fake TensorRT, and fake engines built from tiny ONNX models."""

from __future__ import annotations

from types import SimpleNamespace

import onnx
import pytest

from tests import models
from trtkit.runtime.cuda import Cuda
from trtkit.testing.fake_cuda import FakeCudart
from trtkit.testing.fake_trt import make_fake_trt
from trtkit.testing.fake_trt.runtime import serialize_fake_engine


def io_specs_of(model) -> list:
    inits = {t.name for t in model.graph.initializer}
    specs = []
    for mode, values in (("INPUT", [v for v in model.graph.input if v.name not in inits]),
                         ("OUTPUT", model.graph.output)):
        for v in values:
            dims = [d.dim_value if d.dim_value else -1 for d in v.type.tensor_type.shape.dim]
            dtype = onnx.helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type).name
            specs.append({"name": v.name, "mode": mode, "dtype": dtype, "shape": dims})
    return specs


def fake_engine_bytes(model, profiles=(), version="8.6.0", build_flags=()) -> bytes:
    """Bytes of a fake engine running ``model`` (profiles: ``[{name: [min, opt, max]}]``)."""
    return serialize_fake_engine(model.SerializeToString(), io_specs_of(model), list(profiles), version,
                                 build_flags)


CONV_PROFILE = {"x": [[1, 3, 8, 8], [2, 3, 8, 8], [4, 3, 8, 8]]}


@pytest.fixture(params=["8.6.0"])
def env(request):
    """Fake TensorRT + fake CUDA, with the tiny conv net's engine bytes (dynamic batch 1..4)."""
    version = request.param
    rt = FakeCudart()
    return SimpleNamespace(version=version, trt=make_fake_trt(version), rt=rt, cuda=Cuda(rt),
                           model=models.tiny_conv(),
                           engine=fake_engine_bytes(models.tiny_conv(), [CONV_PROFILE], version))


@pytest.fixture(params=["8.6.0", "10.8.0", "11.4.0"])
def env_any(request):
    """Like ``env`` for each imitated TensorRT major version."""
    version = request.param
    rt = FakeCudart()
    return SimpleNamespace(version=version, trt=make_fake_trt(version), rt=rt, cuda=Cuda(rt),
                           model=models.tiny_conv(),
                           engine=fake_engine_bytes(models.tiny_conv(), [CONV_PROFILE], version))
