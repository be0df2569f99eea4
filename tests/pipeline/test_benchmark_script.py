"""``benchmarks/pipeline_h200.py --fake`` end to end on the CPU: the GPU host gets one call, so the script must run
through and write every key of the issue's results format."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.bench  # a benchmark harness's test: pytest -m bench

pytest.importorskip("av")
ROOT = Path(__file__).resolve().parents[2]


def test_the_benchmark_writes_the_issues_format(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "pipeline_h200.py"), "--fake", "--out",
                           str(tmp_path)], capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((tmp_path / "pipeline-h200.json").read_text())
    # a failure here once under a loaded full run (not reproduced since): the whole result is kept in the message
    context = json.dumps({k: data.get(k) for k in ("errors", "video", "memory_run", "infer_stage", "folder")})[:6000]
    assert data["errors"] == {}, context
    video = data["video"]
    assert {"e2e_fps", "slowest_stage", "slowest_stage_fps", "frames_in", "frames_out", "stages"} <= set(video)
    assert video["frames_in"] == video["frames_out"] == data["settings"]["video_frames"], context
    assert set(video["stages"]) == {"decode", "preprocess", "infer", "encode"}
    assert {"avg_ms", "min_ms", "max_ms", "p99_ms"} <= set(video["stages"]["infer"])
    assert video["gpu"]["batches"] > 0 and video["first_out_s"] > 0, context
    # the default letterboxes PyAV's frames and the folder's images on the GPU; the CPU letterbox beside it
    assert video["slowest_stage"] != "preprocess" and video["preprocess"]["on"] == "gpu", context
    cpu_pre = data["video_cpu_preprocess"]
    assert cpu_pre["preprocess"]["on"] == "cpu" and cpu_pre["frames_out"] == video["frames_out"], context
    assert cpu_pre["ratio_to_slowest"] > 0 and cpu_pre["slowest_stage_fps"] > 0
    paired = video["paired"]  # the pipeline again right after the encoder alone, against it
    assert len(paired["runs"]) == 1 and paired["runs"][0]["encode_alone_fps"] > 0, context
    assert paired["ratio_median"] == paired["runs"][0]["ratio"] > 0, context
    assert data["folder"]["images_per_s"] > 0 and data["folder"]["preprocess"]["on"] == "gpu", context
    assert data["folder_cpu_preprocess"]["images_per_s"] > 0
    assert data["folder_cpu_preprocess"]["preprocess"]["on"] == "cpu"
    assert data["infer_stage"]["fps"] > 0 and data["infer_stage"]["bench_fps"] > 0, context
    stage = data["infer_stage"]["pipeline_stage"]
    assert stage["startup_s"] > 0 and stage["steady_s"] > 0 and stage["frames"] >= 20 * stage["batch"], context
    assert set(data["nvdec"]) >= {"available", "reason", "decode_fps", "pyav_decode_fps"}
    assert set(data["nvenc"]) >= {"available", "encode_fps", "libx264_encode_fps"}
    assert data["leak_bytes_device"] == 0 and data["memory_run"]["frames_out"] == 300, context
    assert set(data["targets"]) == {"e2e_fps_ge_0.9x_slowest_stage", "e2e_fps_ge_0.9x_slowest_stage_nvdec_device",
                                    "e2e_fps_ge_0.9x_slowest_stage_cpu_preprocess", "infer_stage_ge_0.9x_bench",
                                    "nvdec_decode_ge_3x_pyav", "nvdec_gpu_idle_between_batches_lt_10pct_gpu_bound",
                                    "zero_device_growth_10k_frames", "frames_in_eq_out"}


def _script():
    import importlib

    return importlib.import_module("benchmarks.pipeline_h200")  # the repository root is on sys.path


def test_every_stored_result_is_on_disk_before_the_next_part_starts(tmp_path):
    script = _script()
    run = script.Run(tmp_path)
    run.store("video", {"e2e_fps": 1.0})
    seen = {}

    def next_part():  # what a call cut here would have left behind
        seen.update(json.loads((tmp_path / "pipeline-h200.json").read_text()))
        raise RuntimeError("cut")

    run.guard("memory_run", next_part)
    assert seen["video"] == {"e2e_fps": 1.0} and seen["complete"] is False
    saved = json.loads((tmp_path / "pipeline-h200.json").read_text())
    assert saved["errors"]["memory_run"] == "RuntimeError: cut" and saved["video"] == {"e2e_fps": 1.0}


def test_the_paired_runs_set_each_pipeline_against_the_encoder_measured_just_before_it(tmp_path):
    script = _script()
    encoders, pipelines = iter([100.0, 80.0, 90.0]), iter([95.0, 70.0, 90.0])

    def pipeline():
        fps = next(pipelines)
        return {"fps": fps, "frames_in": 10, "frames_out": 10, "queues": {}, "skipped": [], "gpu": None,
                "slowest_stage": "encode", "source": {},
                "stages": {"encode": dict(avg_ms=1.0, min_ms=1.0, max_ms=1.0, p99_ms=1.0, busy_pct=90.0,
                                          fps_alone=fps)}}

    paired = script.paired_runs(script.Run(tmp_path), "video", 3, lambda: next(encoders), pipeline,
                                {"decode": 300.0, "encode": 200.0})
    assert [r["ratio"] for r in paired["runs"]] == [0.95, 0.875, 1.0] and paired["ratio_median"] == 0.95
    assert [r["slowest_stage"] for r in paired["runs"]] == ["encode"] * 3
    # the target reads the median where the paired runs ran, the single run's ratio where they did not
    assert script.targets({"video": {"ratio_to_slowest": 0.5, "paired": paired}})["e2e_fps_ge_0.9x_slowest_stage"]
    assert not script.targets({"video": {"ratio_to_slowest": 0.5}})["e2e_fps_ge_0.9x_slowest_stage"]


def test_detection_runs_only_when_its_measured_estimate_fits_the_budget(tmp_path):
    script = _script()
    results = tmp_path / "detection-h200.json"
    results.write_text(json.dumps({"rows": {"fp16": {"build_s": 107.4}}}))
    fits, note = script.detection_plan(elapsed_s=94.0, budget_s=200.0, run_estimate_s=10.0, results=results)
    assert not fits and note.startswith("skipped:") and "build 107 s" in note and "106 s of the 200 s" in note
    fits, note = script.detection_plan(elapsed_s=60.0, budget_s=200.0, run_estimate_s=10.0, results=results)
    assert fits and note.startswith("run:")
    assert script.detector_build_estimate_s(tmp_path / "missing.json") == (
        script.DETECTOR_BUILD_FALLBACK_S, "fallback (no measured build time found)")


def test_the_nvdec_device_pipeline_runs_with_the_gpu_preprocessing(fake_gpu, engine_file, tmp_path, monkeypatch):
    from types import SimpleNamespace

    from tests.pipeline.media import FakeNvc, frame_picture, make_video
    from tests.scripts import script_module

    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", FakeNvc([frame_picture(i) for i in range(10)], cuda=fake_gpu[1]))
    with script_module("benchmarks", "pipeline_h200") as bench:
        got = bench.video_pipeline(engine_file, make_video(tmp_path / "in.mp4", frames=2), tmp_path, {},
                                   SimpleNamespace(pre_workers=2), "nvdec", device_memory=True)
        result = bench.video_result(got, {"decode": 50.0, "encode": 40.0, "infer": 900.0})
    assert got["source"]["preprocess"]["on"] == "gpu" and got["frames_out"] == 10
    assert result["slowest_stage"] == "encode" and result["ratio_to_slowest"] == round(got["fps"] / 40.0, 3)


def test_the_gpu_bound_run_reads_every_frame_through_the_gpu_letterbox(fake_gpu, engine_file, tmp_path,
                                                                       monkeypatch):
    from tests.pipeline.media import FakeNvc, frame_picture
    from tests.pipeline.test_nvdec_split import gop_video
    from tests.scripts import script_module

    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", FakeNvc([frame_picture(i) for i in range(35)],
                                                               cuda=fake_gpu[1]))
    monkeypatch.setattr("trtkit.pipeline.nvdec_split.CHUNK_FRAMES", 10)
    with script_module("benchmarks", "pipeline_h200") as bench:
        got = bench.gpu_bound_part(engine_file, gop_video(tmp_path / "clip.mp4"), 2, {}, {"items_per_s": 1000.0})
        model = bench.make_heavy_model(side=16, width=4, depth=2)
    assert got["frames_in"] == got["frames_out"] == 35 and got["decoders"] == 2
    assert got["preprocess"]["on"] == "gpu" and got["gpu"]["batches"] > 0
    assert got["idle_between_batches_pct"] == got["gpu"]["idle_between_batches_pct"]
    assert got["ratio_to_bench"] == round(got["e2e_fps"] / 1000.0, 3)
    assert [n.op_type for n in model.graph.node].count("Conv") == 4  # the stem's two and the two at a quarter size


def test_the_gpu_bound_settings_keep_the_least_idle_run_and_say_how_far_the_decoders_are_ahead(
        fake_gpu, engine_file, tmp_path, monkeypatch):
    from types import SimpleNamespace

    from tests.pipeline.media import FakeNvc, frame_picture
    from tests.pipeline.test_nvdec_split import gop_video
    from tests.scripts import script_module

    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", FakeNvc([frame_picture(i) for i in range(35)],
                                                               cuda=fake_gpu[1]))
    monkeypatch.setattr("trtkit.pipeline.nvdec_split.CHUNK_FRAMES", 10)
    with script_module("benchmarks", "pipeline_h200") as bench:
        built = []
        monkeypatch.setattr(bench, "build_engine", lambda *a, name, **k: built.append(name) or engine_file)
        monkeypatch.setattr(bench, "bench_fps", lambda *a, **k: {"items_per_s": 500.0})
        run = bench.Run()
        settings = ({"runners": 2, "pre_workers": 1}, {"runners": 1, "pre_workers": 2})
        got = bench.gpu_bound(run, bench.Sizes(fake=True), tmp_path, None, None, SimpleNamespace(runners=2), {},
                              gop_video(tmp_path / "clip.mp4"), 1500.0, {**bench.HEAVY_FAKE, "depth": 3}, settings)
    assert built == ["pipeline_heavy_cnn_d3"] and run.result["errors"] == {}
    assert got["decode_alone_fps"] == 1500.0 and got["decode_alone_over_bench"] == 3.0
    tried = got["settings_tried"]
    assert [(t["runners"], t["pre_workers"]) for t in tried] == [(2, 1), (1, 2)]
    assert got["idle_between_batches_pct"] == min(t["idle_between_batches_pct"] for t in tried)
    assert got["frames_in"] == got["frames_out"] == 35 and got["model"]["depth"] == 3
    assert set(run.result["timings_s"]) >= {"build_heavy", "bench_heavy", "gpu_bound_0", "gpu_bound_1"}


def test_the_nvdec_split_run_reads_a_repeated_clip_with_each_reader(fake_gpu, tmp_path, monkeypatch):
    import av

    from tests.pipeline.media import FakeNvc, frame_picture, make_video
    from tests.pipeline.test_nvdec_split import gop_video
    from tests.scripts import script_module

    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", FakeNvc([frame_picture(i) for i in range(35)],
                                                               cuda=fake_gpu[1]))
    monkeypatch.setattr("trtkit.pipeline.nvdec_split.CHUNK_FRAMES", 10)
    with script_module("benchmarks", "pipeline_h200") as bench:
        long = bench.repeat_video(make_video(tmp_path / "in.mp4", frames=10, codec="libx264"), tmp_path / "long.mp4", 3)
        with av.open(str(long)) as container:
            assert sum(1 for _ in container.decode(video=0)) == 30  # three copies, each decodable
        got = bench.nvdec_split_part(gop_video(tmp_path / "clip.mp4"))
    assert set(got["decoders"]) == {"1", "2", "4"} and got["pyav_decode_fps"] > 0
    for n, run in got["decoders"].items():  # the fake decoder's 35 frames, whichever reader
        assert run["frames"] == 35 and run["decoders_used"] == int(n)
        assert run["speedup"] == round(run["fps"] / got["pyav_decode_fps"], 3)
    assert got["decoders"]["4"]["chunks"] == 4


def test_the_memory_run_counts_a_leak_that_memory_let_go_elsewhere_would_hide(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from tests.pipeline.media import make_video
    from tests.scripts import script_module

    class Cuda:  # cudaMemGetInfo of the whole device: before the run, then one sample a call, then after
        def __init__(self, frees):
            self.frees = iter(frees)

        def mem_get_info(self):
            return next(self.frees), 1 << 40

    def run_engine(engine, source, sinks, **_):
        for i in range(300):
            sinks[0].write(SimpleNamespace(index=i))
        return SimpleNamespace(frames_in=300, frames_out=300, fps=100.0)

    monkeypatch.setattr("trtkit.pipeline.run_engine", run_engine)
    with script_module("benchmarks", "pipeline_h200") as bench:
        sizes = bench.Sizes(fake=True)  # 300 frames: samples from frame 30 on, every 3
        count = len(range(30, 300, 3))
        # 9 000 free, then 500 let go by something else, then 100 taken and kept: a leak under the release
        frees = [10_000] + [9_000] * 30 + [9_500] * 20 + [9_400] * (count - 50) + [9_400]
        video = make_video(tmp_path / "v.mp4", frames=2)  # opened only; the stand-in run makes 300 frames
        got = bench.memory_run(tmp_path / "e.engine", video, {}, sizes, Cuda(frees))
        steady = bench.memory_run(tmp_path / "e.engine", video, {}, sizes,
                                  Cuda([10_000] + [9_000] * count + [10_000]))
    assert got["samples"] == count and got["growth_during_run_bytes"] == -400  # first to last: hidden
    assert got["largest_drop_bytes"] == 100 and got["leak_measured_by"] == "largest_drop_bytes"
    assert got["free_range_bytes"] == 500 and got["growth_after_run_bytes"] == 600
    assert steady["largest_drop_bytes"] == 0 and steady["growth_after_run_bytes"] == 0


def test_an_unknown_part_stops_the_benchmark_before_anything_runs(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "pipeline_h200.py"), "--fake", "--out",
                           str(tmp_path), "--skip-parts", "folder,everything"], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.returncode == 2 and "--skip-parts everything: not a part" in proc.stderr
    assert not (tmp_path / "pipeline-h200.json").exists()
