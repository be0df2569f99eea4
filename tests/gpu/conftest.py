"""Fixtures shared by the GPU tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    """Where timing caches and exported models are kept: ``$TRTKIT_GPU_CACHE`` (kept between runs) or a temp dir."""
    folder = os.environ.get("TRTKIT_GPU_CACHE")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        return Path(folder)
    return tmp_path_factory.mktemp("gpu-cache")


@pytest.fixture(scope="module")
def cuda_stream():
    """The process's :class:`~trtkit.runtime.cuda.Cuda` and a stream of the module's own (destroyed after it)."""
    from trtkit.runtime.cuda import default_cuda

    cuda = default_cuda()
    stream = cuda.stream_create()
    yield cuda, stream
    cuda.stream_destroy(stream)


def kernels_on_stream(cuda_stream, make):
    """Fixture body: ``(cuda, kernels, stream)`` with ``make(cuda)``'s kernels, closed afterwards."""
    cuda, stream = cuda_stream
    kernels = make(cuda)
    yield cuda, kernels, stream
    kernels.close()
