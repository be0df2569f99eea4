#!/usr/bin/env python3
"""Streaming pipeline: the detection sample's detector on a generated test video → annotated video + JSON lines.

    python samples/pipeline/run.py [--model samples/detection/model/detector.onnx] [--video in.mp4] [--workdir out/]

Without --video it makes a short test video of moving shapes with PyAV and pillow (nothing is downloaded). The
default model is the detector of ``samples/detection`` (eight shape classes, 320x320); ``--post none`` runs any
image model and saves its raw outputs. Needs TensorRT and an NVIDIA GPU; elsewhere it says what is missing and
exits 1.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DETECTOR = ROOT / "samples" / "detection" / "model" / "detector.onnx"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=str(DETECTOR), help="ONNX model with one NCHW image input")
    p.add_argument("--input-name", default="images")
    p.add_argument("--size", type=int, default=320, help="input height/width of the engine")
    p.add_argument("--video", help="input video (default: a generated 640x360 video of moving shapes)")
    p.add_argument("--frames", type=int, default=150, help="frames of the generated video")
    p.add_argument("--post", choices=("detection", "none"), default="detection")
    p.add_argument("--workdir", default="pipeline-out")
    p.add_argument("--preprocess", choices=("auto", "gpu", "cpu"), default="auto",
                   help="where frames are letterboxed (auto: on the GPU for NVDEC's frames, else the CPU)")
    p.add_argument("--tactic-sources", help="e.g. EDGE_MASK_CONVOLUTIONS,JIT_CONVOLUTIONS")
    args = p.parse_args(argv)

    from trtkit import TrtkitError
    from trtkit.demo import missing_prerequisite

    missing = missing_prerequisite()
    if missing:
        print(f"the pipeline sample needs {missing}", file=sys.stderr)
        return 1
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    try:
        engine = build(args, work)
        return stream(args, work, engine)
    except TrtkitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def build(args, work: Path) -> Path:
    import trtkit
    from trtkit import BuildConfig, parse_shapes

    size = f"3x{args.size}x{args.size}"
    config = BuildConfig(precision="fp16", profiles=[parse_shapes(f"{args.input_name}:1x{size},8x{size},16x{size}")],
                         timing_cache=str(work / "timing.cache"),
                         tactic_sources=tuple(args.tactic_sources.split(",")) if args.tactic_sources else None)
    trtkit.build(args.model, config, output=work / "model.engine")
    return work / "model.engine"


def shapes_video(path: Path, frames: int, size=(640, 360), codec: str = "mpeg4") -> Path:
    """A video of a few filled shapes (the detector's classes) gliding over a gray background."""
    import av
    import numpy as np
    from PIL import Image, ImageDraw

    width, height = size
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=30)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for i in range(frames):
            image = Image.new("RGB", size, (96, 96, 96))
            pen = ImageDraw.Draw(image)
            x = 40 + (i * 3) % (width - 200)
            pen.ellipse([x, 60, x + 110, 150], fill=(230, 60, 40))
            pen.rectangle([width - x - 130, 190, width - x - 20, 300], fill=(40, 200, 90))
            pen.polygon([(x + 150, 320), (x + 210, 200), (x + 270, 320)], fill=(40, 90, 230))
            for packet in stream.encode(av.VideoFrame.from_ndarray(np.asarray(image), format="rgb24")):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return path


def stream(args, work: Path, engine: Path) -> int:
    from trtkit.pipeline import JsonLinesSink, Processing, VideoSink, VideoSource, run_engine

    video = Path(args.video) if args.video else shapes_video(work / "shapes.mp4", args.frames)
    source = VideoSource(video, device_memory=args.preprocess != "cpu")  # NVDEC's frames stay on the GPU
    processing = Processing()
    if args.post == "detection":
        from trtkit.pipeline.detect import detection_processing

        names = Path(args.model).with_name("classes.txt")
        processing = detection_processing(class_names=names.read_text().split() if names.is_file() else None)
    sinks = [VideoSink(work / "out.mp4", fps=source.fps), JsonLinesSink(work / "results.jsonl")]
    report = run_engine(engine, source, sinks=sinks, processing=processing, preprocess=args.preprocess,
                        cuda_graph=True)
    for name, stage in report.stages.items():
        print(f"{name:>12}: avg {stage.avg_ms:.3f} ms, p99 {stage.p99_ms:.3f} ms, busy {stage.busy_pct:.0f}%")
    slowest = report.slowest_stage()
    print(f"{report.frames_in} frames in, {report.frames_out} out: {report.fps:.1f} FPS "
          f"(slowest stage {slowest.name if slowest else '-'}); wrote {work / 'out.mp4'} and "
          f"{work / 'results.jsonl'}")
    where = report.source["preprocess"]
    print(f"decoder: {report.source.get('decoder')}; preprocessing on the {where['on'].upper()} ({where['reason']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
