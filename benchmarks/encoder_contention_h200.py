"""What slows libx264 inside a video pipeline: the encoder alone, bracketed, against the encoder beside each part of
the pipeline's other work, on the GPU host, in one call.

``python3 benchmarks/encoder_contention_h200.py --out $OUT`` writes ``encoder-contention-h200.json``.

The video pipeline's end-to-end rate sits below the encoder measured alone, and the host's own speed drifts within a
call by about as much (docs/performance.md, Pipelines). Here each measurement of the encoder beside
some other work is bracketed: the encoder alone right before it and right after it, and the ratio is against the
mean of the two. Beside it, paced to the encoder's own rate alone (what the pipeline feeds it):

- ``pipeline_pyav``: the video pipeline without its encoder (PyAV decode, the GPU letterbox, the engine, a sink
  that takes the pictures), in a thread of this process, as ``trtkit run`` runs it;
- ``pipeline_nvdec``: the same with NVDEC decoding into device memory (pictures copied down for the sink);
- ``decoder_thread``: PyAV decoding alone, in a thread;
- ``decoder_process``: PyAV decoding alone, in a child process (no GIL shared).

If the encoder beside the pipeline without its encoder is as slow as inside the pipeline, the loss is the other
stages' work on the machine (cores, caches, memory, the GIL); if not, it is in how the pipeline feeds the encoder.
``--fake``: fake TensorRT and CUDA, tiny sizes, a CPU dry run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import pipeline_h200 as bench  # noqa: E402 - the pipeline benchmark's parts

RESULTS = "encoder-contention-h200.json"
CONDITIONS = ("pipeline_pyav", "pipeline_nvdec", "decoder_thread", "decoder_process")


def pipeline_beside(engine: Path, video: Path, sizes, runner_args: dict, rate: float, decoder: str, encode):
    """``encode()`` while the pipeline without its encoder runs over ``video`` in a thread, its sink paced to
    ``rate`` frames/s until ``encode`` returns (then it runs out unpaced). Returns ``(encode's value, the pipeline's
    frames/s while paced)``."""
    from trtkit.pipeline import CallbackSink, VideoSource, run_engine

    started, done, seen = threading.Event(), threading.Event(), {"frames": 0, "t0": 0.0, "paced": None}

    def pace(frame):
        if not seen["frames"]:
            seen["t0"] = time.perf_counter()
            started.set()
        seen["frames"] += 1
        if done.is_set():
            return
        ahead = seen["frames"] / rate - (time.perf_counter() - seen["t0"])
        if ahead > 0:
            time.sleep(ahead)

    source = VideoSource(video, decoder=decoder, device_memory=decoder == "nvdec")
    errors: list = []

    def run():
        try:
            run_engine(engine, source, sinks=[CallbackSink(pace)], pre_workers=sizes.pre_workers, **runner_args)
        except BaseException as exc:  # noqa: BLE001 - reported with the figures
            errors.append(exc)
        finally:
            started.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    started.wait(60)
    if errors:
        raise errors[0]
    try:
        value = encode()
        frames, seconds = seen["frames"], time.perf_counter() - seen["t0"]
    finally:
        done.set()
        thread.join(120)
    if errors:
        raise errors[0]
    return value, round(frames / seconds, 2) if seconds > 0 else None


def paced_decode(video, rate: float, stop: threading.Event, started: threading.Event) -> float:
    """Decode ``video`` with PyAV over and over at ``rate`` frames/s until ``stop`` is set (``started`` set at the
    first frame); the frames/s it kept."""
    from trtkit.pipeline.video import PyAVReader

    count, t0 = 0, time.perf_counter()
    while not stop.is_set():
        for _ in PyAVReader(video):
            count += 1
            started.set()
            ahead = count / rate - (time.perf_counter() - t0)
            if ahead > 0:
                time.sleep(ahead)
            if stop.is_set():
                break
    return round(count / (time.perf_counter() - t0), 2)


# paced_decode in a child process until its stdin closes: "ready" at its first frame, then its frames/s
DECODE_CHILD = """
import sys, threading
sys.path.insert(0, sys.argv[3])
from benchmarks.encoder_contention_h200 import paced_decode
stop, started = threading.Event(), threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
threading.Thread(target=lambda: (started.wait(), print("ready", flush=True)), daemon=True).start()
print(paced_decode(sys.argv[1], float(sys.argv[2]), stop, started), flush=True)
"""


def decoder_beside(video: Path, rate: float, how: str, encode):
    """``encode()`` beside :func:`paced_decode` of ``video`` at ``rate``, in a thread or in a child process;
    ``(encode's value, the decoder's frames/s)``."""
    import subprocess

    stop, started, got = threading.Event(), threading.Event(), {}
    if how == "process":
        child = subprocess.Popen([sys.executable, "-c", DECODE_CHILD, str(video), str(rate), str(ROOT)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None and child.stdin is not None
        child.stdout.readline()  # "ready": the decoder is running
        try:
            value = encode()
        finally:
            child.stdin.close()
            line = child.stdout.readline().strip()
            child.wait(timeout=30)
        return value, float(line) if line else None
    thread = threading.Thread(target=lambda: got.update(fps=paced_decode(video, rate, stop, started)), daemon=True)
    thread.start()
    started.wait(30)
    try:
        value = encode()
    finally:
        stop.set()
        thread.join(30)
    return value, got.get("fps")


def bracketed(runs: list) -> dict:
    """Per condition: each run's ratio to the mean of the encoder alone before and after it, and their median."""
    out: dict = {}
    for run in runs:
        ratio = run["beside_fps"] / ((run["before_fps"] + run["after_fps"]) / 2) if run.get("after_fps") else None
        run["ratio"] = round(ratio, 3) if ratio else None
        out.setdefault(run["condition"], []).append(run["ratio"])
    return {name: {"ratios": ratios, "median": round(statistics.median([r for r in ratios if r]), 3)
                   if any(ratios) else None} for name, ratios in out.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=".", help="folder for encoder-contention-h200.json (e.g. $OUT)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every condition (default 2)")
    parser.add_argument("--conditions", default=",".join(CONDITIONS),
                        help=f"comma-separated, of {', '.join(CONDITIONS)} (default all)")
    parser.add_argument("--fake", action="store_true", help="fake TensorRT and CUDA, tiny sizes: a CPU dry run")
    args = parser.parse_args(argv)
    conditions = [c for c in args.conditions.split(",") if c]
    if set(conditions) - set(CONDITIONS) or not conditions:
        parser.error(f"--conditions {args.conditions}: use any of {', '.join(CONDITIONS)}")
    sizes = bench.Sizes(args.fake)
    trt = cuda = None
    if args.fake:
        trt, cuda = bench.install_fakes()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    run = bench.Run(out, RESULTS)
    run.result["environment"] = bench.environment()
    runner_args = {"runners": 2, "cuda_graph": True, **({"trt": trt, "cuda": cuda} if args.fake else {})}
    with tempfile.TemporaryDirectory(prefix="trtkit-contention-") as tmp:
        work = Path(tmp)
        engine = run.guard("build", lambda: bench.build_engine(sizes, work, trt))
        video = run.guard("make_video", lambda: bench.make_video(work / "in.mp4", sizes.video_frames, sizes.video,
                                                                 "mpeg4" if args.fake else "libx264"))
        decoded = run.guard("decode_alone", lambda: bench.decode_alone(video)) if video else None
        if not (engine and decoded):
            return finish(run, out)
        frames = decoded[1]
        count = len(frames)  # the encoder encodes the kept frames once: shorter than the pipeline's video

        def encode():
            return bench.encode_alone(frames, count, work)

        nvdec_ok = bench.nvdec_part(video, decoded[0]).get("available")
        if not nvdec_ok and "pipeline_nvdec" in conditions:
            conditions.remove("pipeline_nvdec")
            run.result["notes"]["pipeline_nvdec"] = "not run: NVDEC did not load on this host"
        before = run.guard("alone0", encode)
        runs: list = []
        for r in range(args.rounds):
            for name in conditions:
                rate = before or 90.0
                if name.startswith("pipeline"):
                    got = run.guard(f"{name}{r}", lambda n=name, rate=rate: pipeline_beside(
                        engine, video, sizes, runner_args, rate, "nvdec" if n.endswith("nvdec") else "pyav", encode))
                else:
                    got = run.guard(f"{name}{r}", lambda n=name, rate=rate: decoder_beside(
                        video, rate, n.split("_")[1], encode))
                after = run.guard(f"alone_after_{name}{r}", encode)
                if got and before:
                    runs.append({"condition": name, "round": r, "before_fps": before, "beside_fps": got[0],
                                 "after_fps": after, "other_fps": got[1], "paced_at": rate})
                before = after
                run.store("runs", runs)
        run.store("conditions", bracketed(runs))
        run.result["settings"] = {"frames_encoded": count, "video": list(sizes.video),
                                  "video_frames": sizes.video_frames, "pre_workers": sizes.pre_workers,
                                  "rounds": args.rounds, "fake": args.fake}
    return finish(run, out)


def finish(run, out: Path) -> int:
    run.result["complete"] = True
    path = out / RESULTS
    path.write_text(json.dumps(run.result, indent=2, sort_keys=True) + "\n")
    bench.log(f"wrote {path}; {json.dumps(run.result.get('conditions'))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
