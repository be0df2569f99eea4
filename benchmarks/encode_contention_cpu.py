"""Why the encoder slows down inside a video pipeline, on a CPU: libx264 (PyAV) per-frame time alone and next to
other work, and ``decode → preprocess → encode`` end to end with the encoder in the pipeline's process (a thread)
or in a child process (``VideoSink(in_process=True)``, frames through shared memory).

    python3 benchmarks/encode_contention_cpu.py [--frames 240] [--size 640x360] [--pre-workers 2] [--repeat 2]

Prints one JSON object: ``encode_alone_ms`` (a thread, a child process), ``encode_next_to_ms`` (with a pure-Python
thread, with a busy process: GIL contention versus a core taken), and per variant of ``pipeline``: end-to-end fps,
the encoder stage's figures, the ratio to the slowest stage alone; the best of ``--repeat`` runs; load averages.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def encode_ms(frames: list, out: Path, in_process: bool) -> float:
    """Per-frame encode time over ``frames``, from the first frame to the closed file (child start-up excluded)."""
    from trtkit.pipeline.encoder_process import ProcessVideoWriter
    from trtkit.pipeline.video import VideoWriter

    writer = ProcessVideoWriter(out, fps=30) if in_process else VideoWriter(out, fps=30)
    if in_process:
        writer.ready()
    t0 = time.perf_counter()
    for image in frames:
        writer.write(image)
    writer.close()
    return 1e3 * (time.perf_counter() - t0) / len(frames)


def next_to(kind: str, frames: list, out: Path) -> float:
    """``encode_ms`` in a thread of this process while a pure-Python thread (``python``) or a busy child process
    (``process``) runs."""
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            sum(range(1000))

    other = threading.Thread(target=spin) if kind == "python" else None
    proc = None
    if other is not None:
        other.start()
    else:
        proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        time.sleep(0.2)
    try:
        return encode_ms(frames, out, in_process=False)
    finally:
        stop.set()
        if other is not None:
            other.join()
        if proc is not None:
            proc.kill()
            proc.wait()


def pipeline(video: Path, out: Path, pre_workers: int, in_process: bool) -> dict:
    from trtkit.pipeline import ImagePreprocess, Pipeline, Stage, VideoSink, VideoSource
    from trtkit.pipeline.preprocess import ImageInput

    pre = ImagePreprocess(ImageInput("images", 3, 224, 224, "float32", 1, 32))

    def preprocess(frame):
        frame.sample, frame.meta = pre(frame.image)

    source = VideoSource(video, decoder="pyav")
    sink = VideoSink(out, fps=source.fps, in_process=in_process)
    if in_process:
        sink.writer.ready()
    report = Pipeline(source, [Stage("preprocess", preprocess, pre_workers)], [sink]).run()
    encode = report.stages["encode"].to_json()
    return {"e2e_fps": round(report.fps, 2), "frames_out": report.frames_out,
            "encode": {k: encode[k] for k in ("avg_ms", "p99_ms", "busy_pct")},
            "stages_avg_ms": {k: round(v.to_json()["avg_ms"] or 0.0, 3) for k, v in report.stages.items()}}


def stages_alone(video: Path, frames: list, pre_workers: int) -> dict:
    from trtkit.pipeline import ArraySource, ImagePreprocess, Pipeline, Stage
    from trtkit.pipeline.preprocess import ImageInput
    from trtkit.pipeline.video import PyAVReader

    reader = PyAVReader(video)
    t0 = time.perf_counter()
    count = sum(1 for _ in reader)
    decode = count / (time.perf_counter() - t0)
    reader.close()
    pre = ImagePreprocess(ImageInput("images", 3, 224, 224, "float32", 1, 32))
    report = Pipeline(ArraySource(frames), [Stage("preprocess", lambda f: pre(f.image), pre_workers)]).run()
    return {"decode": round(decode, 2), "preprocess": round(report.fps, 2)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--frames", type=int, default=240)
    parser.add_argument("--size", default="640x360")
    parser.add_argument("--pre-workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    from trtkit.pipeline.video import PyAVReader, write_pattern_video

    width, height = (int(v) for v in args.size.split("x"))
    result: dict = {"load_average": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count(),
                    "frames": args.frames, "size": args.size, "pre_workers": args.pre_workers}
    with tempfile.TemporaryDirectory(prefix="trtkit-encode-") as tmp:
        work = Path(tmp)
        video = write_pattern_video(work / "in.mp4", args.frames, (width, height), 30, "libx264")
        reader = PyAVReader(video)
        frames = list(reader)
        reader.close()
        best = lambda fn: min(fn() for _ in range(args.repeat))  # noqa: E731
        alone = {"thread": best(lambda: encode_ms(frames, work / "a.mp4", False)),
                 "process": best(lambda: encode_ms(frames, work / "b.mp4", True))}
        result["encode_alone_ms"] = {k: round(v, 2) for k, v in alone.items()}
        result["encode_next_to_ms"] = {k: round(best(lambda k=k: next_to(k, frames, work / "c.mp4")), 2)
                                       for k in ("python", "process")}
        fps_alone = {**stages_alone(video, frames, args.pre_workers), "encode": round(1e3 / alone["thread"], 2)}
        result["stages_alone_fps"] = fps_alone
        slowest = min(fps_alone.values())
        for key, in_process in (("encode_in_a_thread", False), ("encode_in_a_child_process", True)):
            runs = [pipeline(video, work / f"{key}.mp4", args.pre_workers, in_process) for _ in range(args.repeat)]
            run = max(runs, key=lambda r: r["e2e_fps"])
            run["ratio_to_slowest_alone"] = round(run["e2e_fps"] / slowest, 3)
            result.setdefault("pipeline", {})[key] = run
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
