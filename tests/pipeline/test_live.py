"""Live sources and stream outputs on loopback: each test starts its own producer (or receiver) process on
127.0.0.1 through FFmpeg's listen modes. Counts, timestamps and messages; no timing assertions."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.pipeline import streams
from tests.pipeline.media import decode_all, make_video
from tests.pipeline.test_cli_pipeline import DRIVER, run_cli
from trtkit.errors import InputError
from trtkit.pipeline.live import LiveSource
from trtkit.pipeline.pipeline import Pipeline
from trtkit.pipeline.sinks import CallbackSink, VideoSink
from trtkit.pipeline.stages import Stage

av = pytest.importorskip("av")


def tcp_stream(frames: int = 30):
    """A producer listening on a free port, and the URL a reader opens."""
    port = streams.free_port()
    return streams.start(f"tcp://127.0.0.1:{port}?listen=1", "mpegts", frames), f"tcp://127.0.0.1:{port}"


def run(source, seconds_per_frame: float = 0.0, sinks=(), queue_size: int = 8) -> tuple:
    seen: list = []
    stage = Stage("work", lambda frame: time.sleep(seconds_per_frame))
    report = Pipeline(source, [stage], [*sinks, CallbackSink(seen.append)], queue_size=queue_size).run()
    source.close()
    return report, seen


def test_a_stream_that_keeps_up_loses_no_frame_and_says_how_it_ended(tmp_path):
    producer, url = tcp_stream(30)
    report, seen = run(LiveSource(url, reconnect=0, timeout_s=20))
    producer.wait(30)
    assert report.frames_in == report.frames_out == 30 and report.dropped == 0 and report.reconnects == 0
    assert [f.pts for f in seen] == pytest.approx([i / 30 for i in range(30)], abs=1e-3)
    assert set(report.latency) == {"p50_ms", "p99_ms", "max_ms"}
    assert report.source["ended"] == f"Stream '{url}' ended: the stream ended"


@pytest.mark.parametrize("drop", ["oldest", "newest"])
def test_an_overloaded_pipeline_drops_by_policy_and_counts_every_drop(tmp_path, drop):
    producer, url = tcp_stream(60)
    out = tmp_path / "out.mp4"
    source = LiveSource(url, drop=drop, reconnect=0, buffer=2, timeout_s=20)
    report, seen = run(source, 0.1, [VideoSink(out, fps=30)], queue_size=1)
    producer.wait(30)
    assert report.dropped > 0 and report.frames_out + report.dropped == 60
    if drop == "oldest":  # the newest frames are kept: the stream's last one among them
        assert seen[-1].name == "frame 59"
    # the output's timestamps are the kept frames' own: gaps where frames were dropped
    with av.open(str(out)) as container:
        times = [float(f.time) for f in container.decode(video=0)]
    assert times == pytest.approx([f.pts for f in seen], abs=1e-3)
    assert times[-1] > (len(times) - 1) / 30


def test_no_drop_policy_keeps_every_frame(tmp_path):
    producer, url = tcp_stream(30)
    report, _ = run(LiveSource(url, drop="none", reconnect=0, buffer=1, timeout_s=20), 0.05, queue_size=1)
    producer.wait(30)
    assert report.frames_out == 30 and report.dropped == 0


def test_a_lost_stream_is_opened_again_and_its_timestamps_go_on():
    port = streams.free_port()
    first = streams.start(f"tcp://127.0.0.1:{port}?listen=1", "mpegts", 20)
    source = LiveSource(f"tcp://127.0.0.1:{port}", reconnect=5, timeout_s=20)
    frames = iter(source)
    got = [next(frames) for _ in range(20)]  # None while waiting
    while len([g for g in got if g]) < 20:
        got.append(next(frames))
    first.wait(30)
    second = streams.start(f"tcp://127.0.0.1:{port}?listen=1", "mpegts", 20)
    got += list(frames)
    second.wait(30)
    source.close()
    stamps = [g[2] for g in got if g]
    assert len(stamps) == 40 and source.reconnects == 1 and source.dropped == 0
    assert stamps == sorted(stamps) and stamps[20] > stamps[19]
    assert source.ended.startswith(f"Stream 'tcp://127.0.0.1:{port}' ended") and "5 time(s) in vain" in source.ended


def test_a_stream_in_and_rtmp_out_on_the_command_line(fake_gpu, engine_file, tmp_path, capsys):
    producer, url = tcp_stream(30)
    port = streams.free_port()
    received = tmp_path / "received.json"
    receiver = streams.receiver(f"rtmp://127.0.0.1:{port}/live/out", received)
    argv = ["run", str(engine_file), "--video", url, "--out", f"rtmp://127.0.0.1:{port}/live/out", "--reconnect",
            "0", "--json", str(tmp_path / "r.json")]
    code, out, err = run_cli(argv, capsys)
    producer.wait(30)
    receiver.wait(30)
    # a stream that ends is an error (one line, exit 1), and the output was closed first: it plays to its end
    assert code == 1 and err.strip() == f"error: Stream '{url}' ended: the stream ended", err
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["frames_out"] == 30 and data["dropped"] == 0 and data["reconnects"] == 0
    assert "frame latency (arrival to output)" in out and "0 frame(s) dropped (--drop oldest)" in out
    times = json.loads(received.read_text())["times"]
    assert len(times) == 30 and times == sorted(times)


def test_several_sources_at_once_each_with_its_report_and_an_hls_output(fake_gpu, engine_file, tmp_path, capsys):
    videos = [make_video(tmp_path / f"in{i}.mp4", frames=10 + i) for i in range(2)]
    listed = tmp_path / "sources.txt"
    listed.write_text(f"# two files read at their frame rate\n{videos[0]}\n{videos[1]}\n")
    hls = tmp_path / "hls"
    hls.mkdir()
    argv = ["run", str(engine_file), "--video", str(listed), "--realtime", "--out", str(hls / "a.m3u8"), "--out",
            str(tmp_path / "b.mp4"), "--json", str(tmp_path / "r.json")]
    code, out, err = run_cli(argv, capsys)
    assert code == 0, err
    reports = json.loads((tmp_path / "r.json").read_text())["sources"]
    assert [r["frames_out"] for r in reports] == [10, 11] and [r["dropped"] for r in reports] == [0, 0]
    assert str(videos[0]) in out and str(videos[1]) in out
    assert "#EXT-X-ENDLIST" in (hls / "a.m3u8").read_text()
    assert len(decode_all(hls / "a.m3u8")) == 10 and len(decode_all(tmp_path / "b.mp4")) == 11


def unknown_codec(tmp_path) -> Path:
    """A Matroska file whose video track names a codec FFmpeg does not know."""
    path = make_video(tmp_path / "x.mkv", frames=5)
    path.write_bytes(path.read_bytes().replace(b"V_MPEG4/ISO/ASP", b"V_ZZZZZ/ISO/ASP"))
    return path


@pytest.mark.parametrize(
    "source, message",
    [
        ("unreachable", r"Cannot open stream 'tcp://127\.0\.0\.1:\d+': .*Connection refused"),
        ("/dev/video97", r"Camera '/dev/video97' does not exist; give an existing /dev/videoN"),
        ("codec", r"has a video codec this FFmpeg cannot decode"),
    ],
)
def test_bad_live_input_is_one_line_and_exit_1(fake_gpu, engine_file, tmp_path, capsys, source, message):
    import re

    video = {"unreachable": f"tcp://127.0.0.1:{streams.free_port()}", "codec": str(unknown_codec(tmp_path))}
    argv = ["run", str(engine_file), "--video", video.get(source, source), "--realtime", "--out",
            str(tmp_path / "out.mp4")]
    code, _, err = run_cli(argv, capsys)
    assert code == 1 and re.search(message, err) and err.count("\n") == 1, err
    assert not (tmp_path / "out.mp4").exists()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--decoder", "nvdec"], "live streams and cameras decode with PyAV"),
        (["--out", "a.mp4", "--out", "b.mp4"], r"--out is given 2 time\(s\) for 1 source\(s\)"),
        (["--reconnect", "-1"], "--reconnect must be at least 0"),
    ],
)
def test_live_usage_errors(fake_gpu, engine_file, capsys, extra, message):
    import re

    code, _, err = run_cli(["run", str(engine_file), "--video", "rtsp://127.0.0.1:9/x", *extra], capsys)
    assert code == 2 and re.search(message, err), err


def test_sigterm_closes_the_output_so_it_plays(engine_file, tmp_path):
    video = make_video(tmp_path / "in.mp4", frames=300)
    out = tmp_path / "out.mp4"
    started = tmp_path / "started"
    env = {**os.environ, "TRTKIT_TEST_PRE_DELAY_S": "0.001", "TRTKIT_TEST_STARTED": str(started), "NO_COLOR": "1"}
    proc = subprocess.Popen([sys.executable, str(DRIVER), "run", str(engine_file), "--video", str(video), "--realtime",
                             "--out", str(out), "--json", str(tmp_path / "r.json")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 60
    while not started.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.02)
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["interrupted"] is True and 0 < data["frames_out"] < 300
    assert len(decode_all(out)) == data["frames_out"]


def test_trtkit_listens_for_an_rtmp_publisher_and_keeps_every_frame(fake_gpu, engine_file, tmp_path, capsys):
    url = f"rtmp://127.0.0.1:{streams.free_port()}/live/cam"
    publisher = streams.start(url, "flv", 30, "flv")  # connects once trtkit listens
    out = tmp_path / "out.mp4"
    argv = ["run", str(engine_file), "--video", url, "--listen", "--out", str(out), "--reconnect", "0", "--json",
            str(tmp_path / "r.json")]
    code, _, err = run_cli(argv, capsys)
    publisher.wait(30)
    assert code == 1 and err.startswith(f"error: Stream '{url}' ended"), err  # the publisher left
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["frames_in"] == data["frames_out"] == 30 and data["dropped"] == 0
    assert len(decode_all(out)) == 30


def test_a_listening_source_takes_the_next_publisher_after_one_leaves():
    url = f"tcp://127.0.0.1:{streams.free_port()}"
    first = streams.start(url, "mpegts", 10)
    source = LiveSource(url, options={"listen": "1"}, reconnect=1, timeout_s=20)
    first.wait(30)
    second = streams.start(url, "mpegts", 10)
    frames = [f for f in source if f]
    second.wait(30)
    source.close()
    assert len(frames) == 20 and source.reconnects == 1 and source.dropped == 0


def test_listening_needs_an_rtmp_or_tcp_url_and_a_publisher_in_time(tmp_path):
    with pytest.raises(InputError, match=r"Cannot listen on 'udp://127\.0\.0\.1:9': trtkit listens on rtmp:// and tcp://"):
        LiveSource("udp://127.0.0.1:9", options={"listen": "1"})
    url = f"rtmp://127.0.0.1:{streams.free_port()}/live/cam"
    with pytest.raises(InputError, match=rf"^No publisher connected to '{url}' within 0\.5 s$"):
        LiveSource(url, options={"listen": "1"}, timeout_s=0.5)
