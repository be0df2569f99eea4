"""TrtRunner on the fake backend: results, the hot path's work per call, graphs and their fallback, device I/O,
async calls, several runners, threads, validation messages, resources freed."""

from __future__ import annotations

import logging
import threading
import warnings

import numpy as np
import pytest

from tests import models
from tests.fakes.fake_cuda import FakeCudart
from tests.runtime.fakes import fake_engine_bytes
from trtkit.errors import CudaError, EngineError, InputError
from trtkit.runtime import DeviceArray, TrtRunner
from trtkit.runtime.cuda import Cuda

NOTHING_LIVE = {"device": 0, "host": 0, "streams": 0, "events": 0, "graphs": 0, "registered": 0}


def reference(x):
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(models.tiny_conv()).run(None, {"x": x})[0]


def rand(batch, seed=0):
    return np.random.default_rng(seed).standard_normal((batch, 3, 8, 8)).astype(np.float32)


def runner(env, **kwargs) -> TrtRunner:
    return TrtRunner(env.engine, trt=env.trt, cuda=env.cuda, **kwargs)


# --- results ----------------------------------------------------------------------------------------------------------


def test_infer_matches_the_model_on_every_version(env_any):
    x = rand(3)
    with runner(env_any) as r:
        out = r.infer({"x": x})
    assert list(out) == ["y"]
    np.testing.assert_allclose(out["y"], reference(x), rtol=1e-6)


@pytest.mark.parametrize("graph", [False, True])
def test_changing_shapes_and_repeats(env, graph):
    with runner(env, cuda_graph=graph) as r:
        for batch, seed in [(1, 1), (4, 2), (1, 3), (2, 4), (4, 5)]:
            x = rand(batch, seed)
            np.testing.assert_allclose(r.infer({"x": x})["y"], reference(x), rtol=1e-6)


def test_engine_from_a_file(env, tmp_path):
    path = tmp_path / "m.engine"
    path.write_bytes(env.engine)
    with TrtRunner(path, trt=env.trt, cuda=env.cuda) as r:
        assert r.infer({"x": rand(1)})["y"].shape == (1, 4, 1, 1)


# --- the hot path -----------------------------------------------------------------------------------------------------


def test_one_sync_per_call_and_bindings_set_once(env):
    with runner(env) as r:
        r.infer({"x": rand(2)})
        sync0, addr0, shape0 = env.rt.calls["cudaStreamSynchronize"], r.context.calls["set_tensor_address"], \
            r.context.calls["set_input_shape"]
        for _ in range(5):
            r.infer({"x": rand(2)})
        assert env.rt.calls["cudaStreamSynchronize"] - sync0 == 5
        assert r.context.calls["set_tensor_address"] == addr0  # addresses bound once
        assert r.context.calls["set_input_shape"] == shape0  # same shape: not set again
        r.infer({"x": rand(3)})
        assert r.context.calls["set_input_shape"] == shape0 + 1


def test_outputs_are_copies_or_views_into_pinned_memory(env):
    with runner(env) as r:
        first = r.infer({"x": rand(2, 1)})["y"]
        kept = first.copy()
        r.infer({"x": rand(2, 2)})
        assert np.array_equal(first, kept)  # a copy is not overwritten
        view = r.infer({"x": rand(2, 3)}, copy_outputs=False)["y"]
        r.infer({"x": rand(2, 4)}, copy_outputs=False)
        np.testing.assert_allclose(view, reference(rand(2, 4)), rtol=1e-6)  # a view is


def test_inputs_that_are_not_contiguous_or_arrays(env):
    x = np.asfortranarray(rand(2))
    with runner(env) as r:
        np.testing.assert_allclose(r.infer({"x": x})["y"], reference(np.ascontiguousarray(x)), rtol=1e-6)
        nested = rand(1).tolist()
        with pytest.raises(InputError, match="dtype float64, expected float32"):
            r.infer({"x": nested})


# --- CUDA graphs ------------------------------------------------------------------------------------------------------


def test_graph_per_shape_replays_without_enqueue(env):
    with runner(env, cuda_graph=True) as r:
        for _ in range(4):
            r.infer({"x": rand(2)})
        assert env.rt.calls["cudaStreamBeginCapture"] == 1 and env.rt.calls["cudaGraphLaunch"] == 3
        assert r.context.calls["execute_async_v3"] == 2  # warm-up outside capture + the captured one
        r.infer({"x": rand(4)})
        assert env.rt.calls["cudaStreamBeginCapture"] == 2 and r.stats().graphs == 2


def test_capture_failure_falls_back_with_a_warning(caplog):
    rt = FakeCudart(fail_capture=True)
    env_engine = fake_engine_bytes(models.tiny_conv(), [{"x": [[1, 3, 8, 8], [2, 3, 8, 8], [4, 3, 8, 8]]}])
    from tests.fakes.fake_trt import make_fake_trt

    with caplog.at_level(logging.WARNING, logger="trtkit"):
        with TrtRunner(env_engine, trt=make_fake_trt("8.6.0"), cuda=Cuda(rt), cuda_graph=True) as r:
            for seed in range(3):
                x = rand(2, seed)
                np.testing.assert_allclose(r.infer({"x": x})["y"], reference(x), rtol=1e-6)
            assert r.stats().graphs == 0
    warned = [rec.message for rec in caplog.records if "capture failed" in rec.message]
    assert len(warned) == 1 and "falling back to plain enqueue" in warned[0]  # once per shape, not per call
    assert rt.live_allocations()["graphs"] == 0


def test_enqueue_failing_inside_capture_falls_back(env, caplog):
    with runner(env, cuda_graph=True) as r:
        r.engine.fail_enqueue_in_capture = True
        with caplog.at_level(logging.WARNING, logger="trtkit"):
            x = rand(3)
            np.testing.assert_allclose(r.infer({"x": x})["y"], reference(x), rtol=1e-6)
            np.testing.assert_allclose(r.infer({"x": x})["y"], reference(x), rtol=1e-6)
        assert "capture failed (TensorRT's execute_async_v3 failed" in caplog.text
        assert env.rt.calls["cudaGetLastError"] >= 1  # CUDA's sticky error cleared


# --- device-resident inputs and outputs ------------------------------------------------------------------------------


@pytest.mark.parametrize("graph", [False, True])
def test_device_inputs_and_outputs_skip_the_host(env, graph):
    x = rand(3, 9)
    dx = env.rt.device_array(x.shape, x.dtype, fill=x)
    with runner(env, cuda_graph=graph, device_outputs=True) as r:
        for _ in range(2):
            h2d_before = _copies(env.rt)
            out = r.infer({"x": dx})["y"]
            assert isinstance(out, DeviceArray)
            assert out.__cuda_array_interface__["shape"] == (3, 4, 1, 1)
            np.testing.assert_allclose(out.to_host(), reference(x), rtol=1e-6)
        # a host input on the same runner still works
        np.testing.assert_allclose(r.infer({"x": x})["y"].to_host(), reference(x), rtol=1e-6)
    assert h2d_before is not None
    dx.free()


def _copies(rt):
    return rt.calls["cudaMemcpyAsync"]


def test_device_input_is_bound_not_copied_without_graphs(env):
    x = rand(2)
    dx = env.rt.device_array(x.shape, x.dtype, fill=x)
    with runner(env, device_outputs=True) as r:
        r.infer({"x": dx})
        copies = _copies(env.rt)
        r.infer({"x": dx})
        assert _copies(env.rt) == copies  # no H2D, no D2H, no D2D: zero copies
        assert r.context.get_tensor_address("x") == dx.ptr
    dx.free()


def test_device_input_waits_for_its_producer_stream(env):
    x = rand(2)
    dx = env.rt.device_array(x.shape, x.dtype, fill=x)
    producer = env.cuda.stream_create()
    iface = dict(dx.__cuda_array_interface__, stream=producer)
    holder = type("Tensor", (), {"__cuda_array_interface__": iface})()
    with runner(env) as r:
        np.testing.assert_allclose(r.infer({"x": holder})["y"], reference(x), rtol=1e-6)
    assert env.rt.calls["cudaStreamWaitEvent"] == 1
    env.cuda.stream_destroy(producer)
    dx.free()


@pytest.mark.parametrize("device_outputs", [True, False])
def test_replayed_device_calls_still_check_wait_and_follow_the_data(env, device_outputs):
    """Device-resident calls replayed from their graph (fewer steps) keep the general path's guarantees: results
    follow the data at that address, each call waits for its producer stream, a wrong dtype or strides is still
    refused, a new shape or address still works."""
    x = rand(2, 1)
    dx = env.rt.device_array(x.shape, x.dtype, fill=x)
    producer = env.cuda.stream_create()
    holder = type("Tensor", (), {"__cuda_array_interface__": dict(dx.__cuda_array_interface__, stream=producer)})()

    def host(out):
        return out.to_host() if device_outputs else out

    with runner(env, cuda_graph=True, device_outputs=device_outputs) as r:
        for seed in range(5):
            x = rand(2, seed)
            dx.host_view()[...] = x  # new data at the same address
            waits = env.rt.calls["cudaStreamWaitEvent"]
            np.testing.assert_allclose(host(r.infer({"x": holder})["y"]), reference(x), rtol=1e-6)
            assert env.rt.calls["cudaStreamWaitEvent"] == waits + 1
        as_int = type("T", (), {"__cuda_array_interface__": dict(dx.__cuda_array_interface__, typestr="<i4")})()
        with pytest.raises(InputError, match="Input 'x': dtype int32, expected float32"):
            r.infer({"x": as_int})
        strided = type("T", (), {"__cuda_array_interface__": dict(dx.__cuda_array_interface__,
                                                                  strides=(4, 8, 96, 768))})()
        with pytest.raises(InputError, match="not C-contiguous"):
            r.infer({"x": strided})
        other = env.rt.device_array((3, 3, 8, 8), np.float32, fill=rand(3, 7))
        np.testing.assert_allclose(host(r.infer({"x": other})["y"]), reference(rand(3, 7)), rtol=1e-6)
        other.free()
    env.cuda.stream_destroy(producer)
    dx.free()


def test_non_contiguous_device_input_is_refused(env):
    dx = env.rt.device_array((2, 3, 8, 8), np.float32)
    holder = type("T", (), {"__cuda_array_interface__": dict(dx.__cuda_array_interface__,
                                                               strides=(4, 8, 96, 768))})()
    with runner(env) as r, pytest.raises(InputError, match="Input 'x': the device array is not C-contiguous"):
        r.infer({"x": holder})
    dx.free()


# --- async, several runners, threads ----------------------------------------------------------------------------------


def test_infer_async_returns_the_same_as_infer(env):
    xs = [rand(1 + i % 4, i) for i in range(6)]
    with runner(env) as r:
        handles = [r.infer_async({"x": x}) for x in xs]  # each call finishes the previous one first
        for handle, x in zip(handles, xs):
            np.testing.assert_allclose(handle.wait()["y"], reference(x), rtol=1e-6)
            assert handle.done()


def test_async_work_is_not_read_before_it_finishes(env):
    with runner(env) as r:
        handle = r.infer_async({"x": rand(2, 5)})
        assert not handle.done()  # the fake GPU runs work only when something waits for it
        np.testing.assert_allclose(handle.wait()["y"], reference(rand(2, 5)), rtol=1e-6)


def test_several_runners_on_their_own_streams(env_any):
    runners = [runner(env_any, cuda_graph=bool(i % 2)).activate() for i in range(3)]
    try:
        assert len({r.stream for r in runners}) == 3
        xs = [rand(1 + i % 4, i) for i in range(9)]
        handles = [runners[i % 3].infer_async({"x": x}) for i, x in enumerate(xs)]
        for handle, x in zip(handles, xs):
            np.testing.assert_allclose(handle.wait()["y"], reference(x), rtol=1e-6)
    finally:
        for r in runners:
            r.close()


def test_sharing_a_loaded_engine_on_86_is_refused_before_tensorrt_is_asked(env, monkeypatch):
    """TensorRT 8.6.0 crashed (segfault) making a second context on an engine whose only profile was in use."""
    from trtkit.runtime import load_engine

    engine = load_engine(env.engine, trt=env.trt)
    made = []
    real = type(engine).create_execution_context
    monkeypatch.setattr(type(engine), "create_execution_context", lambda self, *a: made.append(1) or real(self, *a))
    with TrtRunner(engine, trt=env.trt, cuda=env.cuda):
        with pytest.raises(EngineError, match="already uses profile 0 of this loaded engine.*cannot share a profile"
                                              ".*own engine"):
            TrtRunner(engine, trt=env.trt, cuda=env.cuda).activate()
        assert len(made) == 1
    with TrtRunner(engine, trt=env.trt, cuda=env.cuda) as again:  # free again once the first one closed
        assert again.infer({"x": rand(1)})["y"].shape[0] == 1
    assert env.rt.live_allocations() == NOTHING_LIVE


@pytest.mark.parametrize("env_any", ["10.8.0", "11.4.0"], indirect=True)
def test_sharing_a_loaded_engine_works_from_10(env_any):
    from trtkit.runtime import load_engine

    engine = load_engine(env_any.engine, trt=env_any.trt)
    with TrtRunner(engine, trt=env_any.trt, cuda=env_any.cuda) as a, \
            TrtRunner(engine, trt=env_any.trt, cuda=env_any.cuda) as b:
        x = rand(2)
        assert np.array_equal(a.infer({"x": x})["y"], b.infer({"x": x})["y"])


def test_one_runner_shared_by_threads_is_serialized(env):
    xs = [rand(1 + i % 4, i) for i in range(4)]
    expected = [reference(x) for x in xs]
    errors = []
    with runner(env, cuda_graph=True) as r:
        def work():
            for _ in range(10):
                for x, want in zip(xs, expected):
                    if not np.allclose(r.infer({"x": x})["y"], want, rtol=1e-6):
                        errors.append("mismatch")

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []


# --- validation -------------------------------------------------------------------------------------------------------


@pytest.fixture
def two_env(env):
    env.engine = fake_engine_bytes(models.two_inputs(), [{"a": [[1, 4], [2, 4], [8, 4]],
                                                          "b": [[1, 4], [2, 4], [8, 4]]}])
    return env


def test_missing_input_lists_expected_names(two_env):
    with runner(two_env) as r, pytest.raises(InputError) as err:
        r.infer({"a": np.zeros((2, 4), np.float32)})
    assert str(err.value) == "Missing input(s) 'b'; the engine's inputs are 'a', 'b'"


def test_misnamed_input_suggests_the_right_name(env):
    with runner(env) as r, pytest.raises(InputError) as err:
        r.infer({"X": rand(1)})
    assert str(err.value) == ("Unknown input 'X' (did you mean 'x'?); missing input(s) 'x'; "
                              "the engine's inputs are 'x'")


def test_extra_input_is_named(two_env):
    z = np.zeros((2, 4), np.float32)
    with runner(two_env) as r, pytest.raises(InputError, match="Unknown input 'c'; the engine's inputs are 'a', 'b'"):
        r.infer({"a": z, "b": z, "c": z})


def test_wrong_dtype_says_how_to_convert(env):
    with runner(env) as r, pytest.raises(InputError) as err:
        r.infer({"x": rand(1).astype(np.float16)})
    assert str(err.value) == "Input 'x': dtype float16, expected float32 (convert with .astype(numpy.float32))"


def test_shape_outside_profile_names_the_range_and_enqueues_nothing(env):
    with runner(env, cuda_graph=True) as r:
        calls = dict(r.context.calls)
        copies = _copies(env.rt)
        with pytest.raises(InputError) as err:
            r.infer({"x": np.zeros((1, 3, 8, 9), np.float32)})
        assert str(err.value) == ("Input 'x': shape (1, 3, 8, 9) is outside profile 0 "
                                  "(min (1, 3, 8, 8), max (4, 3, 8, 8))")
        with pytest.raises(InputError, match=r"shape \(3, 8, 8\) has rank 3, expected rank 4; profile 0"):
            r.infer({"x": np.zeros((3, 8, 8), np.float32)})
        with pytest.raises(InputError, match="dict of input name"):
            r.infer([rand(1)])
        assert dict(r.context.calls) == calls and _copies(env.rt) == copies
        assert r.infer({"x": rand(1)})["y"].shape == (1, 4, 1, 1)


def test_unknown_profile_index(env):
    with pytest.raises(EngineError, match="Profile 2 does not exist: the engine has 1 optimization profile"):
        runner(env, profile=2).activate()
    assert env.rt.live_allocations()["device"] == 0


def test_second_profile_is_used(env):
    env.engine = fake_engine_bytes(models.tiny_conv(), [{"x": [[1, 3, 8, 8]] * 3}, {"x": [[2, 3, 8, 8], [4, 3, 8, 8],
                                                                                         [8, 3, 8, 8]]}])
    with runner(env, profile=1) as r:
        assert r.infer({"x": rand(8)})["y"].shape == (8, 4, 1, 1)
        with pytest.raises(InputError, match=r"outside profile 1 \(min \(2, 3, 8, 8\), max \(8, 3, 8, 8\)\)"):
            r.infer({"x": rand(1)})


# --- resources --------------------------------------------------------------------------------------------------------


def test_everything_is_freed_on_exit(env):
    with runner(env, cuda_graph=True) as r:
        for batch in (1, 2, 4):
            r.infer({"x": rand(batch)})
        r.infer_async({"x": rand(2)})
        live = env.rt.live_allocations()
        assert live["device"] == 2 and live["host"] == 2 and live["graphs"] == 6 and live["streams"] == 1
    assert env.rt.live_allocations() == NOTHING_LIVE
    assert r.context is None and not r.active


def test_runner_refuses_calls_outside_with(env):
    r = runner(env)
    with pytest.raises(EngineError, match="not active: use it inside `with TrtRunner"):
        r.infer({"x": rand(1)})
    with r:
        pass
    with pytest.raises(EngineError, match="not active"):
        r.infer({"x": rand(1)})


def test_unclosed_runner_only_warns(env):
    r = runner(env).activate()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r.__del__()
    assert any(issubclass(w.category, ResourceWarning) and "not closed" in str(w.message) for w in caught)
    assert env.rt.live_allocations()["device"] == 2  # __del__ frees nothing
    r.close()


def test_allocation_failure_frees_what_was_allocated():
    rt = FakeCudart(free_bytes=600)  # less than the input buffer (4x3x8x8 float32 = 3072 B): cudaMalloc fails
    engine = fake_engine_bytes(models.tiny_conv(), [{"x": [[1, 3, 8, 8], [2, 3, 8, 8], [4, 3, 8, 8]]}])
    from tests.fakes.fake_trt import make_fake_trt

    with pytest.raises(CudaError, match="cudaMalloc.*cudaErrorMemoryAllocation: the GPU is out of memory"):
        TrtRunner(engine, trt=make_fake_trt("8.6.0"), cuda=Cuda(rt)).activate()
    assert rt.live_allocations() == {"device": 0, "host": 0, "streams": 0, "events": 0, "graphs": 0, "registered": 0}


def test_given_stream_is_used_and_not_destroyed(env):
    stream = env.cuda.stream_create()
    with runner(env, stream=stream) as r:
        assert r.stream == stream
        r.infer({"x": rand(1)})
    assert env.rt.live_allocations()["streams"] == 1
    env.cuda.stream_destroy(stream)


def test_close_finishes_a_pending_async_call(env):
    x = rand(2, 8)
    with runner(env) as r:
        handle = r.infer_async({"x": x})
    np.testing.assert_allclose(handle.wait()["y"], reference(x), rtol=1e-6)


# --- RunnerPool ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("env_any", ["8.6.0", "10.8.0"], indirect=True)
def test_pool_map_keeps_order_and_overlaps_calls(env_any):
    from trtkit.runtime import RunnerPool, load_engine

    xs = [rand(1 + i % 4, i) for i in range(10)]
    engine = load_engine(env_any.engine, trt=env_any.trt)  # 8.6: each runner gets its own copy of the engine
    with RunnerPool(engine, size=3, cuda_graph=True, trt=env_any.trt, cuda=env_any.cuda) as pool:
        assert len({r.stream for r in pool.runners}) == 3
        outs = list(pool.map({"x": x} for x in xs))
    for out, x in zip(outs, xs):
        np.testing.assert_allclose(out["y"], reference(x), rtol=1e-6)
    assert env_any.rt.live_allocations()["device"] == 0


def test_pool_from_a_file_and_its_errors(env, tmp_path):
    from trtkit.runtime import RunnerPool

    path = tmp_path / "m.engine"
    path.write_bytes(env.engine)
    with pytest.raises(EngineError, match="at least one runner"):
        RunnerPool(path, size=0)
    pool = RunnerPool(path, size=2, trt=env.trt, cuda=env.cuda)
    with pytest.raises(EngineError, match="not active"):
        pool.infer_async({"x": rand(1)})
    with pool:
        handle = pool.infer_async({"x": rand(2)})
        assert pool.infer_async({"x": rand(3)}) is not handle
        assert handle.wait()["y"].shape == (2, 4, 1, 1)


def test_replayed_shapes_stay_correct_and_bad_calls_are_still_explained(env):
    """Once a shape replays from its graph, calls take a shorter path: results and refusals must not change."""
    with runner(env, cuda_graph=True) as r:
        for round_ in range(4):  # alternate shapes: each graph is replayed many times
            for batch in (2, 3, 1):
                x = rand(batch, 10 * round_ + batch)
                np.testing.assert_allclose(r.infer({"x": x})["y"], reference(x), rtol=1e-6)
        assert env.rt.calls["cudaStreamBeginCapture"] == 3
        x = np.asfortranarray(rand(2, 99))  # not contiguous, same shape as a replayed one
        np.testing.assert_allclose(r.infer({"x": x})["y"], reference(np.ascontiguousarray(x)), rtol=1e-6)
        with pytest.raises(InputError, match="dtype float16, expected float32"):
            r.infer({"x": rand(2).astype(np.float16)})
        with pytest.raises(InputError, match="Unknown input 'X' \\(did you mean 'x'\\?\\)"):
            r.infer({"X": rand(2)})
        with pytest.raises(InputError, match="dict of input name"):
            r.infer([rand(2)])
        with pytest.raises(InputError, match="outside profile 0"):
            r.infer({"x": np.zeros((2, 3, 8, 9), np.float32)})
        handle = r.infer_async({"x": rand(3, 7)})
        np.testing.assert_allclose(handle.wait()["y"], reference(rand(3, 7)), rtol=1e-6)


@pytest.mark.parametrize("graph", [False, True])
def test_host_inputs_are_filled_in_place_without_a_copy(env, graph, monkeypatch):
    from trtkit.runtime import runner as runner_module

    with runner(env, cuda_graph=graph) as r:
        feed = r.host_inputs({"x": (3, 3, 8, 8)})
        assert feed["x"].shape == (3, 3, 8, 8) and feed["x"].dtype == np.float32
        copies = []
        monkeypatch.setattr(runner_module, "copy_into", lambda dst, src: copies.append(src))
        for seed in range(3):
            feed["x"][...] = rand(3, seed)
            np.testing.assert_allclose(r.infer(feed)["y"], reference(rand(3, seed)), rtol=1e-6)
        assert copies == []
        assert r.host_inputs()["x"].shape == (2, 3, 8, 8)  # default: the profile's opt shape
        with pytest.raises(InputError, match="outside profile 0"):
            r.host_inputs({"x": (5, 3, 8, 8)})
        with pytest.raises(InputError, match="Unknown input 'y'"):
            r.host_inputs({"y": (1, 4, 1, 1)})


def test_graphs_use_device_inputs_in_place_up_to_a_limit(env, monkeypatch):
    from trtkit.runtime import runner as runner_module

    monkeypatch.setattr(runner_module, "MAX_ADDRESS_GRAPHS", 2)
    xs = [rand(2, seed) for seed in range(4)]
    arrays = [env.rt.device_array(x.shape, x.dtype, fill=x) for x in xs]
    with runner(env, cuda_graph=True, device_outputs=True) as r:
        for _ in range(2):
            for x, dx in zip(xs[:2], arrays[:2]):  # two address sets: a graph each, no copies
                copies = _copies(env.rt)
                np.testing.assert_allclose(r.infer({"x": dx})["y"].to_host(), reference(x), rtol=1e-6)
                assert _copies(env.rt) - copies == 1  # only to_host's copy
        assert r.stats().graphs == 2
        for x, dx in zip(xs[2:], arrays[2:]):  # past the limit: copied on the device into one shared graph
            copies = _copies(env.rt)
            np.testing.assert_allclose(r.infer({"x": dx})["y"].to_host(), reference(x), rtol=1e-6)
            assert _copies(env.rt) - copies == 2  # the device-to-device copy + to_host
        assert r.stats().graphs == 3
        np.testing.assert_allclose(r.infer({"x": arrays[0]})["y"].to_host(), reference(xs[0]), rtol=1e-6)
    for dx in arrays:
        dx.free()


def test_close_frees_everything_even_when_the_stream_fails(env, monkeypatch):
    r = runner(env).activate()
    r.infer({"x": rand(1)})
    monkeypatch.setattr(env.rt, "cudaStreamSynchronize", lambda stream: (env.rt.cudaError_t.cudaErrorIllegalAddress,))
    with pytest.raises(CudaError, match="cudaStreamSynchronize failed with cudaErrorIllegalAddress"):
        r.close()
    monkeypatch.undo()
    assert not r.active
    assert env.rt.live_allocations() == NOTHING_LIVE


@pytest.mark.parametrize("graph", [False, True])
def test_inputs_transferred_straight_from_pageable_memory(env, graph, monkeypatch):
    from trtkit.runtime import runner as runner_module

    copies = []
    monkeypatch.setattr(runner_module, "copy_into", lambda dst, src: copies.append(src))
    monkeypatch.setattr(runner_module, "DIRECT_INPUT_BYTES", 0)
    with runner(env, cuda_graph=graph) as r:
        for batch, seed in [(2, 1), (2, 2), (4, 3), (2, 4)]:
            x = np.asfortranarray(rand(batch, seed)) if seed == 4 else rand(batch, seed)
            np.testing.assert_allclose(r.infer({"x": x})["y"], reference(np.ascontiguousarray(x)), rtol=1e-6)
        x = rand(3, 5)
        handle = r.infer_async({"x": x})
        expected = reference(x.copy())
        x[...] = 0  # CUDA staged the pageable data when the copy was enqueued
        np.testing.assert_allclose(handle.wait()["y"], expected, rtol=1e-6)
    assert copies == []


@pytest.mark.parametrize("threshold, through_pinned", [(1 << 30, True), (0, False)])
def test_inputs_go_through_pinned_memory_below_the_direct_size_only(env, monkeypatch, threshold, through_pinned):
    from trtkit.runtime import runner as runner_module

    copies = []
    real_copy = runner_module.copy_into
    monkeypatch.setattr(runner_module, "copy_into", lambda dst, src: (copies.append(src.shape), real_copy(dst, src)))
    monkeypatch.setattr(runner_module, "DIRECT_INPUT_BYTES", threshold)
    with runner(env, cuda_graph=True) as r:
        for seed in (1, 2):
            x = rand(2, seed)
            np.testing.assert_allclose(r.infer({"x": x})["y"], reference(x), rtol=1e-6)
    assert copies == ([(2, 3, 8, 8)] * 2 if through_pinned else [])


def test_device_outputs_are_the_same_views_each_call_in_a_fresh_dict(env):
    with runner(env, device_outputs=True) as r:
        first = r.infer({"x": rand(2, 1)})
        second = r.infer({"x": rand(2, 2)})
        assert first is not second and first["y"] is second["y"]
        np.testing.assert_allclose(second["y"].to_host(), reference(rand(2, 2)), rtol=1e-6)
        assert r.infer({"x": rand(1, 3)})["y"].shape[0] == 1



# --- stats and the runner's size ------------------------------------------------------------------------------------


def test_stats_count_the_path_each_call_took(env):
    x = rand(2)
    dx = env.rt.device_array(x.shape, x.dtype, fill=x)
    with runner(env, cuda_graph=True, pin_reused_inputs=False) as r:
        assert r.stats().calls == 0 and r.stats().graphs == 0
        for seed in range(5):
            r.infer({"x": rand(2, seed)})
        s = r.stats()
        # captured, replayed by the general path (which makes the shortcut), then three shortcut replays
        paths = (s.calls, s.captures, s.graph_replays, s.host_replays, s.device_replays, s.enqueues)
        assert paths == (5, 1, 1, 3, 0, 0)
        assert (s.graphs, s.buckets, s.address_graphs) == (1, 1, 0)
        for _ in range(4):
            np.testing.assert_allclose(r.infer({"x": dx})["y"], reference(x), rtol=1e-6)
        s = r.stats()
        assert (s.captures, s.graph_replays, s.device_replays) == (2, 2, 2) and (s.graphs, s.address_graphs) == (2, 1)
        with pytest.raises(InputError):
            r.infer({"x": rand(2).astype(np.float16)})
        s = r.stats()
        assert s.calls == 10 and s.captures + s.graph_replays + s.host_replays + s.device_replays == 9
        assert not s.page_locking and s.arrays_page_locked == 0
        r.infer_async({"x": rand(2)}).wait()
        assert r.stats().host_replays == 4 and r.stats().calls == 10  # calls: synchronous ones
        (key,) = [k for k in r.graphs() if k.addresses]
        assert key.addresses == (dx.ptr,) and key.sources == (None,) and key.shapes == ((2, 3, 8, 8),)
    assert r.stats().graphs == 0 and r.stats().calls == 0  # since activation: nothing while inactive
    with runner(env, cuda_graph=False) as plain:
        for _ in range(3):
            plain.infer({"x": x})
        assert plain.stats().enqueues == 3 and plain.stats().graphs == 0
    with runner(env) as default:  # CUDA graphs unless asked otherwise: the first call captures, the next replay
        for _ in range(3):
            default.infer({"x": x})
        assert default.stats().captures == 1 and default.stats().enqueues == 0 and default.stats().graphs == 1
    dx.free()


def test_a_failed_capture_is_counted_and_later_calls_enqueue():
    rt = FakeCudart(fail_capture=True)
    engine = fake_engine_bytes(models.tiny_conv(), [{"x": [[1, 3, 8, 8], [2, 3, 8, 8], [4, 3, 8, 8]]}])
    from tests.fakes.fake_trt import make_fake_trt

    with TrtRunner(engine, trt=make_fake_trt("8.6.0"), cuda=Cuda(rt), cuda_graph=True) as r:
        for _ in range(3):
            r.infer({"x": rand(2)})
        s = r.stats()
        assert (s.captures, s.enqueues, s.graph_replays, s.graphs) == (1, 2, 0, 0)


def test_the_runner_keeps_at_most_20_attributes(env):
    x = rand(2)
    dx = env.rt.device_array(x.shape, x.dtype, fill=x)
    with runner(env, cuda_graph=True, device_outputs=True) as r:
        for feed in ({"x": x}, {"x": x}, {"x": dx}, {"x": dx}, {"x": dx}):
            r.infer(feed)
        r.infer_async({"x": rand(3)}).wait()
        r.host_inputs()
        r.pin_reused_inputs = False
        assert len(vars(r)) <= 20, sorted(vars(r))
    assert len(vars(r)) <= 20, sorted(vars(r))
    dx.free()


@pytest.mark.parametrize("said", [True, False])
def test_a_context_tensorrt_cannot_create_says_what_tensorrt_logged(env, monkeypatch, said):
    """The scoreboard's NonZero/NonMaxSuppression engines failed here with a guess ('out of device memory?'); the
    error now quotes TensorRT's own reason when it gave one."""
    from trtkit.runtime.engine import shared_runtime

    def refuse(self, *args):
        if said:
            shared_runtime(env.trt)[1].log(env.trt.ILogger.Severity.ERROR, "2: [executionContext.cpp::x] some reason")
        return None

    monkeypatch.setattr(env.trt.ICudaEngine, "create_execution_context", refuse)
    with pytest.raises(EngineError) as info, TrtRunner(env.engine, trt=env.trt, cuda=env.cuda):
        pass
    text = str(info.value)
    assert text.startswith("TensorRT could not create an execution context")
    assert ("TensorRT said '2: [executionContext.cpp::x] some reason'" in text) is said
    assert ("gave no reason; most often: out of device memory" in text) is not said
