#!/usr/bin/env python3
"""Streaming pipelines on one GPU, in one call (issue 16): each stage alone, the whole pipeline, the image folder
mode, the inference stage against ``trtkit bench``, NVDEC against PyAV, device memory over 10 000 frames.

1. Engine: a small image CNN made here with onnx.helper (four strided 3x3 convolutions, global pooling, a linear
   classifier; input ``images`` N x 3 x 224 x 224, N 1..32), built by trtkit in FP16 with TensorRT's own tactic
   sources (the GPU bundle stubs cuBLAS/cuDNN).
2. Test videos made with PyAV: 1080p H.264 (libx264) for the video pipeline and the decoders, and a 10 000-frame
   320x240 MPEG-4 video for the memory run.
3. Video: decode (PyAV), preprocess (letterbox to 224, the pipeline's threads), infer (pre-decoded samples through
   the pipeline's batched stage) and encode (PyAV, H.264) each measured alone; then
   ``decode → preprocess → infer → encode`` as one pipeline, preprocessing where ``run_engine`` puts it by default
   (the GPU letterbox where its kernels load; the CPU letterbox alone then does not count among the stages alone).
   Target: end-to-end FPS >= 0.9 x the slowest stage's. The stages alone run on the video's frames decoded once and
   held in memory, all of them by default (``--alone-frames``): the encoder alone then encodes exactly the frames
   the pipeline encodes, in order (``encoder.alone_first_frames_cycled``: the first 300 cycled, the baseline until
   2026-12-02, a lighter load than the pipeline's: docs/performance.md, Pipelines). Each run records the encoder's
   CPU a frame alone and inside the pipeline (``encode_cpu_ms_alone`` / ``encode_cpu_ms_pipeline``, from the
   pipeline report's per-stage ``cpu``) and the cores each stage kept busy (``cores_by_stage``).
4. Folder: JPEG images (640x480) through ``decode → preprocess → infer`` (images/s).
5. Infer stage vs ``trtkit.bench`` (same engine, batch, CUDA graphs, copies included): target >= 0.9x. Run as a
   block pipeline (``BlockSource`` of stacked batches: one item per batch through every stage and the sink). The
   stage is measured over at least 2.5 s of steady work (a pilot run sets the frame count); its start-up (engine
   load, buffers, graph capture) is reported apart (``infer_stage.pipeline_stage.startup_s``). The batches sit in
   the stage's pinned batch ring (written once: the stage itself); ``copying_samples`` copies every batch in;
   ``frame_path`` is the frame pipeline (one item per frame) on the same samples.
   ``video_variants``: the video pipeline with one setting changed at a time, each against the stages alone
   measured with that setting: libx264 with SLICE threads (PyAV's default; the writer's default is AUTO, frame
   threads), Python's switch interval at 1 ms, two preprocess workers. ``encoder``: the encoder's settings as
   opened. ``gil``: each CPU stage's work per frame next to a probe thread (ms per frame, GIL held per frame).
   With ``--encoder-process``, ``video_encoder_process``: the same pipeline with the encoder in a child process
   (``VideoSink(in_process=True)``, frames through shared memory), and the encoder alone in a child process.
   ``video.paired`` / ``video_nvdec_device.paired`` (``--pairs N``): the pipeline N more times, each right after
   the encoder alone is measured again (the targets read the median of these ratios), and each also against the
   mean of the encoder before and after it (``ratio_bracketed``). ``video_ab`` (``--ab-rounds N``,
   ``--ab-variants``): rounds of the encoder alone and then every variant (``gpu_wait_block``, ``nvdec_device``,
   ``encoder_threads_N``, ``held_frames``: the encoder's own frames through a sink-only pipeline, ...), in an order
   turned every round, each against that round's encoder.
6. NVENC (PyAV's h264_nvenc, where the driver's encoder loads): encode frames/s next to libx264's.
   NVDEC (PyNvVideoCodec, where it loads): decode frames/s into device memory vs PyAV's on the same 1080p file,
   and the video pipeline decoding with NVDEC (frames to host memory for the CPU preprocessing), with the GPU's
   idle time between batches (CUDA events around every batch). ``nvdec.capacity``: 1, 2 and 4 raw decoders in
   threads over a clip of the video four times; ``nvdec.split``: trtkit's readers on that clip (one NvdecReader,
   SplitNvdecReader with 2 and 4 decoders, frames in device memory and in order), against PyAV on the same clip.
   ``cores_busy``: the cores the process kept busy during decode alone, encode alone and the video pipeline (CPU
   time of every thread over wall time): where the encoder alone keeps every core busy, a pipeline decoding on the
   same CPU cannot reach it.
7. Device memory: cudaMemGetInfo sampled during a 10 000-frame pipeline run (from frame 1000 to the end) and
   before/after it. Target: 0 bytes of growth; frames in = frames out.
8. If time is left: the detection sample's detector (FP16, 320x320) on the 1080p video with the detection
   postprocessing and drawing (``detection``: its build time, end-to-end FPS, stages), only when its estimate (the
   detector's build time measured by the detection benchmark + the video pipeline's time) fits in what is left of
   ``--budget-s``; ``notes.detection`` gives the figures either way.

Every part is guarded: a failure is recorded under ``errors`` and the rest goes on; the JSON is rewritten after
every stored result, so a call cut by its time limit keeps everything measured until then. ``--skip-parts`` leaves
parts out to fit a call (``notes.skipped_parts`` names them).

    python3 benchmarks/pipeline_h200.py --out "$OUT"        # on the GPU host: bash .gpu/bin/gpu-run python3 ...
    python3 benchmarks/pipeline_h200.py --fake --out /tmp/p # on a CPU: fake TensorRT/CUDA, tiny sizes (a dry run)

Writes ``<out>/pipeline-h200.json`` and (not with ``--fake``) ``benchmarks/results/pipeline-h200.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TACTICS = ("EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS")
STARTED = time.perf_counter()


class Sizes:
    """What the run measures on; ``--fake`` shrinks everything (the fake engine evaluates ONNX on the CPU)."""

    def __init__(self, fake: bool):
        self.fake = fake
        self.side = 32 if fake else 224
        self.max_batch = 4 if fake else 32
        self.video = (160, 96) if fake else (1920, 1080)
        self.video_frames = 40 if fake else 600
        # frames held in memory for the stage-alone runs: the whole video, so the encoder alone encodes exactly the
        # pipeline's frames (its first 300 cycled twice are less work: docs/performance.md, Pipelines)
        self.alone_frames = self.video_frames
        self.folder_images = 30 if fake else 1000
        self.leak_frames = 300 if fake else 10_000
        self.leak_video = (64, 48) if fake else (320, 240)
        self.pre_workers = 2 if fake else 6
        self.decode_workers = 2 if fake else 8
        self.infer_work_s = 0.3 if fake else 2.5  # steady work the inference stage is measured over, at least


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - STARTED:6.1f}s] {msg}", flush=True)


class Run:
    """The figures of one call, checkpointed to ``out/name`` after every part."""

    def __init__(self, out: Path | None = None, name: str = "pipeline-h200.json"):
        self.result: dict = {"errors": {}, "notes": {}, "timings_s": {}}
        self.out, self.name = out, name

    def checkpoint(self) -> None:
        """Write what is measured so far, so a call cut short by its time limit still brings figures back."""
        if self.out is not None:
            partial = dict(self.result, complete=False)
            text = json.dumps(partial, indent=2, sort_keys=True, default=str) + "\n"
            (self.out / self.name).write_text(text)

    def store(self, key: str, value):
        """``result[key] = value``, written out at once (a call cut later keeps it); returns ``value``."""
        self.result[key] = value
        self.checkpoint()
        return value

    def guard(self, key: str, fn):
        t0 = time.perf_counter()
        log(f"{key} ...")
        try:
            value = fn()
        except Exception as exc:  # noqa: BLE001 - record and go on with the other parts
            self.result["errors"][key] = f"{type(exc).__name__}: {exc}"
            log(f"{key} FAILED: {exc}\n{traceback.format_exc()}")
            value = None
        self.result["timings_s"][key] = round(time.perf_counter() - t0, 2)
        self.checkpoint()
        return value


# --- the engine and the media ----------------------------------------------------------------------------------------

def make_model(side: int):
    """Four strided 3x3 convolutions (3→16→32→64→128 channels) with ReLU, global average pooling, a 128→10 Gemm."""
    return conv_net(side, [(16, 2), (32, 2), (64, 2), (128, 2)], "pipeline_cnn")


def make_heavy_model(side: int, width: int, depth: int):
    """A CNN slow enough that the GPU, not NVDEC, is the slowest stage: a 3→64 and a 64→``width`` strided 3x3
    convolution (to a quarter of ``side``), ``depth`` 3x3 ``width``→``width`` convolutions there, global pooling and
    a ``width``→10 Gemm (about 9·width²·(side/4)²·depth multiply-adds per image)."""
    return conv_net(side, [(64, 2), (width, 2)] + [(width, 1)] * depth, "pipeline_heavy_cnn")


def conv_net(side: int, layers: list, name: str):
    """``images`` N x 3 x side x side through 3x3 convolutions ``(out channels, stride)`` with ReLU (seeded random
    weights), global average pooling and a Gemm to 10 ``logits``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, prev, channels = [], [], "images", 3
    for i, (out, stride) in enumerate(layers):
        w = rng.standard_normal((out, channels, 3, 3)).astype(np.float32) * (2.0 / (9 * channels)) ** 0.5
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(np.zeros(out, np.float32), f"b{i}")]
        nodes += [helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1],
                                   strides=[stride, stride]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        prev, channels = f"r{i}", out
    inits += [numpy_helper.from_array(rng.standard_normal((channels, 10)).astype(np.float32) * 0.1, "fc"),
              numpy_helper.from_array(np.zeros(10, np.float32), "fcb")]
    nodes += [helper.make_node("GlobalAveragePool", [prev], ["gap"]),
              helper.make_node("Flatten", ["gap"], ["flat"], axis=1),
              helper.make_node("Gemm", ["flat", "fc", "fcb"], ["logits"])]
    graph = helper.make_graph(nodes, name,
                              [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, side, side])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def build_engine(sizes: Sizes, work: Path, trt, model=None, side: int | None = None, batch: int | None = None,
                 name: str = "pipeline_cnn") -> Path:
    """The benchmark's engine (FP16, batch 1..max): ``model`` (default :func:`make_model` at the sizes' side)."""
    from trtkit.builder.api import build
    from trtkit.builder.config import BuildConfig
    from trtkit.builder.profiles import parse_shapes

    s, b = side or sizes.side, batch or sizes.max_batch
    model_path = work / f"{name}.onnx"
    model_path.write_bytes((model or make_model(s)).SerializeToString())
    config = BuildConfig(precision="fp16", tactic_sources=TACTICS,
                         profiles=[parse_shapes(f"images:1x3x{s}x{s},{b}x3x{s}x{s},{b}x3x{s}x{s}")])
    engine = work / f"{name}.engine"
    build(str(model_path), config, output=engine, isolate=False, trt=trt)
    return engine


def make_video(path: Path, frames: int, size: tuple, codec: str) -> Path:
    from trtkit.pipeline.video import write_pattern_video

    return write_pattern_video(path, frames, size, 30, codec)


def make_folder(folder: Path, count: int, fake: bool) -> Path:
    from PIL import Image

    from trtkit.pipeline.video import pattern_frame

    folder.mkdir(parents=True, exist_ok=True)
    width, height = (80, 60) if fake else (640, 480)
    for i in range(count):
        Image.fromarray(pattern_frame(i, width, height)).save(folder / f"img_{i:05d}.jpg", quality=90)
    return folder


# --- stages alone ----------------------------------------------------------------------------------------------------

def fps_of(frames: int, seconds: float) -> float:
    return round(frames / seconds, 2) if seconds > 0 else 0.0


def decode_alone(video: Path, threads: int | None = None) -> tuple:
    """PyAV decode of every frame (``threads`` FFmpeg threads: default the reader's, 0: FFmpeg's choice): fps, and
    the first frames kept for the other stages."""
    from trtkit.pipeline.video import PyAVReader

    reader, kept, count = PyAVReader(video, threads), [], 0
    t0 = time.perf_counter()
    for image in reader:
        count += 1
        if len(kept) < ALONE_KEEP[0]:
            kept.append(image)
    seconds = time.perf_counter() - t0
    reader.close()
    return fps_of(count, seconds), kept


ALONE_KEEP = [600]
EARLIER_ALONE_FRAMES = 300  # the stage-alone runs held the video's first 300 frames until 2026-12-02


def alone_frames(value: str | None, sizes: Sizes) -> int:
    """The frames held for the stages alone from ``--alone-frames`` (None: the sizes' default; ``all``: the video's
    frame count). Raises ValueError for anything else."""
    if value is None:
        return sizes.alone_frames
    if value == "all":
        return sizes.video_frames
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"--alone-frames {value}: give a count of frames (1 or more) or 'all'")
    return int(value)


def cycled(items: list, count: int):
    return itertools.islice(itertools.cycle(items), count)


def preprocess_alone(engine_target, frames: list, count: int, workers: int) -> float:
    """The pipeline's preprocess stage with its workers, fed from memory, into nothing."""
    from trtkit.pipeline import ArraySource, Pipeline, Stage
    from trtkit.pipeline.preprocess import ImagePreprocess

    pre = ImagePreprocess(engine_target)

    def fn(frame):
        frame.sample, frame.meta = pre(frame.image)

    report = Pipeline(ArraySource(cycled(frames, count)), [Stage("preprocess", fn, workers)]).run()
    return fps_of(report.frames_out, report.elapsed_s)


class SampleInto:
    """``pre`` for pre-made samples, writing each into its row of the inference stage's pinned batch ring (as the
    image preprocessing does). Rows are assigned by frame index and the sample list is as long as the ring has
    rows, so a row always gets the same sample: with ``copy_always=False`` it is written once, and the stage is
    measured on its own (batching, transfers in place, compute); with True every frame is copied in (the cost of
    writing 600 KB samples on one thread)."""

    def __init__(self, target, copy_always: bool):
        self.target, self.copy_always = target, copy_always
        self.shape = (target.channels, target.height, target.width)
        self._held: dict = {}  # row address -> the sample it holds

    def __call__(self, sample):
        return sample, None

    def into(self, sample, out):
        key = out.ctypes.data
        if self.copy_always or self._held.get(key) is not sample:
            out[...] = sample
            self._held[key] = sample


class BlockSamplesInto(SampleInto):
    """``SampleInto`` for a block pipeline: ``into_block`` writes a whole stacked batch into its batch ring buffer
    in one step (with ``copy_always=False`` only when the buffer does not hold that batch already: the source
    cycles through as many batches as the ring has buffers, so each buffer is written once)."""

    def into_block(self, batch, out):
        key = out.ctypes.data
        if self.copy_always or self._held.get(key) is not batch:
            out[...] = batch
            self._held[key] = batch


def infer_once(engine: Path, samples: list, count: int, batch: int, runner_args: dict, pre=None,
               blocks: bool = False) -> dict:
    """``count`` pre-made samples (whole batches of ``batch``) through the pipeline's batched inference stage (one
    preprocess worker passes them on, through ``pre``): the steady rate (the batches after the first, from the first
    batch's last frame out to the last frame out) apart from the start-up (from the call to the first batch out: the
    runners' engine load, buffers, CUDA graph capture). ``blocks``: the samples stacked into batches of ``batch``
    and run as a block pipeline (``BlockSource``; one item per batch through every stage and the sink)."""
    from trtkit.pipeline import ArraySource, BlockCallbackSink, BlockSource, CallbackSink, Processing, run_engine

    out_at: dict = {}

    def arrived(frame):
        if frame.index == batch - 1:
            out_at["first_batch"] = time.perf_counter()
        out_at["last"] = time.perf_counter()

    def arrived_block(block):
        if block.index == 0:
            out_at["first_batch"] = time.perf_counter()
        out_at["last"] = time.perf_counter()

    processing = Processing(pre=pre or (lambda sample: (sample, None)))
    if blocks:
        stacked = [np.stack(samples[i : i + batch]) for i in range(0, len(samples) - batch + 1, batch)]
        source, sink = BlockSource(cycled(stacked, count // batch)), BlockCallbackSink(arrived_block)
    else:
        source, sink = ArraySource(cycled(samples, count)), CallbackSink(arrived)
    t0 = time.perf_counter()
    report = run_engine(engine, source, sinks=[sink], processing=processing, pre_workers=1, **runner_args)
    total_s = time.perf_counter() - t0
    first = out_at.get("first_batch")
    steady_s = out_at["last"] - first if first is not None else 0.0
    return {"fps": fps_of(report.frames_out - batch, steady_s), "fps_with_startup": fps_of(report.frames_out, total_s),
            "startup_s": round(first - t0, 3) if first is not None else None, "steady_s": round(steady_s, 3),
            "frames": report.frames_out, "stage": report.stages["infer"].to_json(), "batch": report.batch}


def infer_alone(engine: Path, samples: list, batch: int, min_work_s: float, runner_args: dict, target) -> dict:
    """The inference stage as a user with pre-made batches runs it: a block pipeline (``BlockSource`` of stacked
    batches, each written into a batch ring buffer in one step, sent from there, one sink call per batch),
    measured over at least ``min_work_s`` of steady work (a pilot run of 20 batches sets the frame count of the
    measured runs, whole batches; a measured run shorter than that, after a pilot slow to warm up, is made again
    with the count its own rate gives), with the batches in place in the ring (``fps``: the stage itself), then copied
    in batch by batch (``copying_samples``, at most 250 batches); and the frame pipeline (one item per frame) over
    100 batches (``frame_path``)."""
    in_place = BlockSamplesInto(target, copy_always=False)
    pilot = infer_once(engine, samples, 20 * batch, batch, runner_args, in_place, blocks=True)
    batches = max(20, int(np.ceil(pilot["fps"] * min_work_s / batch)) if pilot["fps"] else 20)
    measured = infer_once(engine, samples, batches * batch, batch, runner_args, in_place, blocks=True)
    if measured["fps"] and measured["steady_s"] < min_work_s:  # the pilot was slow to warm up: again, long enough
        batches = int(np.ceil(measured["fps"] * min_work_s / batch))
        measured = {**infer_once(engine, samples, batches * batch, batch, runner_args, in_place, blocks=True),
                    "first_measured": {k: measured[k] for k in ("fps", "steady_s", "frames")}}
    measured["pilot"] = {k: pilot[k] for k in ("fps", "startup_s", "frames")}
    measured["min_work_s"] = min_work_s
    copying = infer_once(engine, samples, min(batches, 250) * batch, batch, runner_args,  # bounded: copies are slow
                         BlockSamplesInto(target, copy_always=True), blocks=True)
    measured["copying_samples"] = {k: copying[k] for k in ("fps", "startup_s", "steady_s", "frames")}
    frames = infer_once(engine, samples, 100 * batch, batch, runner_args, SampleInto(target, copy_always=False))
    measured["frame_path"] = {k: frames[k] for k in ("fps", "startup_s", "steady_s", "frames")}
    measured["samples"] = ("blocks of a batch (BlockSource), in place in the batch ring (each ring buffer always "
                           "holds the same batch)")
    return measured


def convert_alone(frames: list, count: int) -> dict:
    """Milliseconds a picture of ``frames`` takes to convert from rgb24 to yuv420p on one thread (swscale, what the
    encoder does in its calling thread; converting ahead of it on other threads was slower end to end:
    docs/performance.md, Pipelines)."""
    import av
    from av.video.reformatter import VideoReformatter

    from trtkit.pipeline.video import rgb_frame

    reformatter = VideoReformatter()
    t0 = time.perf_counter()
    for image in cycled(frames, count):
        reformatter.reformat(rgb_frame(av, np.ascontiguousarray(image)), format="yuv420p")
    return {"ms_per_frame": round((time.perf_counter() - t0) / count * 1e3, 3), "frames": count}


def encode_alone(frames: list, count: int, work: Path, codec: str | None = None, in_process: bool = False,
                 thread_type: str = "AUTO", settings: dict | None = None, options: dict | None = None,
                 threads: int = 0, cpu: dict | None = None) -> float:
    """Frames/s of the encoder on ``frames`` through the writer the pipeline's video sink uses (``in_process``: in a
    child process, its start-up excluded); ``settings`` (a dict) gets the encoder's settings as opened; ``options``:
    the encoder's FFmpeg options; ``threads``: its thread count (0: its choice); ``cpu`` (a dict) gets the process's
    CPU milliseconds a frame (the encoder's threads and the calling thread: what the pipeline's ``encode`` stage
    counts as its own, ``cpu_ms_per_frame``) and the cores that kept busy."""
    from trtkit.pipeline.encoder_process import ProcessVideoWriter
    from trtkit.pipeline.video import VideoWriter

    tag = "_".join(f"{k}{v}" for k, v in (options or {}).items())
    path = work / f"encode_alone_{codec or 'default'}_{thread_type}{'_child' if in_process else ''}{tag}_t{threads}.mp4"
    writer = (ProcessVideoWriter(path, fps=30, codec=codec, options=options) if in_process
              else VideoWriter(path, fps=30, codec=codec, thread_type=thread_type, options=options, threads=threads))
    if in_process:
        writer.ready()
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        for image in cycled(frames, count):
            writer.write(image)
    except BaseException:
        writer.discard()
        raise
    if settings is not None and not in_process:
        settings.update(writer.encoder_settings())
    writer.close()
    seconds, cpu_s = time.perf_counter() - t0, time.process_time() - c0
    if cpu is not None and not in_process:
        cpu.update(cpu_ms_per_frame=round(cpu_s / count * 1e3, 3), cores=round(cpu_s / seconds, 3))
    return fps_of(count, seconds)


class GilProbe:
    """A thread that sleeps 0.2 ms in a loop and adds up how late it wakes: while another thread holds the GIL it
    cannot run, so its lateness while some work runs, less its lateness while nothing runs, estimates the time
    that work held the GIL (CPU scheduling adds to both)."""

    NAP_S = 0.0002

    def __init__(self):
        import threading

        self.stop, self.late_s, self.wakes, self.counting = threading.Event(), 0.0, 0, False
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        while not self.stop.is_set():
            t0 = time.perf_counter()
            time.sleep(self.NAP_S)
            late = time.perf_counter() - t0 - self.NAP_S
            if self.counting:
                self.late_s += late
                self.wakes += 1

    def measure(self, fn, calls: int) -> tuple:
        """(seconds of ``calls`` calls of ``fn(i)``, probe lateness in that time, probe wake-ups in it)."""
        self.late_s, self.wakes, self.counting = 0.0, 0, True
        t0 = time.perf_counter()
        for i in range(calls):
            fn(i)
        seconds = time.perf_counter() - t0
        self.counting = False
        return seconds, self.late_s, self.wakes


def gil_part(frames: list, video: Path, target, work: Path, calls: int) -> dict:
    """Each CPU stage's work per frame in one thread next to the probe: ms per frame and GIL-held ms per frame
    (estimated, see GilProbe). decode: PyAV's next frame as RGB; preprocess: the letterbox into a sample; encode:
    the video sink's write (libx264, frame wrapped without a copy); from_ndarray: the copy the writer made before
    (``VideoFrame.from_ndarray`` of a frame), for comparison."""
    import av

    from trtkit.pipeline.preprocess import ImagePreprocess
    from trtkit.pipeline.video import PyAVReader, VideoWriter

    probe = GilProbe()
    probe.thread.start()
    idle_s, idle_late, idle_wakes = probe.measure(lambda i: time.sleep(0.001), 200)
    late_per_wake = idle_late / max(1, idle_wakes)
    pre = ImagePreprocess(target)
    reader = PyAVReader(video)
    decoded = iter(reader)
    writer = VideoWriter(work / "gil_encode.mp4", fps=30)
    parts = {
        "decode": lambda i: next(decoded),
        "preprocess": lambda i: pre(frames[i % len(frames)]),
        "encode": lambda i: writer.write(frames[i % len(frames)]),
        "from_ndarray": lambda i: av.VideoFrame.from_ndarray(frames[i % len(frames)], format="rgb24"),
    }
    result: dict = {"probe_late_ms_per_wake_idle": round(1e3 * late_per_wake, 4), "calls": calls}
    try:
        for name, fn in parts.items():
            fn(0)  # warm: the decoder's and encoder's start
            seconds, late, wakes = probe.measure(fn, calls)
            held = max(0.0, late - wakes * late_per_wake)
            result[name] = {"ms_per_frame": round(1e3 * seconds / calls, 3),
                            "gil_held_ms_per_frame": round(1e3 * held / calls, 3)}
    finally:
        probe.stop.set()
        probe.thread.join()
        reader.close()
        writer.close()
    result["note"] = ("encode's time per frame excludes the frames still in the encoder at the end (frame "
                      "threads); decode includes FFmpeg's own threads")
    return result


def bench_fps(engine: Path, sizes: Sizes, trt, cuda, streams: int, batch: int | None = None,
              side: int | None = None) -> dict:
    from trtkit.bench.measure import BenchSettings, benchmark

    b, s = batch or sizes.max_batch, side or sizes.side
    settings = BenchSettings(shapes={"images": (b, 3, s, s)}, streams=streams, cuda_graph=True,
                             duration_s=0.5 if sizes.fake else 3.0, warmup_ms=50 if sizes.fake else 300,
                             e2e=False)
    result = benchmark(str(engine), settings, trt=trt, cuda=cuda)
    return {"items_per_s": round(result.items_per_s, 2), "streams": streams, "batch": result.batch,
            "data_transfers": True, "cuda_graph": True}


# --- whole pipelines -------------------------------------------------------------------------------------------------

def video_pipeline(engine: Path, video: Path, work: Path, runner_args: dict, sizes: Sizes,
                   decoder: str = "pyav", in_process: bool = False, pre_workers: int | None = None,
                   thread_type: str = "AUTO", switch_interval_s: float | None = None, tag: str = "",
                   device_memory: bool = False, preprocess: str = "auto", options: dict | None = None,
                   decode_threads: int | None = None, gpu_wait: str | None = None,
                   encoder_threads: int = 0) -> dict:
    """``decode → preprocess → infer → encode``; ``in_process``: the encoder in a child process (VideoSink's
    ``in_process``, frames through shared memory; started, and waited for, before the run); ``pre_workers`` (None:
    the sizes'), the encoder's ``thread_type`` and the run's ``switch_interval_s`` as given; ``device_memory``:
    NVDEC frames stay on the GPU and the GPU letterbox preprocesses them (what ``trtkit run`` does by default);
    ``preprocess``: run_engine's (``gpu``: the GPU letterbox for PyAV's host frames too); ``options``: the
    encoder's; ``decode_threads``: PyAV's decoder threads (default the reader's, 0: FFmpeg's choice); ``gpu_wait``:
    run_engine's (how the threads wait for the GPU); ``encoder_threads``: the encoder's thread count (0: its
    choice)."""
    from trtkit.pipeline import VideoSink, VideoSource, run_engine

    source = VideoSource(video, decoder=decoder, device_memory=device_memory, decode_threads=decode_threads)
    out = work / f"video_out_{decoder}{'_device' if device_memory else ''}{'_child' if in_process else ''}{tag}.mp4"
    sink = VideoSink(out, fps=source.fps, in_process=in_process, thread_type=thread_type, options=options,
                     **({"threads": encoder_threads} if encoder_threads else {}))
    if in_process:
        sink.writer.ready()
    report = run_engine(engine, source, sinks=[sink], pre_workers=pre_workers or sizes.pre_workers,
                        switch_interval_s=switch_interval_s, preprocess=preprocess, gpu_wait=gpu_wait,
                        **runner_args)
    return report.to_json()


def held_frames_pipeline(frames: list, count: int, work: Path, tag: str = "") -> dict:
    """The frames the encoder alone encodes (``frames`` cycled up to ``count``), held in memory, through a pipeline
    with no stage but its video sink: what the pipeline's threads and queue cost the encoder, with nothing else
    running beside it."""
    from trtkit.pipeline import ArraySource, Pipeline, VideoSink

    sink = VideoSink(work / f"held_frames{tag}.mp4", fps=30)
    return Pipeline(ArraySource(list(cycled(frames, count))), [], [sink]).run().to_json()


def folder_pipeline(engine: Path, folder: Path, runner_args: dict, sizes: Sizes, preprocess: str = "auto") -> dict:
    from trtkit.pipeline import ImageFolderSource, run_engine

    report = run_engine(engine, ImageFolderSource(folder, workers=sizes.decode_workers),
                        pre_workers=sizes.pre_workers, preprocess=preprocess, **runner_args)
    data = report.to_json()
    return {"images_per_s": round(report.fps, 2), "images": report.frames_out, "decode_workers": sizes.decode_workers,
            "pre_workers": sizes.pre_workers, "stages": data["stages"], "queues": data["queues"],
            "slowest_stage": data["slowest_stage"], "preprocess": data["source"].get("preprocess")}


def memory_run(engine: Path, video: Path, runner_args: dict, sizes: Sizes, cuda) -> dict:
    """cudaMemGetInfo: before, from frame 1000 (or a tenth of the run) on during (about 80 samples, taken by the sink
    every so many frames: as many whatever the speed), and after a pipeline run.

    cudaMemGetInfo counts the whole device, so memory an earlier part still held and let go during this run (it
    happened once: docs/performance.md, Pipelines) would hide a leak of as much in the growth from the first sample
    to the last. Garbage is collected first, and the leak is measured as the largest
    fall of free memory from any sample to a later one (``largest_drop_bytes``), which memory let go elsewhere does
    not offset."""
    import gc

    from trtkit.pipeline import CallbackSink, VideoSource, run_engine

    samples = []
    start_at = min(1000, sizes.leak_frames // 10)
    step = max(1, (sizes.leak_frames - start_at) // 80)

    def sample(frame):
        if frame.index >= start_at and (frame.index - start_at) % step == 0:
            samples.append((frame.index, cuda.mem_get_info()[0]))

    gc.collect()  # decoders and runners of the earlier parts that only a collection frees
    free_before = cuda.mem_get_info()[0]
    report = run_engine(engine, VideoSource(video, decoder="pyav"), sinks=[CallbackSink(sample)],
                        pre_workers=sizes.pre_workers, **runner_args)
    free_after = cuda.mem_get_info()[0]
    during = samples[0][1] - samples[-1][1] if len(samples) >= 2 else None
    drop, highest = None, None
    for _, free in samples:  # the largest fall of free memory from any sample to a later one
        highest = free if highest is None else max(highest, free)
        drop = max(drop or 0, highest - free) if len(samples) >= 2 else None
    # growth during the run needs two samples from the start frame on; a run shorter than the start frame plus a
    # step has fewer, and is judged by the growth from before the run to after it
    return {"frames_in": report.frames_in, "frames_out": report.frames_out, "fps": round(report.fps, 2),
            "samples": len(samples), "first_sample_frame": samples[0][0] if samples else None,
            "last_sample_frame": samples[-1][0] if samples else None, "growth_during_run_bytes": during,
            "largest_drop_bytes": drop, "growth_after_run_bytes": free_before - free_after,
            "free_range_bytes": (max(f for _, f in samples) - min(f for _, f in samples)) if samples else None,
            "leak_measured_by": "largest_drop_bytes" if drop is not None else "growth_after_run_bytes"}


DETECTOR = ROOT / "samples" / "detection" / "model" / "detector.onnx"
DETECTION_RESULTS = ROOT / "benchmarks" / "results" / "detection-h200.json"
DETECTOR_BUILD_FALLBACK_S = 120.0  # used when the detection benchmark's results hold no FP16 build time


def detector_build_estimate_s(results: Path = DETECTION_RESULTS) -> tuple:
    """The detector's FP16 build time on the GPU host as the detection benchmark measured it, and where it came
    from (the fallback when that file or its ``rows.fp16.build_s`` is missing)."""
    try:
        value = json.loads(results.read_text())["rows"]["fp16"]["build_s"]
        return float(value), f"{results.name} rows.fp16.build_s"
    except (OSError, ValueError, KeyError, TypeError):
        return DETECTOR_BUILD_FALLBACK_S, "fallback (no measured build time found)"


def detection_plan(elapsed_s: float, budget_s: float, run_estimate_s: float, results: Path = DETECTION_RESULTS):
    """Whether the optional detection part fits in what is left of ``budget_s``: its estimate is the detector's
    measured build time plus ``run_estimate_s`` (the video pipeline's time on the same video). Returns
    ``(run, note)``; the note gives the figures either way."""
    build_s, origin = detector_build_estimate_s(results)
    need, left = build_s + run_estimate_s, budget_s - elapsed_s
    note = (f"estimate {need:.0f} s (build {build_s:.0f} s from {origin}, run {run_estimate_s:.0f} s), "
            f"{left:.0f} s of the {budget_s:.0f} s budget left")
    return need <= left, ("run: " if need <= left else "skipped: ") + note


def detection_pipeline(video: Path, work: Path, runner_args: dict, sizes: Sizes, trt=None) -> dict:
    """The detection sample's detector (FP16, 320x320, batch 1..32) on the 1080p video with ``--post detection``
    (letterbox, decode + NMS per frame, boxes drawn, H.264 out)."""
    from trtkit.builder.api import build
    from trtkit.builder.config import BuildConfig
    from trtkit.builder.profiles import parse_shapes
    from trtkit.pipeline import VideoSink, VideoSource, run_engine
    from trtkit.pipeline.detect import detection_processing

    engine = work / "detector.engine"
    t0 = time.perf_counter()
    build(str(DETECTOR), BuildConfig(precision="fp16", tactic_sources=TACTICS, profiles=[parse_shapes(
        "images:1x3x320x320,32x3x320x320,32x3x320x320")]), output=engine, isolate=False, trt=trt)
    build_s = time.perf_counter() - t0
    source = VideoSource(video, decoder="pyav")
    report = run_engine(engine, source, sinks=[VideoSink(work / "detections.mp4", fps=source.fps)],
                        processing=detection_processing(), pre_workers=sizes.pre_workers, post_workers=2,
                        **runner_args)
    data = report.to_json()
    return {"build_s": round(build_s, 1), "e2e_fps": data["fps"], "frames_out": data["frames_out"],
            "slowest_stage": data["slowest_stage"], "stages": data["stages"], "gpu": data["gpu"]}


def nvenc_part(frames: list, count: int, work: Path, x264_fps) -> dict:
    """PyAV's h264_nvenc encoder (NVENC) on the same frames, where the driver's encode library loads."""
    try:
        fps = encode_alone(frames, count, work, codec="h264_nvenc")
    except Exception as exc:  # noqa: BLE001 - not available here: say why
        return {"available": False, "reason": f"{type(exc).__name__}: {exc}", "encode_fps": None,
                "libx264_encode_fps": x264_fps}
    return {"available": True, "encode_fps": fps, "libx264_encode_fps": x264_fps,
            "note": "the video pipeline above encodes with libx264; trtkit run --codec h264_nvenc uses NVENC"}


def read_all(reader) -> tuple:
    """``(frames, seconds, session_init_ms, info)`` of one pass over an NVDEC reader, which is then closed."""
    count = 0
    t0 = time.perf_counter()
    for _ in reader:
        count += 1
    seconds = time.perf_counter() - t0
    init_ms, info = reader.session_init_ms(), reader.info()
    reader.close()
    return count, seconds, init_ms, info


def nvdec_part(video: Path, pyav_fps) -> dict:
    from trtkit.errors import DependencyError
    from trtkit.pipeline.video import NvdecReader

    try:
        reader = NvdecReader(video, device_memory=True)
    except DependencyError as exc:
        return {"available": False, "reason": str(exc), "decode_fps": None, "pyav_decode_fps": pyav_fps}
    count, seconds, init_ms, _ = read_all(reader)
    fps = fps_of(count, seconds)
    return {"available": True, "reason": "PyNvVideoCodec loaded and opened the file", "decode_fps": fps,
            "frames": count, "pyav_decode_fps": pyav_fps,
            "speedup": round(fps / pyav_fps, 3) if pyav_fps else None, **_steady(count, seconds, init_ms, pyav_fps),
            "decode_fps_note": "frames kept in device memory (RGB, no copy to the host); the same decode with every "
                               "frame copied to host memory: host_memory.host_one_decoder_fps"}


def nvdec_host_part(video: Path, pyav_fps) -> dict:
    """NVDEC into host memory, as PyAV's frames are: one decoder, every frame converted to a numpy array."""
    from trtkit.pipeline.video import NvdecReader

    reader = NvdecReader(video)
    count = 0
    t0 = time.perf_counter()
    for frame in reader:
        np.ascontiguousarray(frame)
        count += 1
    seconds = time.perf_counter() - t0
    init_ms = reader.session_init_ms()
    reader.close()
    fps = fps_of(count, seconds)
    return {"host_one_decoder_fps": fps, "frames": count,
            "speedup_one_decoder": round(fps / pyav_fps, 3) if pyav_fps else None,
            **_steady(count, seconds, init_ms, pyav_fps),
            "note": "frames in host memory; the decoder's start-up is in the time (decode_fps_steady: without it)"}


NVDEC_COPIES = 4  # the capacity run's clip: the benchmark's video this many times back to back (no re-encoding)
NVDEC_DECODERS = (1, 2, 4)


def repeat_video(video: Path, out: Path, copies: int) -> Path:
    """``copies`` copies of ``video``'s packets back to back in one file, timestamps shifted, nothing re-encoded
    (each copy starts with the keyframe the encoder wrote first): a long clip in well under a second."""
    import av

    with av.open(str(video)) as src, av.open(str(out), "w") as dst:
        stream = src.streams.video[0]
        packets = [p for p in src.demux(stream) if p.size]
        target = dst.add_stream_from_template(stream)
        span = max(p.pts for p in packets) - min(p.pts for p in packets) + (packets[-1].duration or 1)
        for k in range(copies):
            for p in packets:
                q = av.Packet(bytes(p))
                q.pts, q.dts = p.pts + k * span, (None if p.dts is None else p.dts + k * span)
                q.duration, q.time_base, q.stream = p.duration, p.time_base, target
                q.is_keyframe = p.is_keyframe
                dst.mux(q)
    return out


def nvdec_capacity_part(video: Path, work: Path) -> dict:
    """How NVDEC's frames/s grow with a longer clip and more decoders: PyAV and one NVDEC decoder (host memory)
    over a clip of :data:`NVDEC_COPIES` copies of ``video``, then 2 and 4 decoders at once (threads), each seeking
    to the start of its share of the clip. Every frame counted; start-up in the time (``session_init_ms`` says how
    much of it each decoder's session took)."""
    import threading

    from trtkit.pipeline.video import host_array, nvdec_module, session_init_ms

    nvc = nvdec_module()
    clip = repeat_video(video, work / "nvdec_long.mp4", NVDEC_COPIES)
    pyav_fps, _ = decode_alone(clip)
    total = len(nvc.SimpleDecoder(str(clip), use_device_memory=False, output_color_type=nvc.OutputColorType.RGB))

    def decode_share(start: int, count: int, out: dict) -> None:
        decoder = nvc.SimpleDecoder(str(clip), use_device_memory=False, output_color_type=nvc.OutputColorType.RGB)
        if start:
            decoder.seek_to_index(start)
        got = 0
        while got < count:
            batch = decoder.get_batch_frames(min(16, count - got))
            if not batch:
                break
            for frame in batch:
                np.ascontiguousarray(host_array(frame))
            got += len(batch)
        init = session_init_ms(decoder)
        out["frames"], out["init_ms"] = got, None if init is None else round(init, 1)

    result: dict = {"clip": str(clip), "clip_frames": total, "copies": NVDEC_COPIES, "pyav_decode_fps": pyav_fps,
                    "decoders": {}}
    for n in NVDEC_DECODERS:
        bounds = [total * k // n for k in range(n + 1)]
        shares: list = [{} for _ in range(n)]
        threads = [threading.Thread(target=decode_share, args=(a, b - a, out))
                   for a, b, out in zip(bounds, bounds[1:], shares)]
        t0 = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - t0
        frames = sum(share.get("frames", 0) for share in shares)
        fps = fps_of(frames, seconds)
        result["decoders"][str(n)] = {"fps": fps, "frames": frames, "all_frames": frames == total,
                                      "speedup": round(fps / pyav_fps, 3) if pyav_fps else None,
                                      "session_init_ms": [share.get("init_ms") for share in shares]}
    return result


NVDEC_SPLIT_DECODERS = (1, 2, 4)


def nvdec_split_part(clip: Path, pyav_fps) -> dict:
    """trtkit's readers over the capacity run's clip, frames kept in device memory and in order: one
    NvdecReader, then SplitNvdecReader with 2 and 4 decoders (chunks of whole GOPs, 256 frames ahead each)."""
    from trtkit.pipeline.nvdec_split import SplitNvdecReader
    from trtkit.pipeline.video import NvdecReader

    result: dict = {"pyav_decode_fps": pyav_fps, "decoders": {}}
    for n in NVDEC_SPLIT_DECODERS:
        reader = (NvdecReader(clip, device_memory=True) if n == 1
                  else SplitNvdecReader(clip, decoders=n, device_memory=True))
        count, seconds, _, info = read_all(reader)
        fps = fps_of(count, seconds)
        result["decoders"][str(n)] = {"fps": fps, "frames": count, "chunks": info.get("chunks", 1),
                                      "decoders_used": info.get("decoders", 1),
                                      "speedup": round(fps / pyav_fps, 3) if pyav_fps else None}
    return result


# The GPU-bound runs' CNN. At depth 16 (about 245 G multiply-adds an image) the engine alone is barely slower than the
# 4 NVDEC decoders alone on the clip (docs/performance.md, Pipelines), so that run said as much about the decoders
# next to a busy GPU as about the pipeline. Depth 40 keeps the decoders well ahead (`decode_alone_over_bench` in the
# results); depth 16 runs once more beside it (`gpu_bound_near`).
HEAVY = {"side": 640, "width": 256, "depth": 40, "batch": 8}
HEAVY_NEAR = {**HEAVY, "depth": 16}
HEAVY_FAKE = {"side": 32, "width": 8, "depth": 1, "batch": 4}
GPU_BOUND_DECODERS = 4


GPU_BOUND_SETTINGS = ({"runners": 2, "pre_workers": 2}, {"runners": 3, "pre_workers": 2},
                      {"runners": 2, "pre_workers": 4})


def gpu_bound_part(engine: Path, clip: Path, decoders: int, runner_args: dict, bench: dict | None,
                   pre_workers: int = 2) -> dict:
    """The NVDEC path where the GPU is the slowest stage: ``clip`` decoded by ``decoders`` NVDEC decoders into
    device memory, letterboxed there (``pre_workers`` threads), through the heavy CNN (:func:`make_heavy_model`),
    results dropped (no encoder). Whether the pipeline keeps the GPU fed shows here: the GPU's idle time between
    batches, and the end-to-end frames/s against ``trtkit bench`` on the same engine and batch (``bench``)."""
    from trtkit.pipeline import VideoSource, run_engine

    source = VideoSource(clip, decoder="nvdec", device_memory=True, nvdec_decoders=decoders)
    report = run_engine(engine, source, pre_workers=pre_workers, **runner_args)
    data = report.to_json()
    bench_ips = (bench or {}).get("items_per_s")
    return {"e2e_fps": round(report.fps, 2), "frames_in": report.frames_in, "frames_out": report.frames_out,
            "decoders": decoders, "bench_fps": bench_ips, "ratio_to_bench": _ratio(report.fps, bench_ips),
            "slowest_stage_in_pipeline": data["slowest_stage"], "gpu": data["gpu"],
            "idle_between_batches_pct": (data["gpu"] or {}).get("idle_between_batches_pct"),
            "stages": {name: {k: st[k] for k in ("avg_ms", "max_ms", "p99_ms", "busy_pct")}
                       for name, st in data["stages"].items()},
            "preprocess": data["source"].get("preprocess"), "batch": report.batch, "pre_workers": pre_workers,
            "runners": runner_args.get("runners")}


def gpu_bound(run: Run, sizes: Sizes, work: Path, trt, cuda, args, runner_args: dict, clip: Path, decode_fps,
              heavy: dict, settings: tuple, tag: str) -> dict | None:
    """:func:`gpu_bound_part` for each of ``settings`` on a CNN of ``heavy``'s sizes: the run with the least idle GPU,
    the settings tried, and the decoders' frames/s alone on ``clip`` (``decode_fps``) against ``trtkit bench`` on that
    CNN (above 1: the decoders alone are faster than the engine)."""
    name = f"pipeline_heavy_cnn_d{heavy['depth']}"
    engine = run.guard(f"build_heavy{tag}", lambda: build_engine(
        sizes, work, trt, make_heavy_model(heavy["side"], heavy["width"], heavy["depth"]), heavy["side"],
        heavy["batch"], name=name))
    if not engine:
        return None
    bench = run.guard(f"bench_heavy{tag}", lambda: bench_fps(engine, sizes, trt, cuda, args.runners, heavy["batch"],
                                                              heavy["side"]))
    tried = []
    for i, setting in enumerate(settings):  # batches in flight and letterbox threads
        got = run.guard(f"gpu_bound{tag}_{i}", lambda setting=setting: gpu_bound_part(
            engine, clip, GPU_BOUND_DECODERS, {**runner_args, "runners": setting["runners"]}, bench,
            setting["pre_workers"]))
        if got:
            tried.append(got)
    if not tried:
        return None
    best = min(tried, key=lambda t: t["idle_between_batches_pct"] if t["idle_between_batches_pct"] is not None
               else 100.0)
    bench_ips = (bench or {}).get("items_per_s")
    return {**best, "model": {"name": "make_heavy_model", **heavy},
            "decode_alone_fps": decode_fps, "decode_alone_over_bench": _ratio(decode_fps, bench_ips),
            "settings_tried": [{k: t[k] for k in ("runners", "pre_workers", "e2e_fps", "idle_between_batches_pct",
                                                  "ratio_to_bench")} | {"idle_gaps": (t["gpu"] or {}).get("idle_gaps")}
                               for t in tried],
            "note": "NVDEC split over decoders, GPU letterbox, a CNN slow enough that the GPU is the slowest stage, "
                    "no encoder: the GPU's idle time between batches where it is the stage the pipeline waits for"}


def _steady(count: int, seconds: float, init_ms, pyav_fps) -> dict:
    """The decoder's session start-up (PyNvVideoCodec's count) and frames/s without it: what a long video
    approaches. Reported beside the figures with it; the targets use those (the conservative ones)."""
    if init_ms is None or not 0 <= init_ms / 1e3 < seconds:
        return {"session_init_ms": init_ms, "decode_fps_steady": None}
    steady = fps_of(count, seconds - init_ms / 1e3)
    return {"session_init_ms": round(init_ms, 1), "decode_fps_steady": steady,
            "speedup_steady": round(steady / pyav_fps, 3) if pyav_fps else None}


# --- driver ----------------------------------------------------------------------------------------------------------

def install_fakes():
    import cuda.bindings

    from tests.fakes.fake_cuda import FakeCudart
    from tests.fakes.fake_trt import make_fake_trt
    from trtkit.runtime.cuda import Cuda

    trt, rt = make_fake_trt("8.6.0"), FakeCudart()
    sys.modules["tensorrt"] = trt
    sys.modules["cuda.bindings.runtime"] = rt
    cuda.bindings.runtime = rt
    return trt, Cuda(rt)


def cpu_topology(root: Path = Path("/sys")) -> dict:
    """What the encoder and the other stages share: the logical CPUs this process may run on, how many of them share
    a physical core (SMT), and the cgroup's CPU quota (``cpu.max``: ``max`` when there is none); None where the host
    does not say."""
    def read(path: Path):
        try:
            return path.read_text().strip()
        except OSError:
            return None

    siblings = read(root / "devices/system/cpu/cpu0/topology/thread_siblings_list")
    per_core = None
    if siblings:
        per_core = sum(int(b) - int(a) + 1 if "-" in part else 1
                       for part in siblings.split(",") for a, _, b in [part.partition("-")])
    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {"cpus_allowed": allowed, "threads_per_core": per_core, "cgroup_cpu_max": read(root / "fs/cgroup/cpu.max")}


def environment() -> dict:
    import av

    info = {"python": sys.version.split()[0], "av": av.__version__, "cpus": os.cpu_count(), **cpu_topology()}
    try:
        import tensorrt

        info["tensorrt"] = tensorrt.__version__
    except Exception as exc:  # noqa: BLE001
        info["tensorrt"] = f"not importable: {exc}"
    return info


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=".", help="folder for pipeline-h200.json (e.g. $OUT)")
    parser.add_argument("--fake", action="store_true", help="fake TensorRT and CUDA, tiny sizes: a CPU dry run")
    parser.add_argument("--runners", type=int, default=2, help="runners in the pool (batches in flight)")
    parser.add_argument("--encoder-process", action="store_true",
                        help="also the video pipeline with the encoder in a child process (and that encoder alone)")
    parser.add_argument("--skip-variants", default="encoder_slice_threads,switch_interval_1ms",
                        help="video variants not to run, comma-separated ('none': run every one); by default the two "
                             "whose figures the fourth and fifth sessions settled (in git history)")
    parser.add_argument("--pairs", type=int, default=None,
                        help="after the video pipeline (and NVDEC's device path): this many more runs of it, each "
                             "right after the encoder alone is measured again, and the median of their ratios "
                             "(default 3, 1 with --fake; 0: none)")
    parser.add_argument("--ab-rounds", type=int, default=0,
                        help="rounds of the A/B comparison of --ab-variants (each round: the encoder alone, then "
                             "every variant; default 0: none)")
    parser.add_argument("--ab-variants", default=",".join(AB_VARIANTS),
                        help="the A/B comparison's variants, comma-separated (see ab_variant; default "
                             f"{','.join(AB_VARIANTS)})")
    parser.add_argument("--skip-parts", default="",
                        help="parts not to run, comma-separated: " + ", ".join(PARTS) + " (default: none)")
    parser.add_argument("--alone-frames", default=None,
                        help="decoded frames held in memory for the stages alone (the encoder alone cycles them up "
                             "to the video's frame count): a count, or 'all' (the whole video, so the encoder alone "
                             "encodes exactly the pipeline's frames, in order; the default)")
    parser.add_argument("--budget-s", type=float, default=200.0,
                        help="seconds this call may take; the optional detection part runs only if its estimate "
                             "(measured build time + run) fits in what is left")
    args = parser.parse_args(argv)
    args.ab_variants = [name for name in args.ab_variants.split(",") if name]
    args.skip_parts = frozenset(name for name in args.skip_parts.split(",") if name)
    try:
        for name in args.ab_variants:
            ab_variant(name)
        if args.ab_rounds and not args.ab_variants:
            raise ValueError("--ab-rounds needs at least one --ab-variants name")
        if args.skip_parts - set(PARTS):
            raise ValueError(f"--skip-parts {','.join(sorted(args.skip_parts - set(PARTS)))}: not a part; "
                             f"use {', '.join(PARTS)}")
        alone_frames(args.alone_frames, Sizes(args.fake))
    except ValueError as exc:
        parser.error(str(exc))
    sizes = Sizes(args.fake)
    if args.pairs is None:
        args.pairs = 1 if args.fake else 3
    ALONE_KEEP[0] = alone_frames(args.alone_frames, sizes)
    trt = cuda = None
    if args.fake:
        trt, cuda = install_fakes()
    else:
        from trtkit.runtime.cuda import default_cuda

        cuda = default_cuda()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    run = Run(out)
    result = run.result
    result["environment"] = environment()
    result["settings"] = {"fake": args.fake, "runners": args.runners, "max_batch": sizes.max_batch,
                          "input": [3, sizes.side, sizes.side], "video": list(sizes.video),
                          "video_frames": sizes.video_frames, "pre_workers": sizes.pre_workers,
                          "decode_workers": sizes.decode_workers, "cuda_graph": True, "max_wait_ms": 5.0}
    runner_args = {"runners": args.runners, "cuda_graph": True, **({"trt": trt, "cuda": cuda} if args.fake else {})}
    with tempfile.TemporaryDirectory(prefix="trtkit-pipeline-") as tmp:
        work = Path(tmp)
        engine = run.guard("build", lambda: build_engine(sizes, work, trt))
        codec = "mpeg4" if args.fake else "libx264"
        video = run.guard("make_video", lambda: make_video(work / "in.mp4", sizes.video_frames, sizes.video, codec))
        if engine is None or video is None:
            return finish(result, out, args.fake)
        measure_all(run, sizes, engine, video, work, runner_args, trt, cuda, args)
    return finish(result, out, args.fake)


def cores_busy(fn, figures: dict, name: str):
    """``fn()``, with the cores this process kept busy meanwhile (its CPU time, every thread's: FFmpeg's, x264's,
    the pipeline's, over the wall time) in ``figures[name]``: a stage alone that keeps every core busy leaves the
    other stages of a pipeline nothing but its own share."""
    cpu, wall = time.process_time(), time.perf_counter()
    value = fn()
    seconds = time.perf_counter() - wall
    if seconds > 0:
        figures[name] = round((time.process_time() - cpu) / seconds, 2)
    return value


def measure_all(run: Run, sizes: Sizes, engine: Path, video: Path, work: Path, runner_args: dict, trt, cuda,
                args) -> None:
    from trtkit.pipeline.preprocess import ImagePreprocess, image_input
    from trtkit.runtime import TrtRunner

    result = run.result
    cores: dict = {"cpus": os.cpu_count()}
    decoded = cores_busy(lambda: run.guard("decode_alone", lambda: decode_alone(video)), cores, "decode")
    pyav_fps, frames = decoded if decoded else (None, [])
    with TrtRunner(str(engine), **({"trt": trt, "cuda": cuda} if args.fake else {})) as runner:
        target = image_input(runner.input_specs)
    alone = {"decode": pyav_fps}
    if frames:
        count = sizes.video_frames
        alone["preprocess"] = run.guard("preprocess_alone",
                                        lambda: preprocess_alone(target, frames, count, sizes.pre_workers))
        pre = ImagePreprocess(target)
        rows = (args.runners + 1) * sizes.max_batch  # the batch ring's rows (api.sample_ring)
        samples = [pre(frames[i % len(frames)])[0] for i in range(rows)]
        run.store("stages_alone_fps", alone)
        infer = run.guard("infer_alone", lambda: infer_alone(engine, samples, sizes.max_batch, sizes.infer_work_s,
                                                               runner_args, target))
        alone["infer"] = infer["fps"] if infer else None
        run.store("infer_stage", {"fps": alone["infer"], "pipeline_stage": infer})
        encoder: dict = {}
        alone["encode"] = cores_busy(lambda: run.guard("encode_alone", lambda: encode_alone(
            frames, count, work, settings=encoder)), cores, "encode")
        encoder["convert_alone"] = run.guard("convert_alone", lambda: convert_alone(frames, min(count, 120)))
        if len(frames) > EARLIER_ALONE_FRAMES and not args.fake:  # the baseline until 2026-12-02, beside it
            encoder["alone_first_frames_cycled"] = {"frames_held": EARLIER_ALONE_FRAMES, "fps": run.guard(
                "encode_alone_first_frames", lambda: encode_alone(frames[:EARLIER_ALONE_FRAMES], count, work))}
        run.store("encoder", encoder)
        run.store("nvenc", nvenc_part(frames, count, work, alone["encode"]))
        bench = run.guard("bench", lambda: bench_fps(engine, sizes, trt, cuda, args.runners))
        run.store("infer_stage", {"fps": alone["infer"], "bench_fps": bench["items_per_s"] if bench else None,
                                  "ratio": _ratio(alone["infer"], bench["items_per_s"] if bench else None),
                                  "pipeline_stage": infer, "bench": bench})
    e2e = cores_busy(lambda: run.guard("video_pipeline", lambda: video_pipeline(engine, video, work, runner_args,
                                                                             sizes)), cores, "video_pipeline")
    run.store("stages_alone_fps", alone)
    run.store("cores_busy", cores)
    run.store("video", video_result(e2e, alone))
    if frames and run.result.get("video"):
        run.result["video"]["paired"] = paired_runs(
            run, "video", args.pairs, lambda cpu: encode_alone(frames, count, work, cpu=cpu),
            lambda: video_pipeline(engine, video, work, runner_args, sizes, tag="_pair"), alone)
        run.store("video", run.result["video"])
    if frames and args.ab_rounds:
        nvdec_fps = None
        if any(ab_variant(name).get("device_memory") for name in args.ab_variants):
            probe = run.guard("ab_nvdec", lambda: nvdec_part(video, pyav_fps))
            nvdec_fps = (probe or {}).get("decode_fps")
            if not (probe or {}).get("available"):
                args.ab_variants = [n for n in args.ab_variants if not ab_variant(n).get("device_memory")]
                result["notes"]["video_ab"] = f"NVDEC variants left out: {(probe or {}).get('reason')}"
        run.store("video_ab", run.guard("video_ab", lambda: ab_rounds(
            run, args.ab_rounds, args.ab_variants, engine, video, work, runner_args, sizes, frames, count, alone,
            nvdec_fps)))
    if frames:
        skip = frozenset(name for name in args.skip_variants.split(",") if name and name != "none")
        run.store("video_variants", video_variants(run, engine, video, work, runner_args, sizes, frames, count,
                                                   target, alone, skip))
        if "gil" not in args.skip_parts:
            run.store("gil", run.guard("gil", lambda: gil_part(frames, video, target, work,
                                                                     min(sizes.video_frames - 1, 120))))
    if frames and args.encoder_process:
        child_alone = run.guard("encode_alone_child", lambda: encode_alone(frames, count, work, in_process=True))
        child = run.guard("video_pipeline_encoder_process",
                          lambda: video_pipeline(engine, video, work, runner_args, sizes, in_process=True))
        if child:
            run.store("video_encoder_process", {**video_result(child, alone), "encode_alone_fps_child": child_alone,
                                                "note": "VideoSink(in_process=True): libx264 in a child process; "
                                                        "ratio_to_slowest against the stages alone above"})
    folder = None if "folder" in args.skip_parts else run.guard(
        "make_folder", lambda: make_folder(work / "images", sizes.folder_images, sizes.fake))
    if folder:
        run.store("folder", run.guard("folder_pipeline", lambda: folder_pipeline(engine, folder, runner_args, sizes)))
        # the same folder with the letterbox on the CPU (the default letterboxes on the GPU where it can)
        run.store("folder_cpu_preprocess", run.guard("folder_pipeline_cpu_pre", lambda: folder_pipeline(
            engine, folder, runner_args, sizes, preprocess="cpu")))
    nvdec = run.store("nvdec", run.guard("nvdec", lambda: nvdec_part(video, pyav_fps)))
    if nvdec and nvdec["available"]:
        host = None if "nvdec_host" in args.skip_parts else run.guard(
            "nvdec_host", lambda: nvdec_host_part(video, pyav_fps))
        if host:
            nvdec["host_memory"] = host
            if (host["speedup_one_decoder"] or 0) > (nvdec.get("speedup") or 0):
                nvdec["speedup_best"], nvdec["speedup_best_by"] = host["speedup_one_decoder"], "host_memory"
            run.store("nvdec", nvdec)
        capacity = None if "nvdec_capacity" in args.skip_parts else run.guard(
            "nvdec_capacity", lambda: nvdec_capacity_part(video, work))
        if capacity:
            nvdec["capacity"] = capacity  # raw decoders in threads, host memory: what the split reader can reach
            run.store("nvdec", nvdec)
            split = run.guard("nvdec_split", lambda: nvdec_split_part(Path(capacity["clip"]),
                                                                      capacity["pyav_decode_fps"]))
            if split:
                nvdec["split"] = split
                best = max(split["decoders"].items(), key=lambda kv: kv[1]["fps"])
                if (best[1]["speedup"] or 0) > (nvdec.get("speedup_best") or nvdec.get("speedup") or 0):
                    nvdec["speedup_best"] = best[1]["speedup"]
                    nvdec["speedup_best_by"] = (f"split: {best[0]} decoder(s) in device memory on the capacity clip, "
                                                "against PyAV on that clip")
                run.store("nvdec", nvdec)
        clip = Path(capacity["clip"]) if capacity else video
        split_fps = ((nvdec.get("split") or {}).get("decoders", {}).get(str(GPU_BOUND_DECODERS)) or {}).get("fps")
        bound = None if "gpu_bound" in args.skip_parts else gpu_bound(
            run, sizes, work, trt, cuda, args, runner_args, clip, split_fps, HEAVY_FAKE if sizes.fake else HEAVY,
            GPU_BOUND_SETTINGS, "")
        if bound:
            nvdec["gpu_bound"] = bound
            run.store("nvdec", nvdec)
        near = None if "gpu_bound" in args.skip_parts else gpu_bound(
            run, sizes, work, trt, cuda, args, runner_args, clip, split_fps,
            HEAVY_FAKE if sizes.fake else HEAVY_NEAR, GPU_BOUND_SETTINGS[:1], "_near")
        if near:
            nvdec["gpu_bound_near"] = {**near, "note": "the same with a CNN whose `trtkit bench` figure is close to "
                                                        "the decoders' frames/s alone (the seventh session's run)"}
            run.store("nvdec", nvdec)
        with_nvdec = run.guard("video_pipeline_nvdec", lambda: video_pipeline(
            engine, video, work, runner_args, sizes, "nvdec", preprocess="cpu"))
        if with_nvdec:
            nvdec["pipeline"] = {"e2e_fps": with_nvdec["fps"], "frames_out": with_nvdec["frames_out"],
                                 "gpu": with_nvdec["gpu"], "stages": with_nvdec["stages"],
                                 "note": "NVDEC frames copied to host memory for the CPU preprocessing"}
            nvdec["gpu_idle_between_batches_pct"] = (with_nvdec["gpu"] or {}).get("idle_between_batches_pct")
            run.store("nvdec", nvdec)
        on_gpu = run.guard("video_pipeline_nvdec_device", lambda: video_pipeline(
            engine, video, work, runner_args, sizes, "nvdec", device_memory=True))
        if on_gpu:
            # the stages alone: NVDEC's decode into device memory instead of PyAV's; the others as measured above
            device_alone = {**alone, "decode": nvdec.get("decode_fps")}
            device_alone.pop("preprocess", None)  # the CPU letterbox does not run in this pipeline
            run.store("video_nvdec_device", {**video_result(on_gpu, device_alone),
                                             "preprocess": on_gpu["source"].get("preprocess"),
                                             "note": "trtkit run's default where NVDEC loads: frames decoded into "
                                                     "device memory, letterboxed there into the batch ring, "
                                                     "pictures copied to the host for the encoder"})
            nvdec["gpu_idle_between_batches_pct_device"] = (on_gpu["gpu"] or {}).get("idle_between_batches_pct")
            run.store("nvdec", nvdec)
            if frames:
                run.result["video_nvdec_device"]["paired"] = paired_runs(
                    run, "video_nvdec_device", args.pairs, lambda cpu: encode_alone(frames, count, work, cpu=cpu),
                    lambda: video_pipeline(engine, video, work, runner_args, sizes, "nvdec", device_memory=True,
                                           tag="_pair"), device_alone)
                run.store("video_nvdec_device", run.result["video_nvdec_device"])
    leak_video = None if "memory" in args.skip_parts else run.guard(
        "make_leak_video", lambda: make_video(work / "leak.mp4", sizes.leak_frames, sizes.leak_video, "mpeg4"))
    if leak_video:
        memory = run.store("memory_run", run.guard("memory_run",
                                                   lambda: memory_run(engine, leak_video, runner_args, sizes, cuda)))
        run.store("leak_bytes_device", memory[memory["leak_measured_by"]] if memory else None)
    skipped = sorted(args.skip_parts)
    if skipped:
        result["notes"]["skipped_parts"] = f"not run in this call (--skip-parts): {', '.join(skipped)}"
    if "detection" in args.skip_parts:
        result["notes"]["detection"] = "not run: --skip-parts detection"
        return
    if sizes.fake:
        result["notes"]["detection"] = "not run with --fake (the detector on onnx's reference evaluator is too slow)"
        return
    fits, note = detection_plan(time.perf_counter() - STARTED, args.budget_s, result["timings_s"].get(
        "video_pipeline", 0.0))
    result["notes"]["detection"] = note
    run.checkpoint()
    if fits:
        run.store("detection", run.guard("detection", lambda: detection_pipeline(video, work, runner_args, sizes)))


# what --skip-parts may leave out
PARTS = ("gil", "folder", "nvdec_host", "nvdec_capacity", "gpu_bound", "memory", "detection")
AB_VARIANTS = ("base", "gpu_wait_block", "nvdec_device", "nvdec_device_gpu_wait_block")


def ab_variant(name: str) -> dict:
    """The settings of an A/B variant by name: ``base`` (the video pipeline as ``video`` runs it), ``gpu_wait_block``
    (its threads sleep while they wait for the GPU), ``nvdec_device`` (NVDEC into device memory, as
    ``video_nvdec_device``), ``nvdec_device_gpu_wait_block``, ``encoder_threads_N`` (libx264 on N threads; the
    encoder alone measured again with N), ``held_frames`` (the frames the encoder alone encodes, held in memory, through
    a pipeline whose only stage is the video sink: the pipeline's hand-off to the encoder, nothing else beside it).
    Raises ValueError for any other name."""
    import re

    settings: dict = {}
    rest = name
    if rest.startswith("nvdec_device"):
        settings.update(decoder="nvdec", device_memory=True)
        rest = rest[len("nvdec_device"):].lstrip("_")
    elif rest.startswith("base"):
        rest = rest[len("base"):].lstrip("_")
    if rest == "gpu_wait_block":
        settings["gpu_wait"] = "block"
    elif (match := re.fullmatch(r"encoder_threads_(\d+)", rest)):
        settings["encoder_threads"] = int(match.group(1))
    elif rest == "held_frames" and not settings:
        settings["held_frames"] = True
    elif rest:
        raise ValueError(f"A/B variant '{name}' is not known; use base, gpu_wait_block, nvdec_device, "
                         "nvdec_device_gpu_wait_block, [nvdec_device_]encoder_threads_N or held_frames")
    return settings


def ab_rounds(run: Run, rounds: int, names: list, engine: Path, video: Path, work: Path, runner_args: dict,
              sizes: Sizes, frames: list, count: int, alone: dict, nvdec_fps) -> dict:
    """``rounds`` rounds of the video pipeline in each variant of ``names``, each round opened by the encoder alone,
    the variants' order turned by one every round (so none always runs first after the encoder), each run against
    that round's encoder (a variant with its own encoder threads: the encoder alone again with them, just before).
    Per run: the ratio to the slowest stage alone, frames/s end to end, the cores the process kept busy, the
    encoder's ms a frame; per variant the medians. The host's speed drifts within a call (docs/performance.md,
    Pipelines): variants are compared round by round, not against a figure taken once."""
    import statistics

    settings = {name: ab_variant(name) for name in names}
    runs: dict = {name: [] for name in names}
    for r in range(max(0, rounds)):
        encoder_cpu: dict = {}
        encoded = run.guard(f"ab{r}_encode_alone", lambda c=encoder_cpu: encode_alone(frames, count, work, cpu=c))
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            options = settings[name]
            threads = options.get("encoder_threads", 0)
            encoder = encoded
            if threads:
                encoder = run.guard(f"ab{r}_{name}_encode_alone",
                                    lambda t=threads: encode_alone(frames, count, work, threads=t))
            cores: dict = {}

            def pipeline(name=name, options=options):
                if options.get("held_frames"):
                    return held_frames_pipeline(frames, count, work, tag=f"_ab_{name}")
                return video_pipeline(engine, video, work, runner_args, sizes, tag=f"_ab_{name}", **options)

            e2e = cores_busy(lambda key=f"ab{r}_{name}", fn=pipeline: run.guard(key, fn), cores, "pipeline")
            if not (e2e and encoder):
                continue
            stage_alone = {**alone, "encode": encoder}
            if options.get("device_memory"):
                stage_alone = {k: v for k, v in {**stage_alone, "decode": nvdec_fps}.items() if k != "preprocess"}
            if options.get("held_frames"):  # no stage but the encoder ran
                stage_alone = {"encode": encoder}
            result = video_result(e2e, stage_alone)
            coder = result["stages"].get("encode") or {}
            runs[name].append({"round": r, "encode_alone_fps": encoder, "e2e_fps": result["e2e_fps"],
                               "ratio": result["ratio_to_slowest"], "slowest_stage": result["slowest_stage"],
                               "steady_ratio": result["steady_ratio_to_slowest"], "first_out_s": result["first_out_s"],
                               "cores_busy": cores.get("pipeline"), "encode_avg_ms": coder.get("avg_ms"),
                               "encode_busy_pct": coder.get("busy_pct"), "frames_out": result["frames_out"],
                               "sink_wait_s": result["sink_wait_s"], "sink_close_s": result["sink_close_s"],
                               "elapsed_s": result["elapsed_s"],
                               "gpu_wait": (e2e.get("source") or {}).get("gpu_wait"),
                               "encode_cpu_ms_alone": encoder_cpu.get("cpu_ms_per_frame") if not threads else None,
                               "encode_cpu_ms_pipeline": result["encode_cpu_ms_per_frame"],
                               "cores_by_stage": cores_by_stage(result)})
        run.store("video_ab", {"rounds": r + 1, "variants": settings, "runs": runs})

    def median(name: str, key: str):
        values = [x[key] for x in runs[name] if x.get(key) is not None]
        return round(statistics.median(values), 3) if values else None

    summary = {name: {key: median(name, key) for key in ("ratio", "e2e_fps", "cores_busy", "encode_avg_ms",
                                                         "steady_ratio", "encode_cpu_ms_alone",
                                                         "encode_cpu_ms_pipeline")} | {"runs": len(runs[name])}
               for name in names}
    return {"rounds": rounds, "variants": settings, "runs": runs, "summary": summary,
            "note": "each round: the encoder alone, then every variant (order turned each round), each against "
                    "that round's encoder"}


VARIANT_PRE_WORKERS = 2
VARIANT_ENCODER_OPTIONS = {"preset": "veryfast"}
VARIANT_SWITCH_INTERVAL_S = 0.001
VARIANT_DECODE_THREADS = (0, 2)  # 0: FFmpeg's choice (a thread per core and one more); the reader's default is 4


def video_variants(run: Run, engine: Path, video: Path, work: Path, runner_args: dict, sizes: Sizes, frames: list,
                   count: int, target, alone: dict, skip: frozenset = frozenset()) -> dict:
    """The video pipeline with one setting changed at a time, each against the stages alone measured with that
    setting (the other stages' figures from above):

    - ``encoder_slice_threads``: libx264 as PyAV opens it by default, SLICE threads (encode alone again with them);
    - ``switch_interval_1ms``: Python's switch interval 1 ms while the pipeline runs;
    - ``pre_workers_2``: the CPU letterbox on two workers (preprocess alone again with two);
    - ``cpu_preprocess``: PyAV's frames letterboxed on the CPU (``trtkit run``'s default letterboxes them on the GPU
      where the kernels load);
    - ``encoder_veryfast``: libx264's veryfast preset (encode alone again with it);
    - ``decode_threads_N``: PyAV's decoder on N FFmpeg threads instead of the reader's default (0: FFmpeg's choice, a
      thread per core; decode alone again with N, and the cores the process kept busy in both).

    ``skip``: the names of variants not to run."""
    variants: dict = {}
    if "encoder_slice_threads" not in skip:
        slice_alone = run.guard("encode_alone_slice", lambda: encode_alone(frames, count, work, thread_type="SLICE"))
        e2e = run.guard("video_pipeline_slice", lambda: video_pipeline(engine, video, work, runner_args, sizes,
                                                                       thread_type="SLICE", tag="_slice"))
        if e2e:
            variants["encoder_slice_threads"] = {**video_result(e2e, {**alone, "encode": slice_alone}),
                                                 "encode_alone_fps": slice_alone}
    if "switch_interval_1ms" not in skip:
        e2e = run.guard("video_pipeline_switch", lambda: video_pipeline(
            engine, video, work, runner_args, sizes, switch_interval_s=VARIANT_SWITCH_INTERVAL_S, tag="_switch"))
        if e2e:
            variants["switch_interval_1ms"] = {**video_result(e2e, alone),
                                               "switch_interval_s": VARIANT_SWITCH_INTERVAL_S}
    workers = VARIANT_PRE_WORKERS
    if f"pre_workers_{workers}" not in skip:  # the CPU letterbox on two workers
        pre_alone = run.guard("preprocess_alone_2", lambda: preprocess_alone(target, frames, count, workers))
        e2e = run.guard("video_pipeline_pre2", lambda: video_pipeline(engine, video, work, runner_args, sizes,
                                                                      pre_workers=workers, preprocess="cpu",
                                                                      tag="_pre2"))
        if e2e:
            variants[f"pre_workers_{workers}"] = {**video_result(e2e, {**alone, "preprocess": pre_alone}),
                                                  "preprocess_alone_fps": pre_alone, "pre_workers": workers}
    e2e = None if "cpu_preprocess" in skip else run.guard("video_pipeline_cpu_pre", lambda: video_pipeline(
        engine, video, work, runner_args, sizes, preprocess="cpu", tag="_cpupre"))
    if e2e:
        # PyAV decodes, the CPU letterboxes (run_engine's auto letterboxes on the GPU where it can)
        variants["cpu_preprocess"] = video_result(e2e, alone)
    options = VARIANT_ENCODER_OPTIONS
    fast = "encoder_veryfast" not in skip
    fast_alone = fast and run.guard("encode_alone_veryfast", lambda: encode_alone(frames, count, work, options=options))
    e2e = fast and run.guard("video_pipeline_veryfast", lambda: video_pipeline(engine, video, work, runner_args, sizes,
                                                                               options=options, tag="_veryfast"))
    if e2e:
        # libx264's veryfast preset (the encoder alone measured again with it): a lighter encoder leaves the other
        # stages more of the cores
        variants["encoder_veryfast"] = {**video_result(e2e, {**alone, "encode": fast_alone}),
                                        "encode_alone_fps": fast_alone, "options": options}
    for threads in (t for t in VARIANT_DECODE_THREADS if f"decode_threads_{t}" not in skip):
        variant = decode_threads_variant(run, engine, video, work, runner_args, sizes, alone, threads)
        if variant:
            variants[f"decode_threads_{threads}"] = variant
    return variants


def decode_threads_variant(run: Run, engine: Path, video: Path, work: Path, runner_args: dict, sizes: Sizes,
                           alone: dict, threads: int) -> dict | None:
    """The video pipeline with FFmpeg's decoder on ``threads`` threads (0: FFmpeg's choice) instead of the reader's
    default, against the stages alone with decode measured again that way; the cores kept busy in both."""
    cores: dict = {}
    decoded = cores_busy(lambda: run.guard(f"decode_alone_threads{threads}", lambda: decode_alone(video, threads)),
                         cores, "decode")
    decode_fps = decoded[0] if decoded else None
    e2e = cores_busy(lambda: run.guard(f"video_pipeline_threads{threads}", lambda: video_pipeline(
        engine, video, work, runner_args, sizes, decode_threads=threads, tag=f"_dt{threads}")), cores, "video_pipeline")
    if not e2e:
        return None
    return {**video_result(e2e, {**alone, "decode": decode_fps}), "decode_alone_fps": decode_fps,
            "decode_threads": threads, "cores_busy": cores}


def _ratio(a, b):
    return round(a / b, 3) if a and b else None


def paired_runs(run: Run, tag: str, pairs: int, encode, pipeline, alone: dict) -> dict:
    """``pairs`` more runs of a video pipeline (``pipeline()``), each right after the encoder alone is measured again
    (``encode()``), each against the stages alone with that encoder figure. The host's own speed drifts within a
    call and between calls (libx264 alone read 112.9 and 86.8 fps a day apart; docs/performance.md, Pipelines),
    so the encoder measured once, at the start, can sit well above or below what it could do when the pipeline
    ran; the median of the paired ratios is the figure the target is read from.

    The encoder is measured once more after the last run, so every run also has the encoder alone right after it
    (the next run's before): ``ratio_bracketed`` is against the mean of the two, a diagnosis beside the target's
    ratio (drift within a run's neighbourhood cancels out of it)."""
    runs = []
    for i in range(max(0, int(pairs))):
        cpu: dict = {}
        encoded = run.guard(f"{tag}_pair{i}_encode_alone", lambda cpu=cpu: encode(cpu=cpu))
        if runs and encoded:
            runs[-1]["encode_after_fps"] = encoded
        e2e = run.guard(f"{tag}_pair{i}_pipeline", pipeline)
        result = video_result(e2e, {**alone, "encode": encoded}) if encoded and e2e else None
        if result:
            encoder = result["stages"].get("encode") or {}
            runs.append({"encode_alone_fps": encoded, "e2e_fps": result["e2e_fps"],
                         "slowest_stage": result["slowest_stage"], "ratio": result["ratio_to_slowest"],
                         "first_out_s": result["first_out_s"], "steady_ratio": result["steady_ratio_to_slowest"],
                         "encode_avg_ms": encoder.get("avg_ms"), "encode_busy_pct": encoder.get("busy_pct"),
                         "sink_wait_s": result["sink_wait_s"], "sink_close_s": result["sink_close_s"],
                         "elapsed_s": result["elapsed_s"], "frames_out": result["frames_out"],
                         "encode_cpu_ms_alone": cpu.get("cpu_ms_per_frame"),
                         "encode_cpu_ms_pipeline": result["encode_cpu_ms_per_frame"],
                         "cores_by_stage": cores_by_stage(result)})
    import statistics

    if runs:
        last = run.guard(f"{tag}_pairs_encode_after", lambda: encode(cpu=None))
        if last:
            runs[-1]["encode_after_fps"] = last
    for r in runs:
        after = r.get("encode_after_fps")
        r["ratio_bracketed"] = _ratio(r["e2e_fps"], (r["encode_alone_fps"] + after) / 2) if after else None
    ratios = sorted(r["ratio"] for r in runs if r["ratio"])
    bracketed = sorted(r["ratio_bracketed"] for r in runs if r["ratio_bracketed"])
    return {"runs": runs, "ratio_median": round(statistics.median(ratios), 3) if ratios else None, "ratios": ratios,
            "ratio_bracketed_median": round(statistics.median(bracketed), 3) if bracketed else None,
            "note": "each run right after the encoder alone was measured again, against it (ratio, the target's); "
                    "ratio_bracketed: against the mean of the encoder alone before and after it"}


def cores_by_stage(result: dict) -> dict | None:
    """``{stage: cores}`` of a pipeline result's per-thread CPU (and ``process``: the whole process's)."""
    cpu = result.get("cpu")
    if not cpu:
        return None
    return {**{name: s.get("cores") for name, s in cpu["stages"].items()}, "process": cpu.get("process_cores")}


def _paired_or_single(result: dict):
    """The median of the paired ratios where there are any, else the single run's ratio."""
    return (result.get("paired") or {}).get("ratio_median") or result.get("ratio_to_slowest")


def video_result(e2e: dict | None, alone: dict) -> dict | None:
    """The pipeline's figures against the slowest of the stages alone that ran in it (the CPU letterbox alone
    does not count where the GPU letterboxed the frames)."""
    if e2e is None:
        return None
    where = (e2e.get("source") or {}).get("preprocess")
    on_gpu = (where or {}).get("on") == "gpu"
    timed = {k: v for k, v in alone.items() if v and not (on_gpu and k == "preprocess")}
    slowest = min(timed, key=timed.get) if timed else None
    stages = {name: {k: s[k] for k in ("avg_ms", "min_ms", "max_ms", "p99_ms", "busy_pct", "fps_alone")}
              for name, s in e2e["stages"].items()}
    return {"e2e_fps": e2e["fps"], "slowest_stage": slowest, "slowest_stage_fps": timed.get(slowest),
            "ratio_to_slowest": _ratio(e2e["fps"], timed.get(slowest)),
            # a diagnosis, not the target: the rate once the first frames are out, against the same stage alone
            "first_out_s": e2e.get("first_out_s"), "steady_fps": e2e.get("steady_fps"),
            "steady_ratio_to_slowest": _ratio(e2e.get("steady_fps"), timed.get(slowest)),
            # the rest of the sink's time: waiting for late frames, and the encoder's flush at the end
            "sink_wait_s": e2e.get("sink_wait_s"), "sink_close_s": e2e.get("sink_close_s"),
            "elapsed_s": e2e.get("elapsed_s"), "frames_in": e2e["frames_in"],
            "frames_out": e2e["frames_out"], "stages": stages, "queues": e2e["queues"],
            "skipped": e2e["skipped"], "slowest_stage_in_pipeline": e2e["slowest_stage"], "gpu": e2e["gpu"],
            "preprocess": where, "cpu": e2e.get("cpu"),
            # the encoder's CPU a frame inside the pipeline (its calling thread and libx264's threads), to set
            # against encode_alone's: more means the encoder works harder there, the same means it waits more
            "encode_cpu_ms_per_frame": stage_cpu_ms(e2e, "encode")}


def stage_cpu_ms(e2e: dict, stage: str):
    """CPU milliseconds a frame of one stage's threads (and the threads its libraries started) in a pipeline's
    report; None where the report has no per-thread CPU."""
    used = (((e2e.get("cpu") or {}).get("stages") or {}).get(stage) or {}).get("cpu_s")
    frames = e2e.get("frames_out") or 0
    return round(used / frames * 1e3, 3) if used is not None and frames else None


def targets(result: dict) -> dict:
    video, infer, nvdec = result.get("video") or {}, result.get("infer_stage") or {}, result.get("nvdec") or {}
    memory, on_gpu = result.get("memory_run") or {}, result.get("video_nvdec_device") or {}
    cpu_pre = (result.get("video_variants") or {}).get("cpu_preprocess") or {}
    return {
        # the median of the paired runs (each against the encoder measured just before it) where they ran
        "e2e_fps_ge_0.9x_slowest_stage": _met(_paired_or_single(video), lambda r: r >= 0.9),
        # trtkit run's default path where NVDEC loads (frames and preprocessing on the GPU)
        "e2e_fps_ge_0.9x_slowest_stage_nvdec_device": _met(_paired_or_single(on_gpu), lambda r: r >= 0.9)
        if on_gpu
        else "not run",
        # PyAV's frames, the letterbox on the GPU
        "e2e_fps_ge_0.9x_slowest_stage_cpu_preprocess": _met(cpu_pre.get("ratio_to_slowest"), lambda r: r >= 0.9)
        if cpu_pre
        else "not run",
        "infer_stage_ge_0.9x_bench": _met(infer.get("ratio"), lambda r: r >= 0.9),
        "nvdec_decode_ge_3x_pyav": _met(nvdec.get("speedup_best", nvdec.get("speedup")), lambda r: r >= 3.0)
        if nvdec.get("available")
        else "not available",
        "nvdec_gpu_idle_between_batches_lt_10pct": _met(nvdec.get("gpu_idle_between_batches_pct"),
                                                        lambda p: p < 10.0) if nvdec.get("available")
        else "not available",
        # the same, where the GPU is the slowest stage (the heavy CNN, no encoder)
        "nvdec_gpu_idle_between_batches_lt_10pct_gpu_bound": _met(
            (nvdec.get("gpu_bound") or {}).get("idle_between_batches_pct"), lambda p: p < 10.0)
        if nvdec.get("gpu_bound")
        else "not run",
        "zero_device_growth_10k_frames": _met(result.get("leak_bytes_device"), lambda b: b <= 0),
        "frames_in_eq_out": all(
            d.get("frames_in") == d.get("frames_out") for d in (video, memory, on_gpu, cpu_pre) if d
        ),
    }


def _met(value, test):
    return None if value is None else bool(test(value))


def finish(result: dict, out: Path, fake: bool) -> int:
    result["targets"] = targets(result)
    result["complete"] = True
    result["elapsed_s"] = round(time.perf_counter() - STARTED, 1)
    text = json.dumps(result, indent=2, sort_keys=True, default=str) + "\n"
    (out / "pipeline-h200.json").write_text(text)
    if not fake:
        (ROOT / "benchmarks" / "results" / "pipeline-h200.json").write_text(text)
    log(f"wrote {out / 'pipeline-h200.json'}; targets: {json.dumps(result['targets'])}")
    return 0 if not result["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
