"""Shared fixtures and markers.

GPU tests (``@pytest.mark.gpu``) need TensorRT and a CUDA device; they are deselected by default (pyproject's addopts)
and, when selected with ``-m gpu`` on a machine without either, skip with the reason.
"""

from __future__ import annotations

import functools
import os
import tempfile

import pytest


@functools.lru_cache(maxsize=None)
def gpu_unavailable_reason() -> str | None:
    """Why GPU tests cannot run here, or ``None`` when TensorRT and a CUDA device are both usable."""
    try:
        import tensorrt  # noqa: F401
    except ImportError as exc:
        return f"TensorRT is not importable ({exc})"
    from trtkit._device import device_info

    info = device_info()
    if "error" in info:
        return f"no usable CUDA device ({info['error']})"
    return None


def pytest_collection_modifyitems(config, items):
    reason = None
    for item in items:
        if "gpu" in item.keywords:
            reason = reason or gpu_unavailable_reason()
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


# Tactic sources every GPU test build uses: the GPU host's bundle stubs cuBLAS/cuDNN.
GPU_TACTIC_SOURCES = ("EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS")


@pytest.fixture
def fake_trt():
    """A fake ``tensorrt`` module imitating TensorRT 8.6."""
    from tests.fakes.fake_trt import make_fake_trt

    return make_fake_trt("8.6.0")


@pytest.fixture(params=["8.6.0", "10.8.0", "11.4.0"])
def fake_trt_any(request):
    """The fake ``tensorrt`` module for each imitated major version."""
    from tests.fakes.fake_trt import make_fake_trt

    return make_fake_trt(request.param)


def pytest_configure(config):
    # every build uses the default timing cache in the user's cache folder (trtkit.builder.timing_cache): the
    # session's own folder instead, set before any build worker starts so that each inherits it
    config.trtkit_cache_dir = os.environ["TRTKIT_CACHE_DIR"] = tempfile.mkdtemp(prefix="trtkit-test-cache-")
    # `@pytest.mark.proves(...)` on GPU tests -> TRTKIT_GPU_RESULTS json for docs/support-matrix.md
    from tests.surface import gpu_evidence

    config.pluginmanager.register(gpu_evidence, "trtkit-gpu-evidence")


def pytest_unconfigure(config):
    import shutil

    shutil.rmtree(getattr(config, "trtkit_cache_dir", ""), ignore_errors=True)
