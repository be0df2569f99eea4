"""The letterbox kernels on a real GPU against the numpy letterbox (Pillow's pixels), and the sample's Detector with
the GPU letterbox against the numpy one on the same engine.

Run on the GPU host: ``bash .gpu/bin/gpu-run pytest -m gpu -q tests/gpu/test_letterbox_gpu.py``.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import GPU_TACTIC_SOURCES
from tests.gpu.conftest import kernels_on_stream
from trtkit.detection import Letterbox

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "samples" / "detection" / "model" / "detector.onnx"
DATA_SIZES = (256, 288, 320, 352, 384, 416)  # scripts/make_detection_data.py's image sides
# besides: columns-first and rows-first pass orders, the identity, enlarging, large shrinking, 1-pixel images
OTHER_SIZES = [(149, 469), (300, 1000), (320, 320), (7, 5), (1280, 720), (4000, 3000), (1, 1), (640, 480)]
SIZES = [(w, h) for w in DATA_SIZES for h in DATA_SIZES] + OTHER_SIZES


@pytest.fixture(scope="module")
def gpu(cuda_stream):
    from trtkit.runtime.letterbox import LetterboxKernels

    yield from kernels_on_stream(cuda_stream, LetterboxKernels)


def _images(sizes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for w, h in sizes]


def _on_host(cuda, stream, batch) -> np.ndarray:
    from trtkit.runtime.buffers import DeviceArray

    return DeviceArray(batch.ptr, batch.shape, batch.dtype, cuda=cuda).to_host(stream)


def test_uint8_batches_match_the_numpy_letterbox(gpu):
    """Max abs difference <= 1 on every pixel, for every size of the detection set and more (the kernels run
    Pillow's integer arithmetic, so the expected difference is 0)."""
    from trtkit.runtime.letterbox import DeviceLetterbox

    cuda, kernels, stream = gpu
    device = DeviceLetterbox(cuda, stream, (320, 320), np.uint8, kernels)
    cpu = Letterbox((320, 320), dtype=np.uint8, layout="NHWC")
    worst, differing = 0, 0
    try:
        images = _images(SIZES)
        for image in images:
            ours, metas = device([image])
            theirs, their_metas = cpu([image])
            got = _on_host(cuda, stream, ours)
            assert metas == their_metas and got.shape == theirs.shape
            diff = np.abs(got.astype(np.int16) - theirs.astype(np.int16))
            worst, differing = max(worst, int(diff.max())), differing + int((diff > 0).sum())
        batch = images[:5] + images[-8:]  # one call, many slots
        ours, _ = device(batch)
        diff = np.abs(_on_host(cuda, stream, ours).astype(np.int16) - cpu(batch)[0].astype(np.int16))
        worst, differing = max(worst, int(diff.max())), differing + int((diff > 0).sum())
    finally:
        device.close()
    assert worst <= 1, f"max abs difference {worst} ({differing} values differ)"


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_float_nchw_batches_match_the_numpy_letterbox(gpu, dtype):
    from trtkit.runtime.letterbox import DeviceLetterbox

    cuda, kernels, stream = gpu
    device = DeviceLetterbox(cuda, stream, (320, 320), dtype, kernels)
    cpu = Letterbox((320, 320))  # float32 NCHW, x / 255; a float16 engine gets it cast
    try:
        images = _images(SIZES[::5] + OTHER_SIZES, seed=1)
        ours, _ = device(images)
        got = _on_host(cuda, stream, ours)
        theirs = cpu(images)[0].astype(dtype)
    finally:
        device.close()
    assert got.dtype == dtype and got.shape == theirs.shape
    step = 1 / 255 + (1e-3 if dtype == np.float16 else 1e-6)  # one pixel level
    assert float(np.abs(got.astype(np.float32) - theirs.astype(np.float32)).max()) <= step


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_imagenet_normalized_batches_match_the_numpy_letterbox(gpu, dtype):
    """mean/std in the kernel: (x / 255 - mean) / std per channel, the CPU's float32 steps, on the GPU too."""
    from calibrators.preprocess import NORMALIZE
    from trtkit.runtime.letterbox import DeviceLetterbox

    cuda, kernels, stream = gpu
    device = DeviceLetterbox(cuda, stream, (320, 320), dtype, kernels, **NORMALIZE["imagenet"])
    cpu = Letterbox((320, 320), **NORMALIZE["imagenet"])
    try:
        images = _images(SIZES[::5] + OTHER_SIZES, seed=2)
        got = _on_host(cuda, stream, device(images)[0])
        theirs = cpu(images)[0].astype(dtype)
    finally:
        device.close()
    assert got.dtype == dtype and got.shape == theirs.shape
    step = 1 / 255 / 0.224 + (1e-2 if dtype == np.float16 else 1e-5)  # one pixel level of the narrowest std
    assert float(np.abs(got.astype(np.float32) - theirs.astype(np.float32)).max()) <= step


@pytest.fixture(scope="module")
def uint8_engine(tmp_path_factory, cache_dir):
    from trtkit.builder.api import build
    from trtkit.builder.config import BuildConfig
    from trtkit.builder.profiles import parse_shapes

    config = BuildConfig(profiles=[parse_shapes("images:1x320x320x3,8x320x320x3,8x320x320x3")],
                         tactic_sources=GPU_TACTIC_SOURCES, timing_cache=str(cache_dir / "detection.cache"),
                         input_uint8_nhwc=True)
    path = tmp_path_factory.mktemp("letterbox") / "det-uint8.engine"
    build(str(MODEL), config, output=path, isolate=False)
    return path


def test_the_sample_finds_the_same_detections_with_either_letterbox(uint8_engine):
    """The Detector (CUDA graph, output views) on one engine: GPU letterbox (device batch bound where it is) and
    numpy letterbox give the same detections; both timings are printed."""
    sys.path.insert(0, str(ROOT / "samples" / "detection"))
    from detect import RUNNER_OPTIONS, Detector

    from trtkit.eval.models import open_model

    images = [_decode(0, i) for i in range(24)]  # the detection set's first val images, decoded
    found, totals = {}, {}
    with open_model(str(uint8_engine), runner_options=RUNNER_OPTIONS) as model:
        for where in ("gpu", "cpu"):
            detector = Detector(model, letterbox=where)
            assert detector.letterbox.where == where, detector.letterbox_reason
            try:
                for image in images:
                    detector([image])
                detector.times = {k: [] for k in detector.times}
                found[where] = [detector([image])[0] for image in images]
            finally:
                detector.close()
            totals[where] = sum(statistics.median(v) for v in detector.times.values()) * 1e3
        assert model.runner.stats().device_replays >= len(images)
    assert sum(len(d) for d in found["cpu"]) > len(images)
    for a, b in zip(found["gpu"], found["cpu"]):
        assert len(a) == len(b)
        np.testing.assert_allclose(a.boxes, b.boxes, atol=1e-3)
        np.testing.assert_array_equal(a.classes, b.classes)
    print(f"\nsample per image at batch 1, median ms: GPU letterbox {totals['gpu']:.3f}, numpy {totals['cpu']:.3f}")


def _decode(seed: int, index: int) -> np.ndarray:
    import io

    from PIL import Image

    sys.path.insert(0, str(ROOT / "scripts"))
    import make_detection_data

    with Image.open(io.BytesIO(make_detection_data.render(seed, "val", index)[0])) as img:
        return np.asarray(img.convert("RGB"))
