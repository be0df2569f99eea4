"""``trtkit run ENGINE --video/--images`` on the fake backends: options, table, JSON, bad input, and Ctrl-C on a
real process leaving a playable video."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.pipeline.media import FakeNvc, decode_all, frame_picture, make_image_folder, make_video
from trtkit.cli import main as cli_main

pytest.importorskip("av")
DRIVER = Path(__file__).with_name("cli_with_fakes.py")


def run_cli(argv, capsys):
    code = cli_main.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_help_lists_the_pipeline_options(capsys):
    code, out, _ = run_cli(["run", "--help"], capsys)
    assert code == 0
    for option in ("--video", "--images", "--out", "--post", "--results", "--decoder", "--codec", "--batch",
                   "--max-wait-ms", "--runners", "--queue-size", "--workers", "--resize", "--no-live", "--conf",
                   "--iou", "--preprocess", "--head", "--names"):
        assert option in out


def test_video_to_video_with_table_and_json(fake_gpu, engine_file, tmp_path, capsys):
    video = make_video(tmp_path / "in.mp4", frames=24)
    out, report = tmp_path / "out.mp4", tmp_path / "report.json"
    code, stdout, err = run_cli(["run", str(engine_file), "--video", str(video), "--out", str(out), "--decoder",
                                 "pyav", "--json", str(report)], capsys)
    assert code == 0, err
    assert "24 frames in, 24 out" in stdout and "slowest stage" in stdout and "decode" in stdout
    if sys.platform.startswith("linux"):  # the cores each stage's threads kept busy, in the table and the JSON
        assert "core" in stdout and {"decode", "encode"} <= set(json.loads(report.read_text())["cpu"]["stages"])
    data = json.loads(report.read_text())
    assert data["frames_in"] == data["frames_out"] == 24 and data["batch"] == 4
    # the pipeline's fill told apart from its steady rate, in the JSON and the summary
    assert 0 < data["first_out_s"] < data["elapsed_s"] and data["steady_fps"] > 0
    assert re.search(r"first frames out after \d+\.\d\d s, then \d+\.\d FPS", " ".join(stdout.split()))
    assert set(data["stages"]) == {"decode", "preprocess", "infer", "encode"}
    assert set(data["stages"]["infer"]) >= {"avg_ms", "min_ms", "max_ms", "p99_ms", "busy_pct"}
    assert data["source"]["decoder"] == "pyav"
    assert len(decode_all(out)) == 24


@pytest.mark.parametrize("preprocess, where", [("auto", "on the GPU (frames in device memory"),
                                               ("cpu", "on the CPU (asked for (preprocess='cpu'))")])
def test_nvdec_frames_are_preprocessed_on_the_gpu_unless_asked_otherwise(fake_gpu, engine_file, tmp_path, capsys,
                                                                         monkeypatch, preprocess, where):
    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", FakeNvc([frame_picture(i) for i in range(12)], cuda=fake_gpu[1]))
    out = tmp_path / "out.mp4"
    code, stdout, err = run_cli(["run", str(engine_file), "--video", str(make_video(tmp_path / "in.mp4", frames=2)),
                                 "--out", str(out), "--preprocess", preprocess], capsys)
    assert code == 0, err
    assert "decoder: nvdec" in stdout and f"preprocessing: {where}" in " ".join(stdout.split())
    assert "12 frames in, 12 out" in stdout and len(decode_all(out)) == 12


def test_a_video_split_over_two_nvdec_decoders_keeps_its_frames_in_order(fake_gpu, engine_file, tmp_path, capsys,
                                                                           monkeypatch):
    from tests.pipeline.test_nvdec_split import gop_video

    pictures = [frame_picture(i) for i in range(35)]
    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", FakeNvc(pictures, cuda=fake_gpu[1]))
    monkeypatch.setattr("trtkit.pipeline.nvdec_split.CHUNK_FRAMES", 10)
    results, report = tmp_path / "r.jsonl", tmp_path / "report.json"
    code, stdout, err = run_cli(["run", str(engine_file), "--video", str(gop_video(tmp_path / "in.mp4")),
                                 "--results", str(results), "--nvdec-decoders", "2", "--json", str(report)], capsys)
    assert code == 0, err
    assert "35 frames in, 35 out" in stdout
    source = json.loads(report.read_text())["source"]
    assert source["decoders"] == 2 and source["chunks"] == 4
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    assert [line["index"] for line in lines] == list(range(35))


def test_a_folder_letterboxed_on_the_gpu_and_a_gpu_request_it_cannot_meet(fake_gpu, engine_file, tmp_path, capsys):
    folder = tmp_path / "imgs"
    make_image_folder(folder, count=7)
    code, stdout, err = run_cli(["run", str(engine_file), "--images", str(folder), "--preprocess", "gpu"], capsys)
    assert code == 0, err
    assert "preprocessing: on the GPU (host pictures uploaded once" in " ".join(stdout.split())
    assert "7 images in, 7 out" in stdout
    code, stdout, err = run_cli(["run", str(engine_file), "--images", str(folder), "--preprocess", "gpu",
                                 "--resize", "stretch"], capsys)
    assert code == 1 and "preprocess='gpu' cannot run here: resize='stretch' runs on the CPU" in " ".join(
        (stdout + err).split())


def test_image_folder_throughput_with_results(fake_gpu, engine_file, tmp_path, capsys):
    names = make_image_folder(tmp_path / "imgs", count=9)
    results = tmp_path / "r.jsonl"
    code, stdout, err = run_cli(["run", str(engine_file), "--images", str(tmp_path / "imgs"), "--results",
                                 str(results), "--batch", "3", "--json", "-"], capsys)
    assert code == 0, err
    assert [json.loads(line)["name"] for line in results.read_text().splitlines()] == names
    # with --json -, stdout is the JSON alone; the summary goes to stderr
    assert json.loads(stdout)["frames_out"] == 9 and "9 images in, 9 out" in err and "images/s" in err


def test_encoder_options_reach_the_output_video(fake_gpu, engine_file, tmp_path, capsys):
    import av

    video, out = make_video(tmp_path / "in.mp4", frames=8), tmp_path / "out.mp4"
    code, _, err = run_cli(["run", str(engine_file), "--video", str(video), "--decoder", "pyav", "--out", str(out),
                            "--encoder-option", "g=1", "--encoder-option", "preset=ultrafast"], capsys)
    assert code == 0, err
    with av.open(str(out)) as container:
        assert [bool(f.key_frame) for f in container.decode(video=0)] == [True] * 8


def test_image_folder_to_an_output_folder(fake_gpu, engine_file, tmp_path, capsys):
    names = make_image_folder(tmp_path / "imgs", count=3)
    code, _, err = run_cli(["run", str(engine_file), "--images", str(tmp_path / "imgs"), "--out",
                            str(tmp_path / "annotated")], capsys)
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "annotated").iterdir()) == names


@pytest.mark.parametrize("argv, message", [
    (["--out", "x.mp4"], "--out and --results need a source: --video FILE, --view NAME=FILE or --images DIR"),
    (["--video", "{tmp}/nope.mp4"], "Video '.*nope.mp4' does not exist"),
    (["--images", "{tmp}/empty"], "Folder '.*empty' has no image files"),
    (["--video", "{video}", "--out", "{tmp}/no_dir/out.mp4"], "folder '.*no_dir' does not exist"),
    (["--video", "{video}", "--batch", "0"], "--batch must be at least 1, not 0"),
    (["--video", "{video}", "--decoder", "nvdec"], "PyNvVideoCodec"),
    (["--video", "{video}", "--conf", "1.5"], "--conf must be between 0 and 1, not 1.5"),
    (["--video", "{video}", "--nvdec-decoders", "0"], "--nvdec-decoders must be at least 1, not 0"),
    (["--video", "{video}", "--nvdec-decoders", "2", "--decoder", "pyav"], "--nvdec-decoders splits a video"),
    (["--images", "{tmp}", "--nvdec-decoders", "2"], "--nvdec-decoders splits a video"),
    (["--video", "{video}", "--decode-threads", "-1"], "--decode-threads must be at least 0, not -1"),
    (["--video", "{video}", "--decode-threads", "2", "--decoder", "nvdec"], "--decode-threads sets PyAV's CPU"),
    (["--images", "{tmp}", "--decode-threads", "2"], "--decode-threads sets PyAV's CPU decoder threads"),
    (["--images", "{tmp}", "--encoder-option", "g=1"], "--encoder-option sets the output video's encoder"),
    (["--video", "{video}", "--out", "{tmp}/o.mp4", "--encoder-option", "veryfast"],
     "--encoder-option 'veryfast': give KEY=VALUE, e.g. preset=veryfast"),
    (["--video", "{video}", "--out", "{tmp}/o.mp4", "--encoder-option", "preset=quick"],
     "preset='quick' is not one of libx264's"),
])
def test_bad_input_is_one_line_and_its_exit_code(fake_gpu, engine_file, tmp_path, capsys, monkeypatch, argv, message):
    import re

    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", None)
    (tmp_path / "empty").mkdir()
    video = make_video(tmp_path / "in.mp4", frames=2)
    argv = [a.format(tmp=tmp_path, video=video) for a in argv]
    code, _, err = run_cli(["run", str(engine_file), *argv], capsys)
    usage = message.startswith("--")  # an option's value or company (2), not a file or a library (1)
    assert code == (2 if usage else 1) and re.search(message, err), err
    assert err.count("\n") == 1
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_ctrl_c_drains_and_leaves_a_playable_video(engine_file, tmp_path):
    video = make_video(tmp_path / "in.mp4", frames=400)
    out = tmp_path / "out.mp4"
    started = tmp_path / "started"
    env = {**os.environ, "TRTKIT_TEST_PRE_DELAY_S": "0.03", "TRTKIT_TEST_STARTED": str(started), "NO_COLOR": "1"}
    proc = subprocess.Popen([sys.executable, str(DRIVER), "run", str(engine_file), "--video", str(video), "--out",
                             str(out), "--decoder", "pyav", "--json", str(tmp_path / "r.json")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 60
    while not started.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.02)
    time.sleep(0.3)  # some frames through
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "interrupted" in stdout
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["interrupted"] is True and 0 < data["frames_out"] == data["frames_in"] < 400
    assert len(decode_all(out)) == data["frames_out"]
    assert list(tmp_path.glob(".out.partial-*")) == []


def test_an_engine_that_takes_no_images_leaves_no_output(fake_gpu, tmp_path, capsys):
    from tests import models
    from tests.runtime.fakes import fake_engine_bytes

    engine = tmp_path / "two.engine"
    engine.write_bytes(fake_engine_bytes(models.two_inputs(), [{"a": [[1, 4]] * 3, "b": [[1, 4]] * 3}]))
    video = make_video(tmp_path / "in.mp4", frames=2)
    code, _, err = run_cli(["run", str(engine), "--video", str(video), "--out", str(tmp_path / "out.mp4"),
                            "--results", str(tmp_path / "r.jsonl")], capsys)
    assert code == 1 and "needs an engine with one input of layout NCHW" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.mp4", "two.engine"]


def test_a_terminal_gets_a_live_view_then_the_final_table(fake_gpu, engine_file, tmp_path, monkeypatch):
    import io

    from rich.console import Console

    from trtkit.cli.main import make_parser
    from trtkit.cli.pipeline import run_pipeline
    from trtkit.pipeline import pipeline as pipeline_module

    monkeypatch.setattr(pipeline_module, "MONITOR_INTERVAL_S", 0.01)
    video = make_video(tmp_path / "in.mp4", frames=60)
    args = make_parser("run").parse_args(["run", str(engine_file), "--video", str(video), "--decoder", "pyav"])
    updates = []
    real = run_pipeline.__globals__["_LiveView"].update
    monkeypatch.setattr(run_pipeline.__globals__["_LiveView"], "update",
                        lambda self, report: (updates.append(report.frames_out), real(self, report)))
    buffer = io.StringIO()
    assert run_pipeline(args, Console(file=buffer, force_terminal=True, width=120, highlight=False)) == 0
    assert updates and updates == sorted(updates)
    assert "60 frames in, 60 out" in buffer.getvalue() and "FPS" in buffer.getvalue()
