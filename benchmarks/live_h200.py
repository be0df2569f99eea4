#!/usr/bin/env python3
"""Live streams through ``trtkit run`` on one GPU: sources published at their own pace by separate processes, trtkit
listening for them, the annotated result pushed on to receiver processes that count what arrives.

A 1080p H.264 clip (libx264, zerolatency: no B-frames, sliced) is encoded once; each source is a publisher process
that sends that clip's packets over and over (no re-encoding, new timestamps at its frame rate, paced by the wall
clock) as FLV over RTMP to ``trtkit run ENGINE --video rtmp://127.0.0.1:PORT/live/camN --listen --post detection
--out rtmp://127.0.0.1:PORT2/live/outN``; each output goes to a receiver process listening there, which counts the
video packets that arrive. trtkit's ``--json`` report gives the fps, the frame latency (arrival to output) and the
frames dropped.

- ``single``: one 1080p30 source: fps, source_fps, p99 latency, drops (targets: 30 fps, p99 <= 100 ms, 0 drops).
- ``four_streams``: four 1080p30 sources in one ``trtkit run`` (live sources decode with PyAV: ``decoder`` says so).
- ``capacity``: the pipeline's frames/s on the clip as a file (``--video clip.mp4``, unpaced), output over UDP.
- ``overload``: one source at 4x that capacity, ``--drop oldest``: the frames dropped and the p99 latency.

    python3 benchmarks/live_h200.py --engine yolov8n.fp16.engine --out "$OUT"   # on the GPU host
    python3 benchmarks/live_h200.py --fake --out /tmp/live                       # on a CPU: fake TensorRT, tiny sizes

Writes ``<out>/live-h200.json`` (and, not with ``--fake``, ``benchmarks/results/live-h200.json``); every scenario is
guarded (a failure lands in ``errors``, the rest goes on) and the file is rewritten after each.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

FAKE_DRIVER = ROOT / "tests" / "pipeline" / "cli_with_fakes.py"
MAX_SOURCE_FPS = 900  # FLV's millisecond timestamps: one frame a millisecond at most, with room


class Sizes:
    def __init__(self, fake: bool):
        self.fake = fake
        self.video = (160, 96) if fake else (1920, 1080)
        self.fps = 30
        self.clip_frames = 30 if fake else 120
        self.single_s = 3 if fake else 20
        self.four_s = 3 if fake else 20
        self.overload_s = 2 if fake else 10
        self.capacity_frames = 60 if fake else 600


def log(text: str) -> None:
    print(f"[live {time.strftime('%H:%M:%S')}] {text}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the processes around trtkit ---------------------------------------------------------------------------------


def make_clip(path: Path, frames: int, size: tuple, fps: int) -> Path:
    """A moving picture encoded once: what every publisher sends."""
    import av
    import numpy as np

    width, height = size
    yy, xx = np.mgrid[0:height, 0:width]
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"tune": "zerolatency", "preset": "veryfast", "g": str(fps)}
        for i in range(frames):
            image = np.zeros((height, width, 3), np.uint8)
            image[..., 0] = (xx + 8 * i) % 256
            image[..., 1] = (yy + 4 * i) % 256
            cx, cy = int(width * (0.2 + 0.6 * i / frames)), height // 2
            image[max(0, cy - height // 6) : cy + height // 6, max(0, cx - width // 10) : cx + width // 10] = 255
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return path


def publish(url: str, clip: str, frames: int, fps: float) -> None:
    """The publisher process: the clip's packets, over and over, ``frames`` of them at ``fps`` (wall clock), as FLV;
    it connects once its listener (trtkit) is up."""
    import av

    with av.open(clip) as source:
        template = source.streams.video[0]
        packets = [(bytes(p), p.is_keyframe) for p in source.demux(template) if p.size]
        for _ in range(600):
            out = av.open(url, "w", format="flv")
            stream = out.add_stream_from_template(template)
            try:
                out.start_encoding()
                break
            except OSError:
                out.close()
                time.sleep(0.1)
        rate = Fraction(fps).limit_denominator(1000)
        start = time.perf_counter()
        with out:
            for i in range(frames):
                data, key = packets[i % len(packets)]
                packet = av.Packet(data)
                packet.is_keyframe, packet.stream = key, stream
                packet.time_base, packet.pts, packet.dts = 1 / rate, i, i
                wait = start + i / float(rate) - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                out.mux(packet)


def receive(url: str, out: str) -> None:
    """The receiver process: listens on ``url`` and counts the video packets until the stream ends."""
    import av

    count = 0
    try:
        with av.open(url, options={"listen": "1"}, timeout=(300, 60)) as container:
            for packet in container.demux(video=0):
                count += bool(packet.size)
    except av.error.FFmpegError:  # RTMP's end reads as an I/O error
        pass
    Path(out).write_text(json.dumps({"packets": count}))


def spawn(*args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, *map(str, args)])


def stop(proc: subprocess.Popen, seconds: float) -> None:
    """Wait for a helper process to end by itself, else end it (trtkit failed: no stream came or left)."""
    try:
        proc.wait(seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def trtkit_command(fake: bool) -> list:
    return [sys.executable, str(FAKE_DRIVER)] if fake else [sys.executable, "-m", "trtkit.cli.main"]


def run_live(engine, work: Path, name: str, sources: list, fake: bool, extra=()) -> dict:
    """``trtkit run`` listening for ``sources`` (``[(frames, fps)]``, a publisher each), each output to a receiver;
    its report(s) and what each receiver counted."""
    clip = work / "clip.mp4"
    ins = [f"rtmp://127.0.0.1:{free_port()}/live/cam{i}" for i in range(len(sources))]
    outs = [f"rtmp://127.0.0.1:{free_port()}/live/out{i}" for i in range(len(sources))]
    counts = [work / f"{name}-received{i}.json" for i in range(len(sources))]
    receivers = [spawn("--receive", url, path) for url, path in zip(outs, counts)]
    time.sleep(1.0)
    report = work / f"{name}.json"
    argv = [*trtkit_command(fake), "run", str(engine), "--post", "detection", "--listen", "--reconnect", "0",
            "--no-live", "--json", str(report), *extra]
    for url, out in zip(ins, outs):
        argv += ["--video", url, "--out", out]
    trtkit = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    publishers = [spawn("--publish", url, clip, frames, fps) for url, (frames, fps) in zip(ins, sources)]
    output, _ = trtkit.communicate(timeout=max(frames / fps for frames, fps in sources) + 120)
    for proc in publishers + receivers:
        stop(proc, 30)
    if not report.exists():
        raise RuntimeError(f"trtkit run exited {trtkit.returncode} without a report: {output[-2000:]}")
    data = json.loads(report.read_text())
    reports = data.get("sources", [data])
    received = [json.loads(p.read_text())["packets"] if p.exists() else None for p in counts]
    return {"reports": reports, "received": received, "exit": trtkit.returncode, "log_tail": output[-600:]}


def figures(report: dict) -> dict:
    latency = report.get("latency") or {}
    return {"fps": round(report["fps"], 2), "frames_in": report["frames_in"], "frames_out": report["frames_out"],
            "dropped": report["dropped"], "p50_latency_ms": latency.get("p50_ms"),
            "p99_latency_ms": latency.get("p99_ms"), "declared_fps": report["source"].get("fps"),
            # frames that arrived (kept or dropped) per second of the run: the pace the source was read at
            "source_fps": round((report["frames_in"] + report["dropped"]) / max(report["elapsed_s"], 1e-9), 2),
            "decoder": report["source"].get("decoder"), "decoder_reason": report["source"].get("decoder_reason"),
            "ended": report["source"].get("ended")}


# --- the scenarios -----------------------------------------------------------------------------------------------


def single(engine, work: Path, sizes: Sizes) -> dict:
    frames = sizes.single_s * sizes.fps
    got = run_live(engine, work, "single", [(frames, sizes.fps)], sizes.fake)
    row = figures(got["reports"][0])
    return {**row, "published": frames, "received": got["received"][0], "exit": got["exit"]}


def four_streams(engine, work: Path, sizes: Sizes) -> dict:
    frames = sizes.four_s * sizes.fps
    got = run_live(engine, work, "four", [(frames, sizes.fps)] * 4, sizes.fake)
    rows = [figures(r) for r in got["reports"]]
    return {"fps_each": [r["fps"] for r in rows], "dropped": sum(r["dropped"] for r in rows),
            "dropped_each": [r["dropped"] for r in rows], "p99_latency_ms_each": [r["p99_latency_ms"] for r in rows],
            "frames_out_each": [r["frames_out"] for r in rows], "received_each": got["received"],
            "published_each": [frames] * 4, "decoder": rows[0]["decoder"], "decoder_reason": rows[0]["decoder_reason"],
            "nvdec": "not used: trtkit decodes live sources with PyAV (NVDEC reads files)", "exit": got["exit"]}


def capacity(engine, work: Path, sizes: Sizes) -> dict:
    """The pipeline's frames/s on the clip as a file, unpaced, PyAV decoding as the live sources do."""
    from trtkit.pipeline.video import VideoWriter, pyav

    av = pyav()
    clip = work / "capacity.mp4"
    with av.open(str(work / "clip.mp4")) as source:
        images = [f.to_ndarray(format="rgb24") for f in source.decode(video=0)]
    writer = VideoWriter(clip, fps=sizes.fps, codec="libx264")
    for i in range(sizes.capacity_frames):
        writer.write(images[i % len(images)])
    writer.close()
    report = work / "capacity-report.json"
    argv = [*trtkit_command(sizes.fake), "run", str(engine), "--video", str(clip), "--decoder", "pyav", "--post",
            "detection", "--out", f"udp://127.0.0.1:{free_port()}", "--no-live", "--json", str(report)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"trtkit run exited {proc.returncode}: {(proc.stdout + proc.stderr)[-2000:]}")
    data = json.loads(report.read_text())
    return {"fps": round(data["fps"], 2), "frames_out": data["frames_out"],
            "slowest_stage": (data.get("slowest_stage") or None)}


def overload(engine, work: Path, sizes: Sizes, capacity_fps: float) -> dict:
    fps = min(4 * capacity_fps, MAX_SOURCE_FPS)
    frames = int(fps * sizes.overload_s)
    got = run_live(engine, work, "overload", [(frames, fps)], sizes.fake, ["--drop", "oldest"])
    row = figures(got["reports"][0])
    return {**row, "source_fps_published": round(fps, 2), "capacity_fps": capacity_fps, "published": frames,
            "received": got["received"][0], "capped": fps < 4 * capacity_fps, "exit": got["exit"]}


# --- driver ------------------------------------------------------------------------------------------------------


class Run:
    def __init__(self, out: Path, fake: bool):
        from timing import run_stamp

        self.out, self.fake = out, fake
        self.result: dict = {**run_stamp(), "errors": {}, "complete": False}

    def guard(self, key: str, fn):
        log(f"{key}...")
        t0 = time.perf_counter()
        try:
            value = fn()
        except Exception as exc:  # noqa: BLE001 - recorded; the other scenarios still run
            traceback.print_exc()
            self.result["errors"][key] = f"{type(exc).__name__}: {exc}"
            value = None
        if value is not None:
            self.result[key] = value
        self.result.setdefault("timings_s", {})[key] = round(time.perf_counter() - t0, 1)
        self.save()
        log(f"{key}: {json.dumps(value)[:400]}")
        return value

    def save(self) -> None:
        text = json.dumps(self.result, indent=2, sort_keys=True, default=str) + "\n"
        (self.out / "live-h200.json").write_text(text)
        if not self.fake:
            (ROOT / "benchmarks" / "results" / "live-h200.json").write_text(text)


def targets(result: dict) -> dict:
    one, four, over = result.get("single") or {}, result.get("four_streams") or {}, result.get("overload") or {}
    fps = result.get("settings", {}).get("fps", 30)
    return {
        "single_holds_source_fps": bool(one) and one["fps"] >= 0.97 * fps,
        "single_p99_le_100ms": bool(one) and (one["p99_latency_ms"] or 1e9) <= 100,
        "single_no_drops": bool(one) and one["dropped"] == 0,
        "four_streams_no_drops": bool(four) and four["dropped"] == 0,
        "overload_drops_by_policy": bool(over) and over["dropped"] > 0,
        "overload_p99_le_1s": bool(over) and (over["p99_latency_ms"] or 1e9) <= 1000,
    }


def fake_engine(work: Path) -> Path:
    import numpy as np

    from tests import models
    from tests.runtime.fakes import fake_engine_bytes

    head = np.zeros((1, 6, 16), np.float32)
    head[0, :4, 0], head[0, 5, 0] = [16, 16, 8, 8], 0.9
    path = work / "fake.engine"
    profile = [{"images": [[1, 3, 32, 32], [2, 3, 32, 32], [4, 3, 32, 32]]}]
    path.write_bytes(fake_engine_bytes(models.constant_detector(head), profile))
    return path


def environment(fake: bool) -> dict:
    if fake:
        from tests.pipeline.cli_with_fakes import install_fakes

        install_fakes()
    import av

    from trtkit.bench.report import environment as env

    return {**env(), "av": av.__version__, "cpus": os.cpu_count(), "python": sys.version.split()[0]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", help="the detector's engine (YOLOv8n FP16); not with --fake")
    parser.add_argument("--out", default=".", help="folder for live-h200.json (e.g. $OUT)")
    parser.add_argument("--fake", action="store_true", help="fake TensorRT and CUDA, tiny sizes: a CPU dry run")
    args = parser.parse_args(argv)
    if not args.fake and not args.engine:
        parser.error("--engine ENGINE is needed (or --fake)")
    sizes = Sizes(args.fake)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    run = Run(out, args.fake)
    run.guard("environment", lambda: environment(args.fake))
    run.result["settings"] = {"fake": args.fake, "engine": args.engine, "video": list(sizes.video), "fps": sizes.fps,
                              "single_s": sizes.single_s, "four_streams_s": sizes.four_s,
                              "overload_s": sizes.overload_s, "transport": "FLV over RTMP, trtkit listening"}
    with tempfile.TemporaryDirectory(prefix="trtkit-live-") as tmp:
        work = Path(tmp)
        engine = fake_engine(work) if args.fake else Path(args.engine)
        run.guard("clip", lambda: str(make_clip(work / "clip.mp4", sizes.clip_frames, sizes.video, sizes.fps)))
        run.guard("single", lambda: single(engine, work, sizes))
        run.guard("four_streams", lambda: four_streams(engine, work, sizes))
        measured = run.guard("capacity", lambda: capacity(engine, work, sizes))
        if measured:
            run.guard("overload", lambda: overload(engine, work, sizes, measured["fps"]))
    run.result["targets"] = targets(run.result)
    run.result["complete"] = True
    run.save()
    log(f"wrote {out / 'live-h200.json'}; targets: {json.dumps(run.result['targets'])}")
    return 0 if not run.result["errors"] else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--publish"]:
        publish(sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]))
    elif sys.argv[1:2] == ["--receive"]:
        receive(sys.argv[2], sys.argv[3])
    else:
        sys.exit(main())
