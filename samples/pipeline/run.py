#!/usr/bin/env python3
"""Streaming pipeline: a generated test video → engine (batched, runners in flight) → annotated video + JSON lines.

    python samples/pipeline/run.py [--model model.onnx --size 640 --post detection] [--video in.mp4] [--workdir out/]

Without --video it makes a short test video with PyAV (nothing is downloaded); without --model it uses trtkit's
built-in sample CNN. ``--post detection`` decodes, NMSes and draws boxes with ``trtkit.detection`` (a YOLO-style
model). Needs TensorRT and an NVIDIA GPU; elsewhere it says what is missing and exits 1.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="ONNX model with one NCHW image input (default: the built-in sample CNN)")
    p.add_argument("--input-name", default="images")
    p.add_argument("--size", type=int, default=64, help="input height/width of the engine")
    p.add_argument("--video", help="input video (default: a generated 320x240 test video)")
    p.add_argument("--frames", type=int, default=300, help="frames of the generated video")
    p.add_argument("--post", choices=("none", "detection"), default="none")
    p.add_argument("--workdir", default="pipeline-out")
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
    import onnx

    from trtkit import BuildConfig, build_engine, parse_shapes
    from trtkit.sample_model import make_sample_cnn

    model_path = Path(args.model) if args.model else work / "sample_cnn.onnx"
    if not args.model:
        onnx.save(make_sample_cnn(), str(model_path))
    size = f"3x{args.size}x{args.size}"
    config = BuildConfig(precision="fp16", profiles=[parse_shapes(f"{args.input_name}:1x{size},8x{size},16x{size}")],
                         timing_cache=str(work / "timing.cache"),
                         tactic_sources=tuple(args.tactic_sources.split(",")) if args.tactic_sources else None)
    build_engine(model_path, config, output=work / "model.engine")
    return work / "model.engine"


def stream(args, work: Path, engine: Path) -> int:
    from trtkit.pipeline import JsonLinesSink, Processing, VideoSink, VideoSource, run_engine
    from trtkit.pipeline.video import write_pattern_video

    video = Path(args.video) if args.video else write_pattern_video(work / "test.mp4", args.frames, (320, 240))
    source = VideoSource(video)
    if args.post == "detection":
        from trtkit.pipeline.detect import detection_processing

        processing = detection_processing()
    else:
        processing = Processing()
    sinks = [VideoSink(work / "out.mp4", fps=source.fps), JsonLinesSink(work / "results.jsonl")]
    report = run_engine(engine, source, sinks=sinks, processing=processing, cuda_graph=True)
    for name, stage in report.stages.items():
        print(f"{name:>12}: avg {stage.avg_ms:.3f} ms, p99 {stage.p99_ms:.3f} ms, busy {stage.busy_pct:.0f}%")
    slowest = report.slowest_stage()
    print(f"{report.frames_in} frames in, {report.frames_out} out: {report.fps:.1f} FPS "
          f"(slowest stage {slowest.name}); wrote {work / 'out.mp4'} and {work / 'results.jsonl'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
