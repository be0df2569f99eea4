"""run_engine on the fake TensorRT and fake CUDA: outputs equal to the runner's, image inputs derived from the
engine's I/O, engines that do not take images refused naming the layout expected, image folders."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests import models
from tests.pipeline.media import frame_picture, make_image_folder
from tests.runtime.fakes import fake_engine_bytes
from trtkit.errors import InputError
from trtkit.pipeline import (
    ArraySource,
    CallbackSink,
    ImageFolderSource,
    ImagePreprocess,
    JsonLinesSink,
    Processing,
    run_engine,
)
from trtkit.pipeline.preprocess import image_input
from trtkit.runtime import TrtRunner


def test_outputs_are_the_runners_outputs_of_the_preprocessed_frames(engine_file, backends):
    frames, seen = [frame_picture(i, 40, 30) for i in range(9)], []
    report = run_engine(engine_file, ArraySource(frames), sinks=[CallbackSink(seen.append)], batch=4, **backends)
    assert report.frames_in == report.frames_out == 9 and [f.index for f in seen] == list(range(9))
    with TrtRunner(engine_file, **backends) as runner:
        pre = ImagePreprocess(image_input(runner.input_specs))
        for frame in seen:
            sample, meta = pre(frame.image)
            want = runner.infer({"x": sample[None]})["y"][0]
            np.testing.assert_allclose(frame.outputs["y"], want, rtol=1e-6)
            assert frame.meta == meta
    assert report.batch == 4 and report.source["input_shape"] == [3, 8, 8]


def test_post_and_draw_run_as_their_own_stages(engine_file, backends):
    seen = []

    def post(outputs, meta, image):
        return float(outputs["y"].sum())

    def draw(image, result):
        out = image.copy()
        out[0, 0] = 1
        return out

    report = run_engine(engine_file, ArraySource([frame_picture(i) for i in range(5)]),
                        sinks=[CallbackSink(seen.append)], processing=Processing(post=post, draw=draw), **backends)
    assert list(report.stages) == ["read", "preprocess", "infer", "postprocess", "annotate", "sink"]
    assert all(isinstance(f.result, float) and f.image[0, 0].tolist() == [1, 1, 1] for f in seen)


def test_image_folder_in_sorted_order_with_results_as_json_lines(engine_file, backends, tmp_path):
    names = make_image_folder(tmp_path / "imgs", count=7)
    (tmp_path / "imgs" / "notes.txt").write_text("not an image")
    out = tmp_path / "results.jsonl"
    report = run_engine(engine_file, ImageFolderSource(tmp_path / "imgs", workers=3), sinks=[JsonLinesSink(out)],
                        **backends)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["name"] for line in lines] == names and report.frames_out == 7
    assert np.asarray(lines[0]["result"]["y"]).shape == (4, 1, 1)


def test_an_image_that_does_not_decode_is_skipped_and_named(engine_file, backends, tmp_path):
    make_image_folder(tmp_path / "imgs", count=4)
    (tmp_path / "imgs" / "img_001.png").write_bytes(b"\x89PNG broken")
    seen = []
    report = run_engine(engine_file, ImageFolderSource(tmp_path / "imgs"), sinks=[CallbackSink(seen.append)],
                        **backends)
    assert [f.name for f in seen] == ["img_000.png", "img_002.png", "img_003.png"]
    assert [s.position for s in report.skipped] == ["img_001.png"] and report.frames_out == 3


def test_a_folder_with_no_images_is_one_clear_error(tmp_path):
    (tmp_path / "readme.md").write_text("x")
    with pytest.raises(InputError, match=r"has no image files \(.jpg.*it holds 1 other file\(s\): readme.md"):
        ImageFolderSource(tmp_path)
    with pytest.raises(InputError, match="does not exist"):
        ImageFolderSource(tmp_path / "missing")


def _engine(tmp_path, inputs, outputs, nodes, profile):
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs),
                              opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "other.engine"
    path.write_bytes(fake_engine_bytes(model, [profile] if profile else []))
    return path


def test_an_engine_without_an_image_input_names_the_layout_expected(tmp_path, backends):
    path = _engine(tmp_path, [helper.make_tensor_value_info("tokens", TensorProto.FLOAT, ["N", 16])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])],
                   [helper.make_node("Relu", ["tokens"], ["y"])], {"tokens": [[1, 16], [2, 16], [4, 16]]})
    with pytest.raises(InputError, match=r"Engine input 'tokens' has shape \(-1, 16\) and dtype float32; the image "
                                         r"pipeline expects one input of layout NCHW"):
        run_engine(path, ArraySource([frame_picture(0)]), **backends)


def test_an_engine_with_two_inputs_is_refused(tmp_path, backends):
    path = tmp_path / "two.engine"
    path.write_bytes(fake_engine_bytes(models.two_inputs(), [{"a": [[1, 4]] * 3, "b": [[1, 4]] * 3}]))
    with pytest.raises(InputError, match=r"needs an engine with one input of layout NCHW.*this engine has 2 inputs"):
        run_engine(path, ArraySource([frame_picture(0)]), **backends)


def test_an_nhwc_engine_is_refused(tmp_path, backends):
    path = _engine(tmp_path, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 3])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 3])],
                   [helper.make_node("Relu", ["x"], ["y"])], None)
    with pytest.raises(InputError, match=r"shape \(1, 8, 8, 3\).*expects one input of layout NCHW"):
        run_engine(path, ArraySource([frame_picture(0)]), **backends)


def test_batch_outside_the_profile_is_refused(engine_file, backends):
    with pytest.raises(InputError, match=r"batch=9 is outside the engine's batch range 1..4"):
        run_engine(engine_file, ArraySource([frame_picture(0)]), batch=9, **backends)


def test_dynamic_height_and_width_take_the_profiles_opt_shape(tmp_path, backends):
    conv = models.tiny_conv()
    for dim in conv.graph.input[0].type.tensor_type.shape.dim[2:]:
        dim.dim_param = "S"
    path = tmp_path / "dyn.engine"
    path.write_bytes(fake_engine_bytes(conv, [{"x": [[1, 3, 8, 8], [2, 3, 16, 12], [4, 3, 32, 32]]}]))
    with TrtRunner(path, **backends) as runner:
        target = image_input(runner.input_specs)
    assert (target.height, target.width, target.min_batch, target.max_batch) == (16, 12, 1, 4)


def test_letterbox_meta_maps_model_coordinates_back():
    pre = ImagePreprocess(image_input([_Spec((-1, 3, 32, 32))]))
    sample, meta = pre(frame_picture(0, width=64, height=32))
    assert sample.shape == (3, 32, 32) and sample.dtype == np.float32
    assert meta == {"scale": 0.5, "pad": (0, 8), "source_size": (64, 32)}
    assert np.allclose(sample[:, :8], 114 / 255)  # the letterbox's gray band
    with pytest.raises(InputError, match="HxWx3 uint8 RGB"):
        pre(np.zeros((4, 4), np.uint8))


class _Spec:
    name, dtype = "images", np.dtype("float32")

    def __init__(self, shape):
        self.shape = shape

    def profile_range(self, profile):
        return ((1, *self.shape[1:]), (2, *self.shape[1:]), (8, *self.shape[1:]))


def static_batch_engine(path, batch: int = 2):
    """The tiny conv net with a fixed batch of ``batch`` as a fake engine file."""
    conv = models.tiny_conv(dynamic_batch=False)
    for value in (conv.graph.input[0], conv.graph.output[0]):
        value.type.tensor_type.shape.dim[0].dim_value = batch
    path.write_bytes(fake_engine_bytes(conv, []))
    return path


def test_a_static_batch_engine_gets_padded_batches(tmp_path, backends):
    path = static_batch_engine(tmp_path / "static.engine")
    seen = []
    report = run_engine(path, ArraySource([frame_picture(i) for i in range(3)]), sinks=[CallbackSink(seen.append)],
                        **backends)
    assert report.frames_out == 3 and report.batch == 2 and [f.index for f in seen] == [0, 1, 2]
    assert all(f.outputs["y"].shape == (4, 1, 1) for f in seen)


def test_the_report_has_the_gpu_timeline_of_every_batch(engine_file, backends):
    report = run_engine(engine_file, ArraySource([frame_picture(i) for i in range(10)]), batch=4, max_wait_ms=500,
                        **backends)
    assert report.gpu["batches"] == 3 and report.gpu["busy_pct"] >= 0
    assert report.to_json()["gpu"] == report.gpu


def test_frames_of_a_video_or_of_subfolders_get_file_names_in_an_image_folder(tmp_path):
    from trtkit.pipeline import ImageFolderSink
    from trtkit.pipeline.stages import Frame

    sink = ImageFolderSink(tmp_path / "out")
    sink.write(Frame(42, frame_picture(1), "frame 42"))
    sink.write(Frame(0, frame_picture(2), "sub/a.jpg"))
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["000042.png", "sub_a.png"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="is a file; give a folder"):
        ImageFolderSink(tmp_path / "file")


def test_device_resident_samples_are_batched_on_the_gpu_without_a_host_copy(engine_file, backends):
    from trtkit.runtime.buffers import DeviceArray

    cuda, uploaded = backends["cuda"], []
    with TrtRunner(engine_file, **backends) as runner:
        host_pre = ImagePreprocess(image_input(runner.input_specs))

    def device_pre(image):  # what a GPU preprocessing (CuPy, torch) hands on: a device array
        sample, meta = host_pre(image)
        ptr = cuda.malloc(sample.nbytes)
        cuda.memcpy_htod_async(ptr, sample.ctypes.data, sample.nbytes, 0)
        uploaded.append(ptr)
        return DeviceArray(ptr, sample.shape, sample.dtype, cuda=cuda), meta

    frames, on_device, on_host = [frame_picture(i, 40, 30) for i in range(7)], [], []
    free_before = cuda.mem_get_info()[0]
    report = run_engine(engine_file, ArraySource(frames), sinks=[CallbackSink(on_device.append)],
                        processing=Processing(pre=device_pre), batch=4, **backends)
    assert cuda.mem_get_info()[0] == free_before - sum(f.sample.nbytes for f in on_device)  # batch buffers freed
    assert report.gpu["batches"] == 2
    run_engine(engine_file, ArraySource(frames), sinks=[CallbackSink(on_host.append)], batch=4, **backends)
    for a, b in zip(on_device, on_host, strict=True):
        np.testing.assert_allclose(a.outputs["y"], b.outputs["y"], rtol=1e-6)
    for ptr in uploaded:
        cuda.free(ptr)


def test_a_short_device_batch_is_padded_on_the_device(tmp_path, backends):
    from trtkit.runtime.buffers import DeviceArray

    path = static_batch_engine(tmp_path / "static.engine")
    cuda = backends["cuda"]

    def device_pre(image):
        sample = np.full((3, 8, 8), float(image[0, 0, 0]), np.float32)
        ptr = cuda.malloc(sample.nbytes)
        cuda.memcpy_htod_async(ptr, sample.ctypes.data, sample.nbytes, 0)
        return DeviceArray(ptr, sample.shape, sample.dtype, cuda=cuda), None

    seen, memsets = [], cuda.rt.calls["cudaMemsetAsync"]
    run_engine(path, ArraySource([frame_picture(i) for i in range(3)]), sinks=[CallbackSink(seen.append)],
               processing=Processing(pre=device_pre), **backends)
    assert cuda.rt.calls["cudaMemsetAsync"] - memsets == 1 and [f.index for f in seen] == [0, 1, 2]
