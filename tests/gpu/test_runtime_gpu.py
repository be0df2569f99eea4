"""TrtRunner on a real GPU: graphs vs plain, device-resident I/O, async and several streams, validation before any
enqueue, resources freed. Tiny conv net built in-process with TensorRT's own tactic sources (the GPU bundle stubs
cuBLAS/cuDNN). No timing assertions.

Run on the GPU host: ``bash .gpu/bin/gpu-run pytest -m gpu -q tests/gpu/test_runtime_gpu.py``.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tests import models
from tests.conftest import GPU_TACTIC_SOURCES
from trtkit.errors import EngineError, InputError

pytestmark = pytest.mark.gpu

PROFILE = "x:1x3x8x8,2x3x8x8,4x3x8x8"


@pytest.fixture(scope="session")
def engine_bytes():
    """The tiny conv net, built once per session (test_bench_gpu.py uses it too)."""
    from trtkit.builder.builder import build_serialized
    from trtkit.builder.config import BuildConfig
    from trtkit.builder.profiles import parse_shapes

    config = BuildConfig(profiles=[parse_shapes(PROFILE)], tactic_sources=GPU_TACTIC_SOURCES, tf32=False)
    return build_serialized(models.tiny_conv(), config).engine


@pytest.fixture(scope="module")
def engine_path(engine_bytes, tmp_path_factory):
    path = tmp_path_factory.mktemp("rt") / "tiny.engine"
    path.write_bytes(engine_bytes)
    return path


def inputs(batch: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 3, 8, 8)).astype(np.float32)


def reference(x):
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(models.tiny_conv()).run(None, {"x": x})[0]


def to_device(array):
    """A DeviceArray holding a copy of ``array`` (stands in for a CuPy array / torch CUDA tensor)."""
    from trtkit.runtime import DeviceArray
    from trtkit.runtime.cuda import default_cuda

    cuda = default_cuda()
    ptr = cuda.malloc(array.nbytes)
    cuda.memcpy_htod_async(ptr, array.ctypes.data, array.nbytes, 0)
    cuda.stream_synchronize(0)
    return DeviceArray(ptr, array.shape, array.dtype, cuda=cuda)


class CountingContext:
    """Wraps an IExecutionContext and counts the calls that enqueue work or change shapes."""

    def __init__(self, context):
        self._context = context
        self.enqueues = 0
        self.shape_sets = 0

    def execute_async_v3(self, stream):
        self.enqueues += 1
        return self._context.execute_async_v3(stream)

    def set_input_shape(self, name, shape):
        self.shape_sets += 1
        return self._context.set_input_shape(name, shape)

    def __getattr__(self, name):
        return getattr(self._context, name)


def test_outputs_match_the_onnx_reference(engine_path):
    from trtkit.runtime import TrtRunner

    x = inputs(3)
    with TrtRunner(engine_path) as runner:
        y = runner.infer({"x": x})["y"]
    np.testing.assert_allclose(y, reference(x), rtol=1e-4, atol=1e-5)


def test_graph_and_plain_are_bit_identical_across_shapes(engine_bytes):
    from trtkit.runtime import TrtRunner

    with TrtRunner(engine_bytes) as plain, TrtRunner(engine_bytes, cuda_graph=True) as graphed:
        for batch, seed in [(1, 1), (4, 2), (1, 3), (4, 4), (2, 5), (4, 6)]:  # new shapes and graph replays
            x = inputs(batch, seed)
            a, b = plain.infer({"x": x})["y"], graphed.infer({"x": x})["y"]
            assert np.array_equal(a, b), batch
        assert graphed.stats().graphs == 3  # one graph per input shape


@pytest.mark.parametrize("address_graphs", [8, 0])  # 0: device inputs are copied into the runner's buffer
def test_device_resident_inputs_and_outputs_equal_the_host_path(engine_bytes, address_graphs, monkeypatch):
    from trtkit.runtime import DeviceArray, TrtRunner
    from trtkit.runtime import runner as runner_module

    monkeypatch.setattr(runner_module, "MAX_ADDRESS_GRAPHS", address_graphs)
    x = inputs(4, 7)
    dx = to_device(x)
    try:
        with TrtRunner(engine_bytes) as host:
            expected = host.infer({"x": x})["y"]
        for graph in (False, True):
            with TrtRunner(engine_bytes, cuda_graph=graph, device_outputs=True) as runner:
                for _ in range(3):
                    out = runner.infer({"x": dx})["y"]
                    assert isinstance(out, DeviceArray) and out.shape == expected.shape
                    assert np.array_equal(out.to_host(), expected), graph
                # mixing host and device inputs on one runner keeps both right
                assert np.array_equal(runner.infer({"x": x})["y"].to_host(), expected)
    finally:
        dx.cuda.free(dx.ptr)


def test_async_and_several_streams_equal_sync(engine_bytes):
    from trtkit.runtime import TrtRunner

    xs = [inputs(1 + i % 4, 10 + i) for i in range(12)]
    with TrtRunner(engine_bytes) as sync:
        expected = [sync.infer({"x": x})["y"] for x in xs]
    runners = [TrtRunner(engine_bytes, cuda_graph=graph).activate() for graph in (False, True, True)]
    try:
        handles = [runners[i % 3].infer_async({"x": x}) for i, x in enumerate(xs)]
        for handle, want in zip(handles, expected):
            assert np.array_equal(handle.wait()["y"], want)
    finally:
        for runner in runners:
            runner.close()


def test_threads_with_a_runner_each_and_sharing_one(engine_bytes):
    from trtkit.runtime import TrtRunner

    xs = [inputs(1 + i % 4, 30 + i) for i in range(8)]
    with TrtRunner(engine_bytes) as sync:
        expected = [sync.infer({"x": x})["y"] for x in xs]
    errors = []
    shared = TrtRunner(engine_bytes, cuda_graph=True).activate()

    def work(runner):
        try:
            for _ in range(20):
                for x, want in zip(xs, expected):
                    if not np.array_equal(runner.infer({"x": x})["y"], want):
                        errors.append("mismatch")
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(repr(exc))

    own = [TrtRunner(engine_bytes).activate() for _ in range(2)]
    try:
        threads = [threading.Thread(target=work, args=(r,)) for r in own + [shared, shared]]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for runner in own + [shared]:
            runner.close()
    assert errors == []


def test_shape_outside_profile_is_refused_before_any_enqueue(engine_bytes):
    from trtkit.runtime import TrtRunner

    with TrtRunner(engine_bytes, cuda_graph=True) as runner:
        runner.context = counting = CountingContext(runner.context)
        with pytest.raises(InputError, match=r"Input 'x': shape \(5, 3, 8, 8\) is outside profile 0 "
                                             r"\(min \(1, 3, 8, 8\), max \(4, 3, 8, 8\)\)"):
            runner.infer({"x": inputs(5)})
        with pytest.raises(InputError, match="dtype float64, expected float32"):
            runner.infer({"x": inputs(2).astype(np.float64)})
        with pytest.raises(InputError, match="Unknown input 'images'.*inputs are 'x'"):
            runner.infer({"images": inputs(2)})
        assert counting.enqueues == 0 and counting.shape_sets == 0
        x = inputs(2)
        np.testing.assert_allclose(runner.infer({"x": x})["y"], reference(x), rtol=1e-4, atol=1e-5)
        runner.infer({"x": x})
        assert counting.shape_sets == 1  # shapes are set only when they change


def test_runners_sharing_one_loaded_engine(engine_bytes):
    """Works where contexts may share a profile; otherwise a clear error saying what to do (TensorRT 8.6, where
    asking TensorRT for the second context crashed the process)."""
    from trtkit.runtime import TrtRunner, load_engine

    engine = load_engine(engine_bytes)
    x = inputs(2, 50)
    with TrtRunner(engine) as first:
        want = first.infer({"x": x})["y"]
        try:
            with TrtRunner(engine) as second:
                assert np.array_equal(second.infer({"x": x})["y"], want)
        except EngineError as exc:
            assert "cannot share a profile" in str(exc) and "own engine" in str(exc)


def test_close_gives_the_device_memory_back(engine_bytes):
    from trtkit.runtime import TrtRunner
    from trtkit.runtime.cuda import default_cuda

    cuda = default_cuda()

    def cycle():
        with TrtRunner(engine_bytes, cuda_graph=True) as runner:
            for batch in (1, 2, 4):
                runner.infer({"x": inputs(batch)})

    cycle()  # first use: CUDA loads kernels lazily, TensorRT sets up per-process state
    before = cuda.mem_get_info()[0]
    for _ in range(5):
        cycle()
    after = cuda.mem_get_info()[0]
    assert before - after < 4 << 20, f"device memory grew by {before - after} bytes"


def test_corrupt_engine_bytes_are_a_clear_error():
    from trtkit.runtime import load_engine

    with pytest.raises(EngineError, match="could not be deserialized"):
        load_engine(b"not an engine at all" * 10)


def test_pool_and_pinned_inputs_equal_sync(engine_bytes):
    from trtkit.runtime import RunnerPool, TrtRunner

    xs = [inputs(1 + i % 4, 60 + i) for i in range(10)]
    with TrtRunner(engine_bytes) as sync:
        expected = [sync.infer({"x": x})["y"] for x in xs]
    with RunnerPool(engine_bytes, size=3, cuda_graph=True) as pool:
        for out, want in zip(pool.map({"x": x} for x in xs), expected):
            assert np.array_equal(out["y"], want)
    with TrtRunner(engine_bytes, cuda_graph=True, copy_outputs=False) as runner:
        for x, want in zip(xs, expected):
            feed = runner.host_inputs({"x": x.shape})
            feed["x"][...] = x
            assert np.array_equal(runner.infer(feed)["y"], want)


@pytest.mark.parametrize("graph", [False, True])
def test_inputs_straight_from_pageable_memory_equal_pinned(engine_bytes, graph, monkeypatch):
    from trtkit.runtime import TrtRunner
    from trtkit.runtime import runner as runner_module

    xs = [inputs(b, 70 + b) for b in (1, 4, 2, 4)]
    with TrtRunner(engine_bytes, cuda_graph=graph) as pinned:  # inputs this small go through the pinned buffer
        expected = [pinned.infer({"x": x})["y"] for x in xs]
    monkeypatch.setattr(runner_module, "DIRECT_INPUT_BYTES", 0)  # every input straight from its own memory
    with TrtRunner(engine_bytes, cuda_graph=graph) as direct:
        for x, want in zip(xs, expected):
            assert np.array_equal(direct.infer({"x": x})["y"], want)



@pytest.fixture(scope="module")
def large_engine_bytes():
    """The tiny conv net on 96x96 images (108 KiB each: large enough to be page-locked in place when reused)."""
    from trtkit.builder.builder import build_serialized
    from trtkit.builder.config import BuildConfig
    from trtkit.builder.profiles import parse_shapes

    config = BuildConfig(profiles=[parse_shapes("x:1x3x96x96,2x3x96x96,4x3x96x96")],
                         tactic_sources=GPU_TACTIC_SOURCES, tf32=False)
    return build_serialized(models.tiny_conv(size=96), config).engine


@pytest.mark.parametrize("graph", [False, True])
def test_reused_arrays_read_in_place_equal_copies(large_engine_bytes, graph):
    import gc

    from trtkit.errors import CudaError
    from trtkit.runtime import TrtRunner
    from trtkit.runtime.cuda import default_cuda

    def image(batch, seed):
        return np.random.default_rng(seed).standard_normal((batch, 3, 96, 96)).astype(np.float32)

    cuda = default_cuda()
    with TrtRunner(large_engine_bytes, cuda_graph=graph) as reuse, \
            TrtRunner(large_engine_bytes, cuda_graph=graph, pin_reused_inputs=False) as copy:
        for batch in (1, 4, 2):
            buffer = np.empty((batch, 3, 96, 96), np.float32)  # one buffer refilled per frame
            for seed in range(5):
                buffer[...] = image(batch, seed)
                assert np.array_equal(reuse.infer({"x": buffer})["y"], copy.infer({"x": buffer})["y"])
            with pytest.raises(CudaError, match="AlreadyRegistered"):  # page-locked by the runner
                cuda.host_register(buffer.ctypes.data, buffer.nbytes)
            del buffer  # unregistered as it dies; the next buffer may land at the same address
            gc.collect()
        kept = image(2, 9)
        for _ in range(3):
            reuse.infer({"x": kept})
        handle = reuse.infer_async({"x": kept})
        want = copy.infer({"x": kept})["y"]
        kept[...] = 0  # infer_async copied it: refilling at once is safe
        assert np.array_equal(handle.wait()["y"], want)
    cuda.host_register(kept.ctypes.data, kept.nbytes)  # closing the runner unregistered it
    cuda.host_unregister(kept.ctypes.data)


def test_arrays_dying_young_still_give_the_copied_results(large_engine_bytes):
    """Each frame's array given to two calls then dropped: the runner page-locks a few, then stops and copies."""
    from trtkit.runtime import TrtRunner
    from trtkit.runtime.reuse import MAX_SHORT_LIVED

    with TrtRunner(large_engine_bytes, cuda_graph=True) as reuse, \
            TrtRunner(large_engine_bytes, cuda_graph=True, pin_reused_inputs=False) as copy:
        for frame in range(MAX_SHORT_LIVED + 4):
            x = np.random.default_rng(frame).standard_normal((2, 3, 96, 96)).astype(np.float32)
            want = copy.infer({"x": x})["y"]
            for _ in range(2):
                assert np.array_equal(reuse.infer({"x": x})["y"], want)
            del x
        assert not reuse.stats().page_locking
