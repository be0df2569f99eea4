"""Fixtures of the pipeline tests: the fake backends (tests/runtime), a fake engine of the tiny conv net and media
made with PyAV and pillow."""

from __future__ import annotations

import pytest

from tests import models
from tests.fakes.fake_cuda import FakeCudart
from tests.fakes.fake_trt import make_fake_trt
from tests.runtime.fakes import CONV_PROFILE, fake_engine_bytes, fake_gpu  # noqa: F401 - fixture
from trtkit.runtime.cuda import Cuda


@pytest.fixture
def engine_file(tmp_path):
    """The tiny conv net (input x: N x 3 x 8 x 8, N in 1..4) as a fake engine file."""
    path = tmp_path / "conv.engine"
    path.write_bytes(fake_engine_bytes(models.tiny_conv(), [CONV_PROFILE]))
    return path


@pytest.fixture
def backends():
    """Runner keyword arguments that select a fake TensorRT and a fake CUDA."""
    return {"trt": make_fake_trt("8.6.0"), "cuda": Cuda(FakeCudart())}


@pytest.fixture(autouse=True)
def _trtkit_logs_reach_caplog(monkeypatch):
    import logging

    monkeypatch.setattr(logging.getLogger("trtkit"), "propagate", True)
