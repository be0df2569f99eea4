"""Helpers for CPU tests of the runtime: fake engine bytes from tiny ONNX models, and installing the fake backends
where trtkit looks for ``tensorrt`` and cuda-python (for CLI tests, which cannot pass fakes as arguments)."""

from __future__ import annotations

import sys

import onnx
import pytest

from tests.fakes.fake_cuda import FakeCudart
from tests.fakes.fake_trt import make_fake_trt
from tests.fakes.fake_trt.runtime import serialize_fake_engine

CONV_PROFILE = {"x": [[1, 3, 8, 8], [2, 3, 8, 8], [4, 3, 8, 8]]}


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


@pytest.fixture
def fake_gpu(monkeypatch):
    """Make ``import tensorrt`` and ``cuda.bindings.runtime`` give the fakes (for CLI tests, which cannot be passed
    fakes as arguments); yields ``(fake_trt, fake_cudart)`` and forgets the fakes afterwards."""
    import cuda.bindings

    from trtkit import _device, _lazy
    from trtkit.runtime import cuda as runtime_cuda

    trt, rt = make_fake_trt("8.6.0"), FakeCudart()
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    monkeypatch.setitem(sys.modules, "cuda.bindings.runtime", rt)
    monkeypatch.setattr(cuda.bindings, "runtime", rt, raising=False)
    monkeypatch.setattr(runtime_cuda, "_DEFAULT", None)
    _lazy.import_module.cache_clear()
    _device.device_info.cache_clear()
    yield trt, rt
    _lazy.import_module.cache_clear()
    _device.device_info.cache_clear()
