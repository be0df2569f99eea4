"""Stream producers for the live tests, each in its own process on 127.0.0.1 (FFmpeg's listen modes through PyAV):

    python streams.py URL FORMAT FRAMES CODEC    # e.g. tcp://127.0.0.1:PORT?listen=1 mpegts 30 mpeg4
    python streams.py --receive URL OUT.json     # listens (RTMP's listen mode), writes the frames' times

sends :func:`~tests.pipeline.media.frame_picture` frames at 30 fps (a listening URL waits for its reader first; a
connecting one tries again until its listener is up), or receives a stream until it ends.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(url: str, fmt: str = "mpegts", frames: int = 30, codec: str = "mpeg4") -> subprocess.Popen:
    """A producer process; a listening one is given a moment to listen."""
    proc = subprocess.Popen([sys.executable, __file__, url, fmt, str(frames), codec])
    time.sleep(0.5)
    return proc


def produce(url: str, fmt: str, frames: int, codec: str) -> None:
    import av

    from tests.pipeline.media import frame_picture

    for _ in range(100):  # a publisher started before its listener connects once it listens
        out = av.open(url, "w", format=fmt)
        stream = out.add_stream(codec, rate=30)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        try:
            out.start_encoding()  # opens the connection (a listening URL: waits for its reader)
            break
        except OSError:
            out.close()
            time.sleep(0.1)
    with out:
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(frame_picture(i), format="rgb24")
            frame.pts = i
            for packet in stream.encode(frame):
                out.mux(packet)
            time.sleep(1 / 30)
        for packet in stream.encode(None):
            out.mux(packet)


def receiver(url: str, out: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, __file__, "--receive", url, str(out)])
    time.sleep(0.5)
    return proc


def receive(url: str, out: str) -> None:
    import json

    import av

    times = []
    with av.open(url, options={"listen": "1"}, timeout=30) as container:
        try:
            for frame in container.decode(video=0):
                times.append(float(frame.time))
        except av.error.FFmpegError:  # RTMP's end reads as an I/O error
            pass
    Path(out).write_text(json.dumps({"times": times}))


if __name__ == "__main__":
    if sys.argv[1] == "--receive":
        receive(sys.argv[2], sys.argv[3])
    else:
        produce(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
