"""TrtRunner with shape-tensor inputs: values from the feed, in host memory the runner owns, checked against the
profile; outputs as onnx's reference evaluator computes them, for several values on one runner."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator

from tests import models
from tests.fakes.fake_cuda import FakeCudart
from tests.fakes.fake_trt import make_fake_trt
from trtkit.builder import BuildConfig, build, parse_shapes
from trtkit.errors import InputError, UnsupportedError
from trtkit.runtime import TrtRunner
from trtkit.runtime.cuda import Cuda
from trtkit.runtime.pool import RunnerPool

X3 = np.arange(3, dtype=np.float32).reshape(3, 1)
X12 = np.arange(12, dtype=np.float32)
VERSIONS = ["8.6.0", "10.8.0", "11.4.0"]


def _engine(tmp_path, model, shapes: str, version: str = "8.6.0"):
    """An engine file with its manifest (so INT64 feeds are taken on 8.6 too), its fake TensorRT and CUDA."""
    trt = make_fake_trt(version)
    path = tmp_path / f"{model.graph.name}.engine"
    build(model, BuildConfig(profiles=[parse_shapes(shapes)], profiling_verbosity="NONE"), output=path, trt=trt)
    return path, trt, FakeCudart()


def _expected(model, feed: dict) -> np.ndarray:
    return ReferenceEvaluator(model).run(None, feed)[0]


@pytest.mark.parametrize("version", VERSIONS)
def test_expand_follows_the_values_of_each_call(tmp_path, version):
    model = models.expand_shape()
    path, trt, rt = _engine(tmp_path, model, "shape:1x3x1,2x3x2,4x3x4", version)
    with TrtRunner(path, trt=trt, cuda=Cuda(rt)) as runner:
        assert [s.name for s in runner.shape_input_specs] == ["shape"]
        assert [s.name for s in runner.input_specs] == ["x"]
        for values in [(2, 3, 2), (4, 3, 1), (2, 3, 2)]:
            feed = {"x": X3, "shape": np.array(values, np.int64)}
            out = runner.infer(feed)["y"]
            want = _expected(model, feed)
            assert out.shape == want.shape == values and np.array_equal(out, want)
    assert rt.live_allocations()["device"] == 0


@pytest.mark.parametrize("version", VERSIONS)
def test_reshape_follows_the_values_and_sizes_outputs_where_max_values_make_no_shape(tmp_path, version):
    model = models.reshape_shape()
    path, trt, rt = _engine(tmp_path, model, "shape:2x4,3x4,3x6", version)  # max (3, 6): 18 elements, not 12
    with TrtRunner(path, trt=trt, cuda=Cuda(rt)) as runner:
        for values in [(3, 4), (2, 6), (3, 4)]:
            feed = {"x": X12, "shape": np.array(values, np.int64)}
            assert np.array_equal(runner.infer(feed)["y"], _expected(model, feed))


def test_values_outside_the_profile_are_refused_naming_the_input_and_range(tmp_path):
    path, trt, rt = _engine(tmp_path, models.expand_shape(), "shape:1x3x1,2x3x2,4x3x4")
    with TrtRunner(path, trt=trt, cuda=Cuda(rt)) as runner:
        with pytest.raises(InputError, match=r"Input 'shape': values \(5, 3, 1\) are outside profile 0 "
                                             r"\(min \(1, 3, 1\), max \(4, 3, 4\)\)"):
            runner.infer({"x": X3, "shape": np.array([5, 3, 1], np.int64)})
        assert runner.stats().enqueues == 0  # nothing was enqueued
        with pytest.raises(InputError, match=r"Input 'shape': shape \(2,\), expected \(3,\)"):
            runner.infer({"x": X3, "shape": np.array([2, 3], np.int64)})
        with pytest.raises(InputError, match=r"Missing shape-tensor input\(s\) 'shape'.*inputs are 'x', 'shape'"):
            runner.infer({"x": X3})
        feed = {"x": X3, "shape": np.array([2, 3, 2], np.int64)}
        assert np.array_equal(runner.infer(feed)["y"], _expected(models.expand_shape(), feed))  # still usable


def test_device_arrays_are_refused_for_shape_inputs(tmp_path):
    path, trt, rt = _engine(tmp_path, models.expand_shape(), "shape:1x3x1,2x3x2,4x3x4")
    with TrtRunner(path, trt=trt, cuda=Cuda(rt)) as runner:
        on_device = rt.device_array((3,), np.int32, fill=np.array([2, 3, 2], np.int32))
        with pytest.raises(InputError, match="'shape' is a shape tensor of 3 int32 value.*host.*not a device array"):
            runner.infer({"x": X3, "shape": on_device})


def test_the_runner_binds_its_own_host_memory_for_the_values(tmp_path):
    path, trt, rt = _engine(tmp_path, models.expand_shape(), "shape:1x3x1,2x3x2,4x3x4")
    with TrtRunner(path, trt=trt, cuda=Cuda(rt)) as runner:
        given = np.array([2, 3, 2], np.int64)
        runner.infer({"x": X3, "shape": given})
        address = runner.context.get_tensor_address("shape")
        assert address and not rt.is_device(address) and address != given.ctypes.data
        given[:] = [4, 3, 4]  # the caller's array changing after the call changes nothing in the runner
        assert runner.infer({"x": X3, "shape": np.array([2, 3, 2], np.int64)})["y"].shape == (2, 3, 2)


def test_outputs_grow_when_values_within_the_profile_need_more_than_the_opt_values(tmp_path):
    # x (3, 1) expanded to (2, 4) does not broadcast: the max values make no shape, so outputs are sized at opt
    model = models.expand_shape(rank=2)
    path, trt, rt = _engine(tmp_path, model, "shape:1x1,1x1,2x4")
    with TrtRunner(path, trt=trt, cuda=Cuda(rt)) as runner:
        for values in [(1, 1), (1, 4), (1, 1)]:
            feed = {"x": X3, "shape": np.array(values, np.int64)}
            assert np.array_equal(runner.infer(feed)["y"], _expected(model, feed))
        with pytest.raises(InputError, match=r"could not compute the shape of output 'y'.*not a valid shape"):
            runner.infer({"x": X3, "shape": np.array([2, 4], np.int64)})
        assert runner.infer({"x": X3, "shape": np.array([1, 2], np.int64)})["y"].shape == (3, 2)


def test_cuda_graph_is_not_used_for_such_engines_and_results_follow_the_values(tmp_path, caplog):
    model = models.expand_shape()
    path, trt, rt = _engine(tmp_path, model, "shape:1x3x1,2x3x2,4x3x4")
    with warnings.catch_warnings(), caplog.at_level(logging.INFO, logger="trtkit"):
        warnings.simplefilter("error")  # graphs are the default: an engine that cannot use them is no warning
        runner = TrtRunner(path, trt=trt, cuda=Cuda(rt)).activate()
    assert "Running without CUDA graphs: this engine has shape-tensor input(s) ['shape']" in caplog.text
    try:
        for values in [(2, 3, 2), (4, 3, 4), (2, 3, 2), (4, 3, 4)]:
            feed = {"x": X3, "shape": np.array(values, np.int64)}
            assert np.array_equal(runner.infer(feed)["y"], _expected(model, feed))
        stats = runner.stats()
        assert stats.graphs == stats.captures == stats.graph_replays == stats.host_replays == 0
        assert stats.enqueues == 4
    finally:
        runner.close()


def test_infer_async_and_a_pool_take_each_calls_values(tmp_path):
    model = models.expand_shape()
    path, trt, rt = _engine(tmp_path, model, "shape:1x3x1,2x3x2,4x3x4")
    feeds = [{"x": X3 + i, "shape": np.array(v, np.int64)} for i, v in enumerate([(2, 3, 2), (4, 3, 4), (1, 3, 3)])]
    with TrtRunner(path, trt=trt, cuda=Cuda(rt)) as runner:
        handles = [runner.infer_async(feed) for feed in feeds]  # each starts after the previous one is collected
        for handle, feed in zip(handles, feeds):
            assert np.array_equal(handle.wait()["y"], _expected(model, feed))
    feeds = [{**feed, "shape": feed["shape"].astype(np.int32)} for feed in feeds]  # the pool's runners load bytes
    with RunnerPool(path, size=2, trt=trt, cuda=Cuda(rt)) as pool:
        for out, feed in zip(pool.map(feeds), feeds):
            assert np.array_equal(out["y"], _expected(model, feed))


def test_stage_and_host_inputs_work_at_the_current_values(tmp_path):
    model = models.expand_shape()
    path, trt, rt = _engine(tmp_path, model, "shape:1x3x1,2x3x2,4x3x4")
    with TrtRunner(path, trt=trt, cuda=Cuda(rt)) as runner:
        key = runner.stage({"x": X3, "shape": np.array([4, 3, 2], np.int32)})  # stage takes the engine's dtypes
        runner.enqueue_h2d(key)
        runner.enqueue_compute(key)
        runner.enqueue_d2h(key)
        runner.synchronize()
        assert tuple(runner.context.get_tensor_shape("y")) == (4, 3, 2)  # the staged values reached the context
        views = runner.host_inputs()
        assert list(views) == ["x"]
        views["x"][...] = X3
        out = runner.infer({**views, "shape": np.array([4, 3, 2], np.int64)})["y"]
        assert np.array_equal(out, np.broadcast_to(X3, (4, 3, 2)))


def test_random_feeds_for_run_and_bench_give_shape_inputs_their_opt_values(tmp_path):
    from trtkit.bench.measure import make_feed

    path, trt, rt = _engine(tmp_path, models.expand_shape(), "shape:1x3x1,2x3x2,4x3x4")
    with TrtRunner(path, trt=trt, cuda=Cuda(rt)) as runner:
        feed = make_feed(runner, None)
        assert feed["shape"].tolist() == [2, 3, 2]
        assert runner.infer(feed)["y"].shape == (2, 3, 2)


def test_engines_without_shape_inputs_have_none(env):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning for CUDA graphs (the default) on an ordinary engine
        with TrtRunner(env.engine, trt=env.trt, cuda=env.cuda) as runner:
            assert runner.shape_input_specs == ()
            assert all(not s.is_shape_tensor and s.values == () for s in runner.input_specs)


def test_shape_tensor_outputs_are_refused(tmp_path):
    path, trt, rt = _engine(tmp_path, models.expand_shape(), "shape:1x3x1,2x3x2,4x3x4")
    engine = trt.Runtime(trt.Logger()).deserialize_cuda_engine(path.read_bytes())
    engine.io["y"]["shape_tensor"] = True  # as TensorRT reports an output computed on the host
    with pytest.raises(UnsupportedError, match=r"Output\(s\) \['y'\].*shape tensors.*host memory"):
        TrtRunner(engine, trt=trt, cuda=Cuda(rt)).activate()


def test_the_inspectors_context_has_the_opt_values(tmp_path):
    from trtkit.runtime.engine import engine_information

    path, trt, rt = _engine(tmp_path, models.expand_shape(), "shape:1x3x1,2x3x2,4x3x4")
    engine = trt.Runtime(trt.Logger()).deserialize_cuda_engine(path.read_bytes())

    class Inspector:  # what TensorRT's inspector needs to report formats: output shapes known from the context
        execution_context = None

        def get_engine_information(self, fmt):
            return str(tuple(self.execution_context.get_tensor_shape("y")))

    engine.create_engine_inspector = Inspector
    assert engine_information(trt, engine) == "(2, 3, 2)"


@pytest.mark.parametrize("version", ["8.6.0", "10.8.0"])
def test_parity_gives_random_feeds_the_opt_values_of_shape_inputs(tmp_path, version):
    from trtkit.parity import compare_engine_to_onnx

    model = models.expand_shape()
    path, trt, rt = _engine(tmp_path, model, "shape:1x3x1,2x3x2,4x3x4", version)
    report = compare_engine_to_onnx(model, path, trials=2, runner_options={"trt": trt, "cuda": Cuda(rt)})
    assert report.passed and report.shapes == {"x": (3, 1), "shape": (3,)}
    assert any("'shape' = [2, 3, 2]: the profile's opt values" in note for note in report.notes), report.notes
    given = {"x": X3, "shape": np.array([4, 3, 1], np.int64)}  # a caller's values reach the engine as given
    assert compare_engine_to_onnx(model, path, inputs=given, runner_options={"trt": trt, "cuda": Cuda(rt)}).passed


def test_shape_input_values_tensorrt_does_not_report_come_from_the_manifest_or_are_refused_by_name(
    tmp_path, monkeypatch
):
    # TensorRT 8.6 reports no min/opt/max values for a 0-d shape-tensor input (ONNX's HannWindow cases): the
    # manifest beside the engine has the values the build set; without it the runner names the input
    model = models.expand_shape()
    path, trt, rt = _engine(tmp_path, model, "shape:1x3x1,2x3x2,4x3x4")
    monkeypatch.setattr(trt.ICudaEngine, "get_profile_shape_input", lambda self, profile, name: [[], [], []])
    with TrtRunner(path, trt=trt, cuda=Cuda(rt)) as runner:
        assert runner.shape_input_specs[0].values == (((1, 3, 1), (2, 3, 2), (4, 3, 4)),)
        feed = {"x": X3, "shape": np.array((4, 3, 1), np.int64)}
        assert np.array_equal(runner.infer(feed)["y"], _expected(model, feed))
    with pytest.raises(UnsupportedError, match=r"Shape-tensor input 'shape' \(shape \(3,\): 3 value\(s\)\) has 0 .*"
                                               r"no manifest beside the engine gives them"):
        with TrtRunner(path.read_bytes(), trt=trt, cuda=Cuda(rt)):
            pass
    assert rt.live_allocations()["device"] == 0
