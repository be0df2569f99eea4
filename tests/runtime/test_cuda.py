"""The cuda-python checker and wrappers, against the fake runtime (same signatures and returns)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from tests.fakes.fake_cuda import FakeCudart, cudaError_t
from trtkit.errors import CudaError
from trtkit.runtime.buffers import DeviceArray, HostBuffer, device_input
from trtkit.runtime.cuda import Cuda, check
from trtkit.runtime.graphs import GraphCache, capture


def test_check_returns_values_or_raises_with_the_error_name():
    assert check((cudaError_t.cudaSuccess,)) is None
    assert check((cudaError_t.cudaSuccess, 7)) == 7
    assert check((cudaError_t.cudaSuccess, 1, 2)) == (1, 2)
    with pytest.raises(CudaError, match=r"^cudaMalloc\(64\) failed with cudaErrorMemoryAllocation: the GPU is out"):
        check((cudaError_t.cudaErrorMemoryAllocation, None), "cudaMalloc(64)")
    with pytest.raises(CudaError, match="cudaErrorInsufficientDriver: no usable NVIDIA driver"):
        check((cudaError_t.cudaErrorInsufficientDriver,), "cudaGetDeviceCount")


def test_no_driver_is_a_clear_error():
    cuda = Cuda(FakeCudart(no_device=True))
    with pytest.raises(CudaError, match="cudaStreamCreateWithFlags failed with cudaErrorInsufficientDriver"):
        cuda.stream_create()


def test_copies_run_in_stream_order_only_when_synchronized():
    rt = FakeCudart()
    cuda = Cuda(rt)
    stream = cuda.stream_create()
    src = np.arange(16, dtype=np.float32)
    dst = HostBuffer(cuda, src.nbytes)
    dev = cuda.malloc(src.nbytes)
    cuda.memcpy_htod_async(dev, src.ctypes.data, src.nbytes, stream)
    cuda.memcpy_dtoh_async(dst.ptr, dev, src.nbytes, stream)
    assert not dst.view(np.float32, (16,)).any()  # nothing ran yet
    cuda.stream_synchronize(stream)
    assert np.array_equal(dst.view(np.float32, (16,)), src)
    dst.free()
    cuda.free(dev)
    cuda.stream_destroy(stream)
    assert rt.live_allocations() == {"device": 0, "host": 0, "streams": 0, "events": 0, "graphs": 0, "registered": 0}


def test_copy_direction_and_bounds_are_checked():
    cuda = Cuda(FakeCudart())
    dev = cuda.malloc(64)
    host = np.zeros(64, np.uint8)
    with pytest.raises(CudaError, match="host to device.*cudaErrorInvalidValue"):
        cuda.memcpy_htod_async(host.ctypes.data, dev, 64, 0)  # swapped
    with pytest.raises(CudaError, match="device to host"):
        cuda.memcpy_dtoh_async(host.ctypes.data, dev, 65, 0)  # past the allocation


def test_pageable_memory_cannot_be_captured():
    cuda = Cuda(FakeCudart())
    stream = cuda.stream_create()
    dev = cuda.malloc(64)
    pageable = np.zeros(64, np.uint8)
    graph, reason = capture(cuda, stream, lambda: cuda.memcpy_htod_async(dev, pageable.ctypes.data, 64, stream))
    assert graph is None and "cudaErrorStreamCaptureUnsupported" in reason
    pinned = HostBuffer(cuda, 64)
    graph, reason = capture(cuda, stream, lambda: cuda.memcpy_htod_async(dev, pinned.ptr, 64, stream))
    assert graph is not None and reason == ""
    graph.destroy()
    graph.destroy()  # idempotent


def test_graph_cache_remembers_failures_and_clears():
    rt = FakeCudart(fail_capture=True)
    cuda = Cuda(rt)
    stream = cuda.stream_create()
    cache = GraphCache()
    assert cache.capture("k", cuda, stream, lambda: None) is None
    assert cache.failed("k") and len(cache) == 0
    assert rt.calls["cudaGetLastError"] == 1
    rt.fail_capture = False
    assert cache.capture("j", cuda, stream, lambda: None) is not None and len(cache) == 1
    cache.clear()
    assert len(cache) == 0 and not cache.failed("k") and rt.live_allocations()["graphs"] == 0


def test_events_time_the_work_between_them():
    cuda = Cuda(FakeCudart())
    stream = cuda.stream_create()
    a, b = cuda.event_create(), cuda.event_create()
    cuda.event_record(a, stream)
    cuda.event_record(b, stream)
    assert not cuda.event_query(b)
    cuda.event_synchronize(b)
    assert cuda.event_query(b) and cuda.event_elapsed_ms(a, b) > 0
    untimed = cuda.event_create(timing=False)
    cuda.event_record(untimed, stream)
    cuda.stream_synchronize(stream)
    with pytest.raises(CudaError, match="cudaEventElapsedTime"):
        cuda.event_elapsed_ms(a, untimed)


def test_device_array_interface_round_trip():
    cuda = Cuda(FakeCudart())
    x = np.arange(6, dtype=np.float16).reshape(2, 3)
    ptr = cuda.malloc(x.nbytes)
    cuda.memcpy_htod_async(ptr, x.ctypes.data, x.nbytes, 0)
    arr = DeviceArray(ptr, x.shape, x.dtype, cuda=cuda)
    iface = arr.__cuda_array_interface__
    assert iface["shape"] == (2, 3) and iface["typestr"] == "<f2" and iface["data"] == (ptr, False)
    assert iface["version"] == 3
    assert np.array_equal(arr.to_host(), x)
    desc = device_input("x", arr)
    assert desc.ptr == ptr and desc.shape == (2, 3) and desc.dtype == np.float16
    assert device_input("x", x) is None
    assert "DeviceArray(shape=(2, 3)" in repr(arr)


def test_malformed_interface_is_an_input_error():
    from trtkit.errors import InputError

    bad = type("Bad", (), {"__cuda_array_interface__": {"shape": (2,)}})()
    with pytest.raises(InputError, match="Input 'x': malformed __cuda_array_interface__"):
        device_input("x", bad)


def test_host_buffer_views_share_memory():
    cuda = Cuda(FakeCudart())
    buf = HostBuffer(cuda, 64)
    view = buf.view(np.float32, (2, 2))
    view[...] = 3
    assert ctypes.c_float.from_address(buf.ptr).value == 3.0
    buf.free()
    buf.free()


@pytest.mark.parametrize("threads", [0, 4])
def test_copy_into_splits_large_copies_exactly(threads):
    from trtkit.runtime.buffers import PARALLEL_COPY_BYTES, copy_into, copy_of

    src = np.random.default_rng(0).standard_normal(PARALLEL_COPY_BYTES // 4 + 12345).astype(np.float32)
    dst = np.zeros_like(src)
    copy_into(dst, src, threads=threads)
    assert np.array_equal(dst, src)
    assert np.array_equal(copy_of(src.reshape(1, -1)), src.reshape(1, -1))
    with pytest.raises(TypeError):
        copy_into(dst, src.astype(np.float64), threads=threads)  # no silent casts
