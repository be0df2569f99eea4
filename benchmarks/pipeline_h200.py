#!/usr/bin/env python3
"""Streaming pipelines on one GPU, in one call: each stage alone, the whole pipeline, the image folder mode, the
inference stage against ``trtkit bench``, NVDEC against PyAV, device memory over 10 000 frames.

1. Engine: a small image CNN made here with onnx.helper (four strided 3x3 convolutions, global pooling, a linear
   classifier; input ``images`` N x 3 x 224 x 224, N 1..32), built by trtkit in FP16 with TensorRT's own tactic
   sources (the GPU bundle stubs cuBLAS/cuDNN).
2. Test videos made with PyAV: 1080p H.264 (libx264) for the video pipeline and the decoders, and a 10 000-frame
   320x240 MPEG-4 video for the memory run.
3. Video: decode (PyAV), preprocess (the CPU letterbox to 224 on the pipeline's threads), infer (pre-made samples
   through the pipeline's batched stage) and encode (PyAV, libx264) each measured alone, on the video's frames
   decoded once and held in memory; then ``decode → preprocess → infer → encode`` as ``run_engine`` runs it by
   default (the GPU letterbox where its kernels load: the CPU letterbox alone then does not count among the stages
   alone), and ``video_cpu_preprocess`` with the CPU letterbox. Target: end-to-end FPS >= 0.9 x the slowest stage's.
   ``video.paired`` (``--pairs N``): the pipeline N more times, each right after the encoder alone is measured again
   (the host's speed drifts within a call), the target reading the median of these ratios.
4. Folder: JPEG images (640x480) through ``decode → preprocess → infer`` (images/s), GPU and CPU letterbox.
5. Infer stage vs ``trtkit.bench`` (same engine, batch, CUDA graphs, copies included): target >= 0.9x. The samples
   sit in the stage's pinned batch ring (written once: the stage itself), measured over at least 2.5 s of steady
   work (a pilot run sets the frame count); its start-up (engine load, buffers, graph capture) is reported apart.
6. NVENC (PyAV's h264_nvenc, where the driver's encoder loads): encode frames/s next to libx264's.
   NVDEC (PyNvVideoCodec, where it loads): one decoder into device memory vs PyAV on the 1080p file;
   ``nvdec.split``: SplitNvdecReader with 1, 2 and 4 decoders on the video four times over, against PyAV on that
   clip; ``video_nvdec_device``: the video pipeline as ``trtkit run`` runs it where NVDEC loads (frames and the
   letterbox on the GPU), paired as above; ``nvdec.gpu_bound``: 4 decoders, the GPU letterbox and a CNN slow enough
   that the GPU is the slowest stage, no encoder: the GPU's idle time between batches (CUDA events around every
   batch) and the frames/s against ``trtkit bench``.
7. Device memory: cudaMemGetInfo sampled during a 10 000-frame pipeline run (from frame 1000 to the end) and
   before/after it. Target: 0 bytes of growth; frames in = frames out.
8. If time is left: the detection sample's detector (FP16, 320x320) on the 1080p video with the detection
   postprocessing and drawing, only when its estimate (the detector's build time measured by the detection
   benchmark + the video pipeline's time) fits in what is left of ``--budget-s``.

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
import statistics
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
            text = json.dumps(dict(self.result, complete=False), indent=2, sort_keys=True, default=str) + "\n"
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
    from tests.pipeline.media import write_pattern_video

    return write_pattern_video(path, frames, size, 30, codec)


def make_folder(folder: Path, count: int, fake: bool) -> Path:
    from PIL import Image

    from tests.pipeline.media import frame_picture

    folder.mkdir(parents=True, exist_ok=True)
    width, height = (80, 60) if fake else (640, 480)
    for i in range(count):
        Image.fromarray(frame_picture(i, width, height)).save(folder / f"img_{i:05d}.jpg", quality=90)
    return folder


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


# --- stages alone ----------------------------------------------------------------------------------------------------

def fps_of(frames: int, seconds: float) -> float:
    return round(frames / seconds, 2) if seconds > 0 else 0.0


def _ratio(a, b):
    return round(a / b, 3) if a and b else None


def cycled(items: list, count: int):
    return itertools.islice(itertools.cycle(items), count)


def decode_alone(video: Path) -> tuple:
    """PyAV decode of every frame: fps, and the frames (kept for the other stages alone)."""
    from trtkit.pipeline.video import PyAVReader

    reader = PyAVReader(video)
    t0 = time.perf_counter()
    kept = list(reader)
    seconds = time.perf_counter() - t0
    reader.close()
    return fps_of(len(kept), seconds), kept


def preprocess_alone(engine_target, frames: list, count: int, workers: int) -> float:
    """The pipeline's CPU letterbox stage with its workers, fed from memory, into nothing."""
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
    measured on its own (batching, transfers in place, compute); with True every frame is copied in."""

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


def infer_once(engine: Path, samples: list, count: int, batch: int, runner_args: dict, pre=None) -> dict:
    """``count`` pre-made samples (whole batches of ``batch``) through the pipeline's batched inference stage (one
    preprocess worker passes them on, through ``pre``): the steady rate (the batches after the first, from the first
    batch's last frame out to the last frame out) apart from the start-up (from the call to the first batch out: the
    runners' engine load, buffers, CUDA graph capture)."""
    from trtkit.pipeline import ArraySource, CallbackSink, Processing, run_engine

    out_at: dict = {}

    def arrived(frame):
        if frame.index == batch - 1:
            out_at["first_batch"] = time.perf_counter()
        out_at["last"] = time.perf_counter()

    processing = Processing(pre=pre or (lambda sample: (sample, None)))
    t0 = time.perf_counter()
    report = run_engine(engine, ArraySource(cycled(samples, count)), sinks=[CallbackSink(arrived)],
                        processing=processing, pre_workers=1, **runner_args)
    total_s = time.perf_counter() - t0
    first = out_at.get("first_batch")
    steady_s = out_at["last"] - first if first is not None else 0.0
    return {"fps": fps_of(report.frames_out - batch, steady_s), "fps_with_startup": fps_of(report.frames_out, total_s),
            "startup_s": round(first - t0, 3) if first is not None else None, "steady_s": round(steady_s, 3),
            "frames": report.frames_out, "stage": report.stages["infer"].to_json(), "batch": report.batch}


def infer_alone(engine: Path, samples: list, batch: int, min_work_s: float, runner_args: dict, target) -> dict:
    """The inference stage on samples in place in its batch ring, measured over at least ``min_work_s`` of steady
    work: a pilot run of 20 batches sets the frame count of the measured run (whole batches)."""
    in_place = SampleInto(target, copy_always=False)
    pilot = infer_once(engine, samples, 20 * batch, batch, runner_args, in_place)
    batches = max(20, int(np.ceil(pilot["fps"] * min_work_s / batch)) if pilot["fps"] else 20)
    measured = infer_once(engine, samples, batches * batch, batch, runner_args, in_place)
    measured["pilot"] = {k: pilot[k] for k in ("fps", "startup_s", "frames")}
    measured["min_work_s"] = min_work_s
    return measured


def encode_alone(frames: list, count: int, work: Path, codec: str | None = None) -> float:
    """Frames/s of the encoder on ``frames`` (cycled up to ``count``) through the writer the video sink uses."""
    from trtkit.pipeline.video import VideoWriter

    writer = VideoWriter(work / f"encode_alone_{codec or 'default'}.mp4", fps=30, codec=codec)
    t0 = time.perf_counter()
    try:
        for image in cycled(frames, count):
            writer.write(image)
    except BaseException:
        writer.discard()
        raise
    writer.close()
    return fps_of(count, time.perf_counter() - t0)


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

def video_pipeline(engine: Path, video: Path, work: Path, runner_args: dict, sizes: Sizes, decoder: str = "pyav",
                   device_memory: bool = False, preprocess: str = "auto", tag: str = "") -> dict:
    """``decode → preprocess → infer → encode``; ``device_memory``: NVDEC frames stay on the GPU and the GPU
    letterbox preprocesses them (what ``trtkit run`` does where NVDEC loads); ``preprocess``: run_engine's."""
    from trtkit.pipeline import VideoSink, VideoSource, run_engine

    source = VideoSource(video, decoder=decoder, device_memory=device_memory)
    sink = VideoSink(work / f"video_out_{decoder}{tag}.mp4", fps=source.fps)
    report = run_engine(engine, source, sinks=[sink], pre_workers=sizes.pre_workers, preprocess=preprocess,
                        **runner_args)
    return report.to_json()


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
            "ratio_to_slowest": _ratio(e2e["fps"], timed.get(slowest)), "first_out_s": e2e.get("first_out_s"),
            "steady_fps": e2e.get("steady_fps"), "elapsed_s": e2e.get("elapsed_s"), "frames_in": e2e["frames_in"],
            "frames_out": e2e["frames_out"], "stages": stages, "queues": e2e["queues"], "skipped": e2e["skipped"],
            "slowest_stage_in_pipeline": e2e["slowest_stage"], "gpu": e2e["gpu"], "preprocess": where,
            "cpu": e2e.get("cpu")}


def paired_runs(run: Run, tag: str, pairs: int, encode, pipeline, alone: dict) -> dict:
    """``pairs`` more runs of a video pipeline (``pipeline()``), each right after the encoder alone is measured again
    (``encode()``) and against the stages alone with that encoder figure: the host's own speed drifts within a call,
    so an encoder measured once, at the start, can sit well above or below what it could do when the pipeline ran.
    The median of the paired ratios is the figure the target is read from."""
    runs = []
    for i in range(max(0, int(pairs))):
        encoded = run.guard(f"{tag}_pair{i}_encode_alone", encode)
        result = video_result(run.guard(f"{tag}_pair{i}_pipeline", pipeline), {**alone, "encode": encoded})
        if encoded and result:
            runs.append({"encode_alone_fps": encoded, "e2e_fps": result["e2e_fps"],
                         "slowest_stage": result["slowest_stage"], "ratio": result["ratio_to_slowest"],
                         "frames_out": result["frames_out"]})
    ratios = sorted(r["ratio"] for r in runs if r["ratio"])
    return {"runs": runs, "ratios": ratios, "ratio_median": round(statistics.median(ratios), 3) if ratios else None}


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
                        processing=detection_processing(), pre_workers=sizes.pre_workers, **runner_args)
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
    return {"available": True, "encode_fps": fps, "libx264_encode_fps": x264_fps}


def read_all(reader) -> tuple:
    """``(frames, seconds, info)`` of one pass over an NVDEC reader, which is then closed."""
    t0 = time.perf_counter()
    count = sum(1 for _ in reader)
    seconds, info = time.perf_counter() - t0, reader.info()
    reader.close()
    return count, seconds, info


def nvdec_part(video: Path, pyav_fps) -> dict:
    """One NVDEC decoder into device memory (RGB, no copy to the host) against PyAV on the same file."""
    from trtkit.errors import DependencyError
    from trtkit.pipeline.video import NvdecReader

    try:
        reader = NvdecReader(video, device_memory=True)
    except DependencyError as exc:
        return {"available": False, "reason": str(exc), "decode_fps": None, "pyav_decode_fps": pyav_fps}
    count, seconds, _ = read_all(reader)
    fps = fps_of(count, seconds)
    return {"available": True, "reason": "PyNvVideoCodec loaded and opened the file", "decode_fps": fps,
            "frames": count, "pyav_decode_fps": pyav_fps, "speedup": _ratio(fps, pyav_fps)}


NVDEC_COPIES = 4  # the split run's clip: the benchmark's video this many times back to back (no re-encoding)
NVDEC_SPLIT_DECODERS = (1, 2, 4)


def nvdec_split_part(clip: Path) -> dict:
    """trtkit's readers over ``clip``, frames kept in device memory and in order: one NvdecReader, then
    SplitNvdecReader with 2 and 4 decoders (chunks of whole GOPs, 256 frames ahead each), against PyAV on it."""
    from trtkit.pipeline.nvdec_split import SplitNvdecReader
    from trtkit.pipeline.video import NvdecReader

    pyav_fps, _ = decode_alone(clip)
    result: dict = {"clip": str(clip), "copies": NVDEC_COPIES, "pyav_decode_fps": pyav_fps, "decoders": {}}
    for n in NVDEC_SPLIT_DECODERS:
        reader = (NvdecReader(clip, device_memory=True) if n == 1
                  else SplitNvdecReader(clip, decoders=n, device_memory=True))
        count, seconds, info = read_all(reader)
        fps = fps_of(count, seconds)
        result["decoders"][str(n)] = {"fps": fps, "frames": count, "chunks": info.get("chunks", 1),
                                      "decoders_used": info.get("decoders", 1), "speedup": _ratio(fps, pyav_fps)}
    return result


# The GPU-bound run's CNN: at depth 40 (about 600 G multiply-adds an image) the 4 NVDEC decoders alone stay well
# ahead of the engine alone (``decode_alone_over_bench`` in the results).
HEAVY = {"side": 640, "width": 256, "depth": 40, "batch": 8}
HEAVY_FAKE = {"side": 32, "width": 8, "depth": 1, "batch": 4}
GPU_BOUND_DECODERS = 4
GPU_BOUND_SETTINGS = ({"runners": 2, "pre_workers": 2}, {"runners": 3, "pre_workers": 2},
                      {"runners": 2, "pre_workers": 4})


def gpu_bound_part(engine: Path, clip: Path, decoders: int, runner_args: dict, bench: dict | None,
                   pre_workers: int = 2) -> dict:
    """The NVDEC path where the GPU is the slowest stage: ``clip`` decoded by ``decoders`` NVDEC decoders into
    device memory, letterboxed there (``pre_workers`` threads), through the heavy CNN (:func:`make_heavy_model`),
    results dropped (no encoder): the GPU's idle time between batches, and the end-to-end frames/s against
    ``trtkit bench`` on the same engine and batch (``bench``)."""
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
              heavy: dict, settings: tuple) -> dict | None:
    """:func:`gpu_bound_part` for each of ``settings`` on a CNN of ``heavy``'s sizes: the run with the least idle GPU,
    the settings tried, and the decoders' frames/s alone on ``clip`` (``decode_fps``) against ``trtkit bench`` on that
    CNN (above 1: the decoders alone are faster than the engine)."""
    engine = run.guard("build_heavy", lambda: build_engine(
        sizes, work, trt, make_heavy_model(heavy["side"], heavy["width"], heavy["depth"]), heavy["side"],
        heavy["batch"], name=f"pipeline_heavy_cnn_d{heavy['depth']}"))
    if not engine:
        return None
    bench = run.guard("bench_heavy", lambda: bench_fps(engine, sizes, trt, cuda, args.runners, heavy["batch"],
                                                         heavy["side"]))
    tried = []
    for i, setting in enumerate(settings):  # batches in flight and letterbox threads
        got = run.guard(f"gpu_bound_{i}", lambda setting=setting: gpu_bound_part(
            engine, clip, GPU_BOUND_DECODERS, {**runner_args, "runners": setting["runners"]}, bench,
            setting["pre_workers"]))
        if got:
            tried.append(got)
    if not tried:
        return None
    best = min(tried, key=lambda t: t["idle_between_batches_pct"] if t["idle_between_batches_pct"] is not None
               else 100.0)
    return {**best, "model": {"name": "make_heavy_model", **heavy}, "decode_alone_fps": decode_fps,
            "decode_alone_over_bench": _ratio(decode_fps, (bench or {}).get("items_per_s")),
            "settings_tried": [{k: t[k] for k in ("runners", "pre_workers", "e2e_fps", "idle_between_batches_pct",
                                                  "ratio_to_bench")} for t in tried]}


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


def environment() -> dict:
    import av

    info = {"python": sys.version.split()[0], "av": av.__version__, "cpus": os.cpu_count()}
    try:
        import tensorrt

        info["tensorrt"] = tensorrt.__version__
    except Exception as exc:  # noqa: BLE001
        info["tensorrt"] = f"not importable: {exc}"
    return info


PARTS = ("folder", "nvdec_split", "gpu_bound", "memory", "detection")  # what --skip-parts may leave out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=".", help="folder for pipeline-h200.json (e.g. $OUT)")
    parser.add_argument("--fake", action="store_true", help="fake TensorRT and CUDA, tiny sizes: a CPU dry run")
    parser.add_argument("--runners", type=int, default=2, help="runners in the pool (batches in flight)")
    parser.add_argument("--pairs", type=int, default=None,
                        help="after the video pipeline (and NVDEC's device path): this many more runs of it, each "
                             "right after the encoder alone is measured again (default 3, 1 with --fake; 0: none)")
    parser.add_argument("--skip-parts", default="",
                        help="parts not to run, comma-separated: " + ", ".join(PARTS) + " (default: none)")
    parser.add_argument("--budget-s", type=float, default=200.0,
                        help="seconds this call may take; the optional detection part runs only if its estimate "
                             "(measured build time + run) fits in what is left")
    args = parser.parse_args(argv)
    args.skip_parts = frozenset(name for name in args.skip_parts.split(",") if name)
    if args.skip_parts - set(PARTS):
        parser.error(f"--skip-parts {','.join(sorted(args.skip_parts - set(PARTS)))}: not a part; "
                     f"use {', '.join(PARTS)}")
    sizes = Sizes(args.fake)
    if args.pairs is None:
        args.pairs = 1 if args.fake else 3
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
        if engine is not None and video is not None:
            measure_all(run, sizes, engine, video, work, runner_args, trt, cuda, args)
    return finish(result, out, args.fake)


def measure_all(run: Run, sizes: Sizes, engine: Path, video: Path, work: Path, runner_args: dict, trt, cuda,
                args) -> None:
    alone, frames = stages_alone(run, sizes, engine, video, work, runner_args, trt, cuda, args)
    pipelines = {"video": {}, "video_cpu_preprocess": {"preprocess": "cpu", "tag": "_cpupre"}}
    for key, options in pipelines.items():
        e2e = run.guard(key, lambda options=options: video_pipeline(engine, video, work, runner_args, sizes,
                                                                    **options))
        run.store(key, video_result(e2e, alone))
    if frames and run.result.get("video"):
        run.result["video"]["paired"] = paired_runs(
            run, "video", args.pairs, lambda: encode_alone(frames, sizes.video_frames, work),
            lambda: video_pipeline(engine, video, work, runner_args, sizes, tag="_pair"), alone)
        run.store("video", run.result["video"])
    folder = None if "folder" in args.skip_parts else run.guard(
        "make_folder", lambda: make_folder(work / "images", sizes.folder_images, sizes.fake))
    if folder:
        for key, where in (("folder", "auto"), ("folder_cpu_preprocess", "cpu")):
            run.store(key, run.guard(key, lambda where=where: folder_pipeline(engine, folder, runner_args, sizes,
                                                                               where)))
    nvdec = run.store("nvdec", run.guard("nvdec", lambda: nvdec_part(video, alone.get("decode"))))
    if nvdec and nvdec["available"]:
        measure_nvdec(run, sizes, engine, video, work, runner_args, trt, cuda, args, alone, frames, nvdec)
    leak_video = None if "memory" in args.skip_parts else run.guard(
        "make_leak_video", lambda: make_video(work / "leak.mp4", sizes.leak_frames, sizes.leak_video, "mpeg4"))
    if leak_video:
        memory = run.store("memory_run", run.guard("memory_run",
                                                   lambda: memory_run(engine, leak_video, runner_args, sizes, cuda)))
        run.store("leak_bytes_device", memory[memory["leak_measured_by"]] if memory else None)
    if args.skip_parts:
        skipped = ", ".join(sorted(args.skip_parts))
        run.result["notes"]["skipped_parts"] = f"not run in this call (--skip-parts): {skipped}"
    detection(run, sizes, video, work, runner_args, args)


def stages_alone(run: Run, sizes: Sizes, engine: Path, video: Path, work: Path, runner_args: dict, trt, cuda,
                 args) -> tuple:
    """Decode, the CPU letterbox, infer and encode each alone (``stages_alone_fps``), the inference stage against
    ``trtkit bench`` (``infer_stage``) and NVENC; returns the figures and the decoded frames."""
    from trtkit.pipeline.preprocess import ImagePreprocess, image_input
    from trtkit.runtime import TrtRunner

    decoded = run.guard("decode_alone", lambda: decode_alone(video))
    pyav_fps, frames = decoded if decoded else (None, [])
    alone = {"decode": pyav_fps}
    if not frames:
        return run.store("stages_alone_fps", alone), frames
    with TrtRunner(str(engine), **({"trt": trt, "cuda": cuda} if args.fake else {})) as runner:
        target = image_input(runner.input_specs)
    count = sizes.video_frames
    alone["preprocess"] = run.guard("preprocess_alone", lambda: preprocess_alone(target, frames, count,
                                                                                 sizes.pre_workers))
    pre = ImagePreprocess(target)
    rows = (args.runners + 1) * sizes.max_batch  # the batch ring's rows (api.sample_ring)
    samples = [pre(frames[i % len(frames)])[0] for i in range(rows)]
    infer = run.guard("infer_alone", lambda: infer_alone(engine, samples, sizes.max_batch, sizes.infer_work_s,
                                                           runner_args, target))
    alone["infer"] = infer["fps"] if infer else None
    alone["encode"] = run.guard("encode_alone", lambda: encode_alone(frames, count, work))
    run.store("stages_alone_fps", alone)
    run.store("nvenc", nvenc_part(frames, count, work, alone["encode"]))
    bench = run.guard("bench", lambda: bench_fps(engine, sizes, trt, cuda, args.runners))
    bench_ips = bench["items_per_s"] if bench else None
    run.store("infer_stage", {"fps": alone["infer"], "bench_fps": bench_ips, "ratio": _ratio(alone["infer"], bench_ips),
                              "pipeline_stage": infer, "bench": bench})
    return alone, frames


def measure_nvdec(run: Run, sizes: Sizes, engine: Path, video: Path, work: Path, runner_args: dict, trt, cuda, args,
                  alone: dict, frames: list, nvdec: dict) -> None:
    """Where NVDEC loads: the split reader, the GPU-bound run and the video pipeline on NVDEC's device path."""
    clip = video
    if "nvdec_split" not in args.skip_parts:
        clip = run.guard("make_clip", lambda: repeat_video(video, work / "nvdec_long.mp4", NVDEC_COPIES)) or video
        split = run.guard("nvdec_split", lambda: nvdec_split_part(clip))
        if split:
            nvdec["split"] = split
            run.store("nvdec", nvdec)
    split_fps = ((nvdec.get("split") or {}).get("decoders", {}).get(str(GPU_BOUND_DECODERS)) or {}).get("fps")
    bound = None if "gpu_bound" in args.skip_parts else gpu_bound(
        run, sizes, work, trt, cuda, args, runner_args, clip, split_fps, HEAVY_FAKE if sizes.fake else HEAVY,
        GPU_BOUND_SETTINGS)
    if bound:
        nvdec["gpu_bound"] = bound
        run.store("nvdec", nvdec)
    on_gpu = run.guard("video_nvdec_device", lambda: video_pipeline(
        engine, video, work, runner_args, sizes, "nvdec", device_memory=True))
    # the stages alone: NVDEC's decode into device memory instead of PyAV's, no CPU letterbox
    device_alone = {k: v for k, v in {**alone, "decode": nvdec.get("decode_fps")}.items() if k != "preprocess"}
    result = run.store("video_nvdec_device", video_result(on_gpu, device_alone))
    if result and frames:
        result["paired"] = paired_runs(
            run, "video_nvdec_device", args.pairs, lambda: encode_alone(frames, sizes.video_frames, work),
            lambda: video_pipeline(engine, video, work, runner_args, sizes, "nvdec", device_memory=True,
                                   tag="_pair"), device_alone)
        run.store("video_nvdec_device", result)


def detection(run: Run, sizes: Sizes, video: Path, work: Path, runner_args: dict, args) -> None:
    """The detection part, where it fits in what is left of the budget (``notes.detection`` says either way)."""
    notes = run.result["notes"]
    if "detection" in args.skip_parts:
        notes["detection"] = "not run: --skip-parts detection"
        return
    if sizes.fake:
        notes["detection"] = "not run with --fake (the detector on onnx's reference evaluator is too slow)"
        return
    fits, notes["detection"] = detection_plan(time.perf_counter() - STARTED, args.budget_s,
                                              run.result["timings_s"].get("video", 0.0))
    run.checkpoint()
    if fits:
        run.store("detection", run.guard("detection", lambda: detection_pipeline(video, work, runner_args, sizes)))


def _paired_or_single(result: dict):
    """The median of the paired ratios where there are any, else the single run's ratio."""
    return (result.get("paired") or {}).get("ratio_median") or result.get("ratio_to_slowest")


def _met(value, test):
    return None if value is None else bool(test(value))


def targets(result: dict) -> dict:
    video, infer, nvdec = result.get("video") or {}, result.get("infer_stage") or {}, result.get("nvdec") or {}
    memory, on_gpu = result.get("memory_run") or {}, result.get("video_nvdec_device") or {}
    cpu_pre = result.get("video_cpu_preprocess") or {}
    speedups = [nvdec.get("speedup")] + [d.get("speedup") for d in ((nvdec.get("split") or {}).get("decoders") or {})
                                         .values()]
    speedup = max((s for s in speedups if s), default=None)
    return {
        # the median of the paired runs (each against the encoder measured just before it) where they ran
        "e2e_fps_ge_0.9x_slowest_stage": _met(_paired_or_single(video), lambda r: r >= 0.9),
        # trtkit run's default path where NVDEC loads (frames and preprocessing on the GPU)
        "e2e_fps_ge_0.9x_slowest_stage_nvdec_device": _met(_paired_or_single(on_gpu), lambda r: r >= 0.9)
        if on_gpu else "not run",
        # PyAV's frames letterboxed on the CPU
        "e2e_fps_ge_0.9x_slowest_stage_cpu_preprocess": _met(cpu_pre.get("ratio_to_slowest"), lambda r: r >= 0.9)
        if cpu_pre else "not run",
        "infer_stage_ge_0.9x_bench": _met(infer.get("ratio"), lambda r: r >= 0.9),
        "nvdec_decode_ge_3x_pyav": _met(speedup, lambda r: r >= 3.0) if nvdec.get("available") else "not available",
        # where the GPU is the slowest stage (the heavy CNN, no encoder)
        "nvdec_gpu_idle_between_batches_lt_10pct_gpu_bound": _met(
            (nvdec.get("gpu_bound") or {}).get("idle_between_batches_pct"), lambda p: p < 10.0)
        if nvdec.get("gpu_bound") else "not run",
        "zero_device_growth_10k_frames": _met(result.get("leak_bytes_device"), lambda b: b <= 0),
        "frames_in_eq_out": all(d.get("frames_in") == d.get("frames_out") for d in (video, memory, on_gpu, cpu_pre)
                                if d),
    }


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
