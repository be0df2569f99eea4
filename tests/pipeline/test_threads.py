"""What the OS sees of a pipeline's threads: each named after its stage (and so the threads its libraries start),
and the CPU each stage's threads used, in the report."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from trtkit.pipeline import ArraySource, CallbackSink, Pipeline, Stage
from trtkit.pipeline.threads import CpuMeter, native_name

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread names and CPU counters are Linux's")


def frames(count: int):
    return ArraySource([np.zeros((2, 2, 3), np.uint8) for _ in range(count)])


def burn(seconds: float) -> None:
    """Keep a CPU busy for ``seconds`` of this thread's own CPU time."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def own_name() -> str:
    return Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text().strip()


@linux
def test_each_thread_carries_its_stage_name_and_a_thread_it_starts_takes_it_too():
    seen = {}

    def pre(frame):
        seen["preprocess"] = own_name()
        started = threading.Thread(target=lambda: seen.setdefault("started by preprocess", own_name()))
        started.start()
        started.join()

    Pipeline(frames(3), [Stage("preprocess", pre)], [CallbackSink(lambda f: seen.setdefault("sink", own_name()))]).run()
    assert seen == {"preprocess": native_name(1, "preprocess"), "started by preprocess": "tk1-preprocess",
                    "sink": "tk2-sink"}
    assert own_name() != "tk1-preprocess"  # the caller's thread keeps its name


@linux
def test_the_report_adds_up_the_cpu_of_each_stages_threads_with_the_threads_they_started():
    def pre(frame):
        burn(0.03)
        helper = threading.Thread(target=burn, args=(0.03,))  # a library's thread, started by the stage
        helper.start()
        helper.join()

    report = Pipeline(frames(6), [Stage("preprocess", pre), Stage("light", lambda f: None)],
                      [CallbackSink(lambda f: None)]).run()
    cpu = report.cpu
    assert cpu is not None and set(cpu["stages"]) >= {"preprocess", "light", "sink"}
    # 6 frames x (30 ms in the stage + 30 ms in its helper): the helpers' threads ended, yet each was sampled
    # before it ended only if it lived across a sample, so the stage's own time is the floor
    assert cpu["stages"]["preprocess"]["cpu_s"] >= 0.17
    assert cpu["stages"]["light"]["cpu_s"] < 0.1
    assert cpu["process_cpu_s"] >= cpu["stages"]["preprocess"]["cpu_s"]
    assert report.to_json()["cpu"] == cpu


@linux
def test_a_long_lived_library_thread_counts_under_the_stage_that_started_it(tmp_path):
    # an encoder's threads: started by the sink with its first frame, alive until it closes
    stop, workers = threading.Event(), []

    def write(frame):
        if not workers:
            workers.append(threading.Thread(target=lambda: [burn(0.01) for _ in iter(stop.is_set, True)]))
            workers[0].start()
        time.sleep(0.1)

    class EncoderLike(CallbackSink):
        def close(self):
            stop.set()
            workers[0].join()

    report = Pipeline(frames(5), [], [EncoderLike(write)]).run()
    assert report.cpu["stages"]["sink"]["cpu_s"] >= 0.2  # its worker spun through the 0.5 s of writes


def test_without_per_thread_counters_the_meter_says_none(tmp_path):
    meter = CpuMeter({"tk0-decode": "decode"}, tasks=tmp_path / "no-such-dir")
    meter.sample()
    assert meter.by_stage(1.0) is None


@linux
def test_ffmpegs_own_decoder_threads_count_under_the_source(tmp_path):
    pytest.importorskip("av")
    from tests.pipeline.media import write_pattern_video
    from trtkit.pipeline.sources import VideoSource

    video = write_pattern_video(tmp_path / "in.mp4", 60, (640, 480), 30, "libx264")
    decoder_cpu: dict = {}  # FFmpeg's decoder threads (it names them itself) -> their CPU seconds, as last seen
    earlier = {task.name for task in Path("/proc/self/task").iterdir()}  # other tests' decoders, not yet collected

    def look(frame):
        for task in Path("/proc/self/task").iterdir():
            try:
                stat = (task / "stat").read_text()
            except OSError:
                continue
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            if name.startswith("av:h264:df") and task.name not in earlier:
                fields = stat[stat.rindex(")") + 2 :].split()
                decoder_cpu[task.name] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    source = VideoSource(video, decoder="pyav", decode_threads=3)
    report = Pipeline(source, [], [CallbackSink(look)]).run()
    assert decoder_cpu, "FFmpeg started no frame threads of its own"
    assert report.cpu["stages"][source.name]["cpu_s"] >= sum(decoder_cpu.values())
