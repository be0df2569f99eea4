"""The GPU letterbox's host side on the fake CUDA: the taps it uploads, the launches it makes, the batch it fills
(the numpy letterbox's pixels exactly), its memory, and the fallback to numpy with its reason."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from calibrators.preprocess import NORMALIZE
from tests.fakes.fake_cuda import FakeCudart, view_of
from trtkit.detection import Letterbox
from trtkit.errors import CudaError, InputError
from trtkit.runtime import letterbox as device_module
from trtkit.runtime.cuda import Cuda
from trtkit.runtime.letterbox import DeviceLetterbox, device_letterbox, plan
from trtkit.runtime.ptx import BLOCK, grid_for, kernel_params

# (w, h) of images letterboxed into 32 x 48 (H x W): wider, taller, equal, larger and smaller, both pass orders
SIZES = [(64, 48), (20, 30), (48, 32), (149, 469), (7, 5), (300, 1000), (48, 96)]
SIZE = (32, 48)


def _images(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for w, h in SIZES]


@pytest.fixture
def fake():
    rt = FakeCudart()
    cuda = Cuda(rt)
    stream = cuda.stream_create()
    yield rt, cuda, stream
    cuda.stream_destroy(stream)
    assert rt.live_allocations()["device"] == 0 and rt.live_allocations()["host"] == 0


def _device(cuda, stream, dtype, rt):
    return DeviceLetterbox(cuda, stream, SIZE, dtype, rt.letterbox_kernels())


@pytest.mark.parametrize(("dtype", "layout"), [(np.uint8, "NHWC"), (np.float32, "NCHW"), (np.float16, "NCHW")])
def test_batches_are_the_numpy_letterboxs_exactly(fake, dtype, layout):
    rt, cuda, stream = fake
    gpu = _device(cuda, stream, dtype, rt)
    cpu = Letterbox(SIZE, dtype=np.uint8 if dtype == np.uint8 else np.float32, layout=layout)
    try:
        images = _images()
        for batch in ([images[0]], images, images[2:4], [Image.fromarray(images[3])]):
            ours, metas = gpu(batch)
            theirs, their_metas = cpu(batch)
            cuda.stream_synchronize(stream)
            assert ours.shape == theirs.shape and ours.dtype == dtype and metas == their_metas
            np.testing.assert_array_equal(view_of(ours.ptr, ours.shape, ours.dtype), theirs.astype(dtype))
    finally:
        gpu.close()


def test_taps_go_to_the_device_once_per_image_size_and_each_image_is_two_launches(fake):
    rt, cuda, stream = fake
    gpu = _device(cuda, stream, np.uint8, rt)
    try:
        images = _images()
        gpu(images)
        uploads = rt.calls["cudaMemcpyAsync"]
        gpu(images)
        gpu(images[:1])
        assert rt.calls["cudaMemcpyAsync"] - uploads == 2  # the images only: one copy a call
        kernels = gpu.kernels
        assert [name for name, _ in kernels.launches[:4]] == ["resample_pass", "letterbox_finish"] * 2
        assert len(kernels.launches) == 2 * (2 * len(images) + 1)
    finally:
        gpu.close()
    gpu.close()  # idempotent


def test_the_staging_is_refilled_only_after_its_last_copy_left(fake):
    """The pinned staging is one buffer: the next call waits for the event recorded after the previous copy, so a
    copy still queued (nothing synchronized the stream) sends the pixels it was given."""
    rt, cuda, stream = fake
    gpu = _device(cuda, stream, np.uint8, rt)
    try:
        a, b = _images(1)[0], _images(2)[0]
        first, _ = gpu([a])
        seen = np.empty(first.shape, np.uint8)  # what the batch holds once the first call's work has run
        cuda.memcpy_dtoh_async(seen.ctypes.data, first.ptr, first.nbytes, stream)
        before = rt.calls["cudaEventSynchronize"]
        gpu([b])
        assert rt.calls["cudaEventSynchronize"] == before + 1
        cuda.stream_synchronize(stream)
        box = Letterbox(SIZE, dtype=np.uint8, layout="NHWC")
        np.testing.assert_array_equal(seen, box([a])[0])
        np.testing.assert_array_equal(view_of(first.ptr, first.shape, np.uint8), box([b])[0])
    finally:
        gpu.close()


def test_plan_geometry_and_launch_grids():
    p = plan(149, 469, SIZE, "vh")
    assert p.new_size == (10, 32) and (p.meta.pad_x, p.meta.pad_y) == (19, 0)
    assert not p.first.horizontal and p.second.horizontal and (p.tmp_rows, p.tmp_cols) == (32, 149)
    q = plan(149, 469, SIZE, "")  # an order Pillow's output does not tell: columns first
    assert q.first.horizontal and (q.tmp_rows, q.tmp_cols) == (469, 10)
    for each in (p, q):
        first_threads, finish_threads = each.tmp_rows * each.tmp_cols, SIZE[0] * SIZE[1]
        for grid, threads in ((each.first_grid, first_threads), (each.finish_grid, finish_threads)):
            assert grid * BLOCK >= threads > (grid - 1) * BLOCK
    assert grid_for(0) == 1 and grid_for(257) == 2 and grid_for(10**9, max_blocks=1024) == 1024


def test_kernel_params_hold_each_value_in_an_8_byte_slot():
    slots, pointers = kernel_params([(0x7F00_0000_1234, np.uint64), (-3, np.int32), (np.float32(0.25), np.float32)])
    assert pointers.dtype == np.uint64 and int(pointers[1]) - int(pointers[0]) == 8
    assert view_of(int(pointers[0]), (1,), np.uint64)[0] == 0x7F00_0000_1234
    assert view_of(int(pointers[1]), (1,), np.int32)[0] == -3
    assert view_of(int(pointers[2]), (1,), np.float32)[0] == np.float32(0.25)
    assert slots.nbytes == 24


def _runner(cuda, stream, dtype=np.uint8, shape=(-1, 32, 48, 3), names=("images",)):
    specs = [SimpleNamespace(name=n, dtype=np.dtype(dtype), shape=shape) for n in names]
    return SimpleNamespace(input_specs=specs, stream=stream, cuda=cuda)


def test_device_letterbox_for_a_runner_or_why_not(fake):
    rt, cuda, stream = fake
    gpu, reason = device_letterbox(_runner(cuda, stream))
    assert reason is None and gpu.size == SIZE and gpu.layout == "NHWC"
    gpu.close()
    gpu, reason = device_letterbox(_runner(cuda, stream, np.float16, (-1, 3, 32, 48)))
    assert reason is None and gpu.layout == "NCHW" and gpu.dtype == np.float16
    gpu.close()
    cases = [
        (_runner(cuda, None), "does not run through an active TrtRunner"),
        (_runner(cuda, stream, names=("a", "b")), "the engine has 2 inputs"),
        (_runner(cuda, stream, np.int32, (-1, 3, 32, 48)), "is not a uint8 NHWC or float NCHW 3-channel image"),
        (_runner(cuda, stream, np.float32, (-1, 3, -1, -1)), "with a fixed height and width"),
        (_runner(cuda, stream, np.float32, (-1, 1, 32, 48)), "input 'images' (float32 (-1, 1, 32, 48))"),
    ]
    for runner, why in cases:
        gpu, reason = device_letterbox(runner)
        assert gpu is None and why in reason


def test_kernels_that_cannot_load_leave_the_reason(monkeypatch):
    rt = FakeCudart(kernels=False)
    cuda = Cuda(rt)
    stream = cuda.stream_create()

    def no_gpu(cuda):
        raise CudaError("cuModuleLoadData(letterbox.ptx) failed with CUDA_ERROR_NO_DEVICE")

    monkeypatch.setattr(device_module, "LetterboxKernels", no_gpu)
    gpu, reason = device_letterbox(_runner(cuda, stream))
    assert gpu is None
    assert reason == "the GPU kernels cannot load (CudaError: cuModuleLoadData(letterbox.ptx) failed with " \
                     "CUDA_ERROR_NO_DEVICE)"
    cuda.stream_destroy(stream)


def test_an_input_dtype_it_cannot_fill_is_refused(fake):
    rt, cuda, stream = fake
    with pytest.raises(InputError, match="uint8 NHWC, float32 or float16 NCHW inputs; not int8"):
        DeviceLetterbox(cuda, stream, SIZE, np.int8, rt.letterbox_kernels())


def test_model_picks_the_gpu_letterbox_where_it_loads_and_says_why_not(fake, monkeypatch):
    from trtkit.eval.models import Model

    rt, cuda, stream = fake
    engine = Model(lambda feed: feed, "images", (4, 32, 48, 3), 4, "engine", "det.engine", np.uint8,
                   _runner(cuda, stream))
    box, reason = engine.pick_letterbox()
    assert box.where == "gpu" and reason is None
    box.close()
    box, reason = engine.pick_letterbox("cpu")
    assert box.where == "cpu" and box.raw and reason == "asked for the numpy letterbox"
    onnx = Model(lambda feed: feed, "images", ("N", 3, 32, 48), 4, "onnx", "det.onnx (onnxruntime)")
    box, reason = onnx.pick_letterbox()
    assert box.where == "cpu" and reason == "det.onnx (onnxruntime) does not run through TensorRT"
    with pytest.raises(InputError, match="cannot run for det.onnx .onnxruntime.: det.onnx"):
        onnx.pick_letterbox("gpu")
    with pytest.raises(InputError, match="Letterbox place 'tpu' is not known; use one of: auto, gpu, cpu"):
        onnx.pick_letterbox("tpu")


def test_shipped_ptx_was_made_from_the_current_kernel_source():
    """An edited letterbox.cu without a new PTX fails here: run scripts/make_ptx.py."""
    import hashlib
    import re

    source = device_module.PTX.with_suffix(".cu")
    text = device_module.PTX.read_text()
    recorded = re.search(r"source sha256 ([0-9a-f]{64})", text.splitlines()[0]).group(1)
    assert recorded == hashlib.sha256(source.read_bytes()).hexdigest()
    assert ".version 7.0" in text and ".target sm_60" in text
    assert ".entry resample_pass" in text and ".entry letterbox_finish" in text


# --- the real launch path (PtxModule, LetterboxKernels) on a fake driver ---------------------------------------------


def _signature(kernel: str) -> list:
    """``[(name, numpy dtype)]`` of a kernel's parameters, read from letterbox.cu (pointers: 64-bit addresses)."""
    import re

    source = device_module.PTX.with_suffix(".cu").read_text()
    params = re.search(rf'extern "C" __global__ void {kernel}\(([^)]*)\)', source).group(1)
    out = []
    for param in params.split(","):
        name = re.findall(r"\w+", param)[-1]
        out.append((name, np.uint64 if "*" in param else np.float32 if "float" in param else np.int32))
    return out


class FakeDriver:
    """``cuda.bindings.driver``'s calls PtxModule makes. A launch decodes its kernelParams by the kernel's signature in
    letterbox.cu and runs the fake CUDA's numpy stand-in with those values, by name."""

    def __init__(self, rt):
        self.stand_in = rt.letterbox_kernels()
        self.loaded, self.launched = [], []

    def CUstream(self, handle):
        return handle

    def cuModuleLoadData(self, ptr):
        text = view_of(ptr, (64,), np.uint8).tobytes()
        self.loaded.append(text)
        return (0, "module")

    def cuModuleGetFunction(self, module, name):
        return (0, name.decode())

    def cuModuleUnload(self, module):
        return (0,)

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        signature = _signature(fn)
        pointers = view_of(params, (len(signature),), np.uint64)
        a = {name: view_of(int(p), (1,), dtype)[0] for (name, dtype), p in zip(signature, pointers)}
        a = {k: (float(v) if isinstance(v, np.floating) else int(v)) for k, v in a.items()}
        self.launched.append((fn, gx, bx, params))
        taps = (a["first"], a["count"], a["weights"])
        if fn == "resample_pass":
            self.stand_in.resample_pass(a["src"], a["src_cols"], a["dst"], a["dst_rows"], a["dst_cols"], taps,
                                        a["ksize"], a["horizontal"], gx, stream)
        else:
            region = (a["new_w"], a["new_h"], a["pad_x"], a["pad_y"])
            self.stand_in.letterbox_finish(a["tmp"], a["tmp_cols"], taps, a["ksize"], a["horizontal"], region,
                                           (a["out_h"], a["out_w"]), a["pad_value"], a["out"], a["format"],
                                           a["scale"], ((a["mean_r"], a["mean_g"], a["mean_b"]),
                                           (a["std_r"], a["std_g"], a["std_b"])), gx, stream)
        return (0,)


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_launch_parameters_follow_the_kernels_signatures(fake, dtype):
    """The parameters LetterboxKernels packs, read back by the signatures in letterbox.cu, letterbox the images as
    numpy does: a parameter out of order or of the wrong size shows in the pixels (a float input normalized with
    three different means and stds: a channel's mean or std in another's place shows too)."""
    from trtkit.runtime.letterbox import LetterboxKernels

    rt, cuda, stream = fake
    driver = FakeDriver(rt)
    kernels = LetterboxKernels(cuda, driver=driver)
    assert driver.loaded[0].startswith(b"// source sha256")
    norm = {} if dtype == np.uint8 else NORMALIZE["imagenet"]
    gpu = DeviceLetterbox(cuda, stream, SIZE, dtype, kernels, **norm)
    layout = "NHWC" if dtype == np.uint8 else "NCHW"
    try:
        images = _images(3)
        for _ in range(2):
            ours, _ = gpu(images)
            cuda.stream_synchronize(stream)
            np.testing.assert_array_equal(view_of(ours.ptr, ours.shape, ours.dtype),
                                          Letterbox(SIZE, dtype=dtype, layout=layout, **norm)(images)[0])
    finally:
        gpu.close()
        kernels.close()
    assert {block for _, _, block, _ in driver.launched} == {BLOCK}
    first_round, second_round = driver.launched[: 2 * len(images)], driver.launched[2 * len(images):]
    # the second round's launches reuse the parameters packed in the first (the same images, sizes and buffers)
    assert [params for *_, params in first_round] == [params for *_, params in second_round]


# --- letterbox.cu itself, compiled for the CPU ----------------------------------------------------------------------

SHIM = r"""
#include <cstring>
struct Index { unsigned x, y, z; };
static Index blockIdx, blockDim, threadIdx;
#define __global__
#define __device__
#define __forceinline__ inline
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline unsigned short half_bits(float f) { _Float16 x = (_Float16)f; unsigned short u; std::memcpy(&u, &x, 2);
                                                  return u; }
#define asm(...) (h = half_bits(f))  /* the one asm: cvt.rn.f16.f32 h, f */
#include "letterbox.cu"
"""


def _launcher(kernel: str) -> str:
    """A C function running every thread of ``kernel``'s grid in turn, its parameters unpacked from a
    kernelParams array by the types in letterbox.cu, as the driver does."""
    import re

    source = device_module.PTX.with_suffix(".cu").read_text()
    params = re.search(rf'extern "C" __global__ void {kernel}\(([^)]*)\)', source).group(1).split(",")
    types = [re.sub(r"\w+\s*$", "", p.replace("__restrict__", "")).strip() for p in params]
    unpacked = ", ".join(f"*({t} *)p[{i}]" for i, t in enumerate(types))
    return (f'extern "C" void run_{kernel}(unsigned grid, unsigned block, void **p) {{ blockDim.x = block;\n'
            f"  for (unsigned b = 0; b < grid; b++) for (unsigned t = 0; t < block; t++) {{\n"
            f"    blockIdx.x = b; threadIdx.x = t; {kernel}({unpacked}); }} }}\n")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """letterbox.cu built with g++ (CUDA's built-ins shimmed: thread indices, __fmul_rn, the half conversion)."""
    import ctypes
    import shutil
    import subprocess

    if shutil.which("g++") is None:
        pytest.skip("no g++ to build letterbox.cu for the CPU")
    folder = tmp_path_factory.mktemp("kernels")
    code = SHIM + _launcher("resample_pass") + _launcher("letterbox_finish")
    (folder / "host.cpp").write_text(code)
    lib = folder / "letterbox_host.so"
    proc = subprocess.run(["g++", "-O2", "-ffp-contract=off", "-shared", "-fPIC", "-I", str(device_module.PTX.parent),
                           "-o", str(lib), str(folder / "host.cpp")], capture_output=True, text=True)
    if proc.returncode and "_Float16" in proc.stderr:
        pytest.skip(f"this g++ has no _Float16: {proc.stderr[:200]}")
    assert proc.returncode == 0, proc.stderr
    return ctypes.CDLL(str(lib))


class CompiledDriver(FakeDriver):
    """Launches run letterbox.cu's own code (built for the CPU) on the fake stream, with the kernelParams given."""

    def __init__(self, rt, lib):
        super().__init__(rt)
        self.rt, self.lib = rt, lib

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        import ctypes

        count = len(_signature(fn))
        slots = np.array([view_of(int(p), (1,), np.uint64)[0] for p in view_of(params, (count,), np.uint64)])
        pointers = np.arange(count, dtype=np.uint64) * np.uint64(8) + np.uint64(slots.ctypes.data)  # the values now
        run = getattr(self.lib, f"run_{fn}")
        run.argtypes = [ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p]
        self.launched.append((fn, gx, bx, params))

        def op(slots=slots, pointers=pointers):  # the arrays live as long as the queued launch
            run(gx, bx, int(pointers.ctypes.data))

        self.rt.enqueue(stream, op)
        return (0,)


@pytest.mark.parametrize(("dtype", "layout", "norm"), [(np.uint8, "NHWC", "none"), (np.float32, "NCHW", "none"),
                                                       (np.float16, "NCHW", "none"), (np.float32, "NCHW", "imagenet"),
                                                       (np.float16, "NCHW", "imagenet")])
def test_the_kernel_source_gives_the_numpy_letterboxs_batches(fake, compiled, dtype, layout, norm):
    """letterbox.cu's kernels (compiled for the CPU, run thread by thread) launched by LetterboxKernels as on the
    GPU: every pixel of every size, both pass orders, several slots of one batch, as the numpy letterbox has it;
    ImageNet's mean and std applied in the kernel give the numpy letterbox's values bit for bit."""
    from trtkit.runtime.letterbox import LetterboxKernels

    rt, cuda, stream = fake
    kernels = LetterboxKernels(cuda, driver=CompiledDriver(rt, compiled))
    gpu = DeviceLetterbox(cuda, stream, SIZE, dtype, kernels, **NORMALIZE[norm])
    cpu = Letterbox(SIZE, dtype=np.uint8 if dtype == np.uint8 else np.float32, layout=layout, **NORMALIZE[norm])
    try:
        images = _images(4)
        for batch in (images, images[3:4], images[::-1]):
            ours, _ = gpu(batch)
            cuda.stream_synchronize(stream)
            np.testing.assert_array_equal(view_of(ours.ptr, ours.shape, ours.dtype), cpu(batch)[0].astype(dtype))
    finally:
        gpu.close()
        kernels.close()


def test_the_kernel_source_on_the_detection_sets_sizes(fake, compiled):
    """The sample's case: 320 x 320 uint8 NHWC, every image size scripts/make_detection_data.py draws."""
    from trtkit.runtime.letterbox import LetterboxKernels

    rt, cuda, stream = fake
    kernels = LetterboxKernels(cuda, driver=CompiledDriver(rt, compiled))
    gpu = DeviceLetterbox(cuda, stream, (320, 320), np.uint8, kernels)
    cpu = Letterbox((320, 320), dtype=np.uint8, layout="NHWC")
    sides = (256, 288, 320, 352, 384, 416)
    rng = np.random.default_rng(5)
    try:
        for w in sides:
            batch = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h in sides]
            ours, _ = gpu(batch)
            cuda.stream_synchronize(stream)
            np.testing.assert_array_equal(view_of(ours.ptr, ours.shape, ours.dtype), cpu(batch)[0])
    finally:
        gpu.close()
        kernels.close()
