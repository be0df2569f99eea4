"""Fixtures for runtime tests: a fake CUDA runtime, a fake TensorRT, and fake engines built from tiny ONNX models."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests import models
from tests.fakes.fake_cuda import FakeCudart
from tests.fakes.fake_trt import make_fake_trt
from tests.runtime.fakes import CONV_PROFILE, fake_engine_bytes
from trtkit.runtime.cuda import Cuda


def _env(version: str) -> SimpleNamespace:
    rt = FakeCudart()
    return SimpleNamespace(version=version, trt=make_fake_trt(version), rt=rt, cuda=Cuda(rt),
                           model=models.tiny_conv(),
                           engine=fake_engine_bytes(models.tiny_conv(), [CONV_PROFILE], version))


@pytest.fixture(params=["8.6.0"])
def env(request):
    """Fake TensorRT + fake CUDA, with the tiny conv net's engine bytes (dynamic batch 1..4)."""
    return _env(request.param)


@pytest.fixture(params=["8.6.0", "10.8.0", "11.4.0"])
def env_any(request):
    """Like ``env`` for each imitated TensorRT major version."""
    return _env(request.param)


@pytest.fixture(autouse=True)
def _trtkit_logs_reach_caplog(monkeypatch):
    """The CLI's logging setup (run by other tests) stops propagation; caplog listens at the root."""
    import logging

    monkeypatch.setattr(logging.getLogger("trtkit"), "propagate", True)
