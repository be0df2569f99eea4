"""``benchmarks/pipeline_h200.py --fake`` end to end on the CPU: the GPU host gets one call, so the script must run
through and write every key of the issue's results format."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.bench  # a benchmark harness's test: pytest -m bench

pytest.importorskip("av")
ROOT = Path(__file__).resolve().parents[2]


def test_the_benchmark_writes_the_issues_format(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "pipeline_h200.py"), "--fake", "--out",
                           str(tmp_path), "--encoder-process", "--skip-variants", "none"], capture_output=True,
                          text=True, timeout=240, cwd=ROOT)
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
    assert data["folder"]["images_per_s"] > 0, context
    assert data["infer_stage"]["fps"] > 0 and data["infer_stage"]["bench_fps"] > 0, context
    stage = data["infer_stage"]["pipeline_stage"]
    assert stage["startup_s"] > 0 and stage["steady_s"] > 0 and stage["frames"] >= 20 * stage["batch"], context
    assert set(data["nvdec"]) >= {"available", "reason", "decode_fps", "pyav_decode_fps"}
    assert set(data["nvenc"]) >= {"available", "encode_fps", "libx264_encode_fps"}
    assert data["leak_bytes_device"] == 0 and data["memory_run"]["frames_out"] == 300, context
    assert set(data["targets"]) == {"e2e_fps_ge_0.9x_slowest_stage", "e2e_fps_ge_0.9x_slowest_stage_nvdec_device",
                                    "e2e_fps_ge_0.9x_slowest_stage_cpu_preprocess",
                                    "infer_stage_ge_0.9x_bench",
                                    "nvdec_decode_ge_3x_pyav", "nvdec_gpu_idle_between_batches_lt_10pct",
                                    "nvdec_gpu_idle_between_batches_lt_10pct_gpu_bound",
                                    "zero_device_growth_10k_frames", "frames_in_eq_out"}
    assert data["video"]["gpu"]["batches"] > 0, context
    assert stage["samples"].startswith("blocks of a batch") and stage["frame_path"]["frames"] == 100 * stage["batch"]
    assert stage["copying_samples"]["fps"] > 0, context
    child = data["video_encoder_process"]
    assert child["frames_in"] == child["frames_out"] == data["settings"]["video_frames"] and child["e2e_fps"] > 0
    assert child["encode_alone_fps_child"] > 0, context
    variants = data["video_variants"]
    assert set(variants) == {"encoder_slice_threads", "switch_interval_1ms", "pre_workers_2", "cpu_preprocess",
                             "encoder_veryfast", "decode_threads_0", "decode_threads_2"}, context
    assert data["encoder"]["convert_alone"]["ms_per_frame"] > 0
    # the pipeline's fill told apart from its steady rate (a diagnosis beside the target's ratio)
    assert data["video"]["first_out_s"] > 0 and data["video"]["steady_ratio_to_slowest"] > 0, context
    # the sink's time besides its writes: late frames and the encoder's flush
    assert data["video"]["sink_wait_s"] >= 0 and data["video"]["sink_close_s"] > 0, context
    assert data["video"]["paired"]["runs"][0]["sink_close_s"] > 0, context
    paired = data["video"]["paired"]  # the pipeline again right after the encoder alone, against it
    assert len(paired["runs"]) == 1 and paired["runs"][0]["encode_alone_fps"] > 0, context
    assert paired["ratio_median"] == paired["runs"][0]["ratio"] > 0, context
    for threads in (0, 2):  # FFmpeg's decoder on that many threads (0: its choice), decode alone again with them
        variant = variants[f"decode_threads_{threads}"]
        assert variant["decode_threads"] == threads and variant["decode_alone_fps"] > 0, context
        assert set(variant["cores_busy"]) == {"decode", "video_pipeline"}, context
    assert variants["encoder_veryfast"]["encode_alone_fps"] > 0
    assert variants["encoder_veryfast"]["options"] == {"preset": "veryfast"}
    # the default letterboxes PyAV's frames and the folder's images on the GPU; the CPU letterbox beside it
    assert data["video"]["slowest_stage"] != "preprocess" and data["folder"]["preprocess"]["on"] == "gpu", context
    assert variants["cpu_preprocess"]["preprocess"]["on"] == "cpu"
    folder_cpu = data["folder_cpu_preprocess"]
    assert folder_cpu["images_per_s"] > 0 and folder_cpu["preprocess"]["on"] == "cpu"
    for variant in variants.values():
        assert variant["frames_in"] == variant["frames_out"] == data["settings"]["video_frames"]
        assert variant["ratio_to_slowest"] > 0 and variant["slowest_stage_fps"] > 0
    assert variants["encoder_slice_threads"]["encode_alone_fps"] > 0
    assert variants["pre_workers_2"]["preprocess_alone_fps"] > 0 and variants["pre_workers_2"]["pre_workers"] == 2
    assert data["encoder"]["thread_type"] == "AUTO" and data["encoder"]["pix_fmt"] == "yuv420p"
    cores = data["cores_busy"]  # the process's CPU time over the wall time of each stage alone and the pipeline
    assert cores["cpus"] == os.cpu_count() and all(0 < cores[k] <= cores["cpus"] + 0.5 for k in
                                                   ("decode", "encode", "video_pipeline")), cores
    for part in ("decode", "preprocess", "encode", "from_ndarray"):
        assert data["gil"][part]["ms_per_frame"] > 0 and data["gil"][part]["gil_held_ms_per_frame"] >= 0


def test_the_encoder_contention_benchmark_measures_every_variant():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "encode_contention_cpu.py"), "--frames", "12",
                           "--size", "64x48", "--repeat", "1"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert set(data["encode_alone_ms"]) == {"thread", "process"} and set(data["encode_next_to_ms"]) == {
        "python", "process"}
    for run in data["pipeline"].values():
        assert run["frames_out"] == 12 and run["e2e_fps"] > 0 and run["ratio_to_slowest_alone"] > 0


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
    encoders, pipelines = iter([100.0, 80.0, 90.0, 110.0]), iter([95.0, 70.0, 90.0])

    def pipeline():
        fps = next(pipelines)
        return {"fps": fps, "frames_in": 10, "frames_out": 10, "queues": {}, "skipped": [], "gpu": None,
                "slowest_stage": "encode", "source": {},
                "stages": {"encode": dict(avg_ms=1.0, min_ms=1.0, max_ms=1.0, p99_ms=1.0, busy_pct=90.0,
                                          fps_alone=fps)},
                "cpu": {"stages": {"encode": {"cpu_s": 0.7, "cores": 6.5}, "decode": {"cpu_s": 0.1, "cores": 0.9}},
                        "process_cores": 7.6}}

    def encode(cpu):
        if cpu is not None:
            cpu.update(cpu_ms_per_frame=60.0, cores=7.0)
        return next(encoders)

    paired = script.paired_runs(script.Run(tmp_path), "video", 3, encode, pipeline, {"decode": 300.0, "encode": 200.0})
    assert [r["ratio"] for r in paired["runs"]] == [0.95, 0.875, 1.0] and paired["ratio_median"] == 0.95
    # the encoder's CPU a frame alone and inside the pipeline (its stage's threads: 0.7 s over 10 frames)
    assert [(r["encode_cpu_ms_alone"], r["encode_cpu_ms_pipeline"]) for r in paired["runs"]] == [(60.0, 70.0)] * 3
    assert paired["runs"][0]["cores_by_stage"] == {"encode": 6.5, "decode": 0.9, "process": 7.6}
    # and against the mean of the encoder alone before and after each run (the last one measured once more)
    assert [r["encode_after_fps"] for r in paired["runs"]] == [80.0, 90.0, 110.0]
    assert [r["ratio_bracketed"] for r in paired["runs"]] == [1.056, 0.824, 0.9]
    assert paired["ratio_bracketed_median"] == 0.9
    # the target reads the median where the paired runs ran, the single run's ratio where they did not
    assert script.targets({"video": {"ratio_to_slowest": 0.5, "paired": paired}})["e2e_fps_ge_0.9x_slowest_stage"]
    assert not script.targets({"video": {"ratio_to_slowest": 0.5}})["e2e_fps_ge_0.9x_slowest_stage"]


def test_the_frames_held_for_the_stages_alone_are_a_count_or_the_whole_video(tmp_path):
    script = _script()
    sizes = script.Sizes(fake=False)
    assert script.alone_frames(None, sizes) == script.alone_frames("all", sizes) == sizes.video_frames
    assert script.alone_frames("120", sizes) == 120
    for bad in ("0", "-3", "half"):
        with pytest.raises(ValueError, match=f"--alone-frames {bad}: give a count of frames"):
            script.alone_frames(bad, sizes)
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "pipeline_h200.py"), "--fake", "--out",
                           str(tmp_path), "--alone-frames", "half"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2 and "--alone-frames half" in proc.stderr and not list(tmp_path.iterdir())


def test_the_cpu_topology_reads_smt_siblings_and_the_cgroup_quota(tmp_path):
    topology = tmp_path / "devices" / "system" / "cpu" / "cpu0" / "topology"
    topology.mkdir(parents=True)
    (topology / "thread_siblings_list").write_text("0,8\n")
    (tmp_path / "fs" / "cgroup").mkdir(parents=True)
    (tmp_path / "fs" / "cgroup" / "cpu.max").write_text("800000 100000\n")
    info = _script().cpu_topology(tmp_path)
    assert info["threads_per_core"] == 2 and info["cgroup_cpu_max"] == "800000 100000"
    (topology / "thread_siblings_list").write_text("0-1\n")
    assert _script().cpu_topology(tmp_path)["threads_per_core"] == 2
    unknown = _script().cpu_topology(tmp_path / "nowhere")  # a host that does not say
    assert unknown["threads_per_core"] is None and unknown["cgroup_cpu_max"] is None


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


def test_the_nvdec_host_memory_measurement_decodes_every_frame(tmp_path, monkeypatch, fake_gpu):
    from tests.pipeline.media import FakeNvc, frame_picture, make_video
    from tests.scripts import script_module

    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", FakeNvc([frame_picture(i) for i in range(40)], cuda=fake_gpu[1]))
    video = make_video(tmp_path / "in.mp4", frames=3)
    with script_module("benchmarks", "pipeline_h200") as bench:
        got = bench.nvdec_host_part(video, pyav_fps=100.0)
        assert got["session_init_ms"] is None and got["decode_fps_steady"] is None  # the decoder does not say
        monkeypatch.setitem(sys.modules, "PyNvVideoCodec", FakeNvc([frame_picture(i) for i in range(40)],
                                                                   init_ms=0.0, cuda=fake_gpu[1]))
        again = bench.nvdec_host_part(video, pyav_fps=100.0)
        assert bench._steady(40, 0.5, 100.0, 100.0) == {"session_init_ms": 100.0, "decode_fps_steady": 100.0,
                                                        "speedup_steady": 1.0}
        assert bench._steady(40, 0.5, 900.0, 100.0)["decode_fps_steady"] is None  # more than the whole run
    assert got["frames"] == 40 and got["host_one_decoder_fps"] > 0
    assert got["speedup_one_decoder"] == round(got["host_one_decoder_fps"] / 100.0, 3)
    assert again["session_init_ms"] == 0.0 and again["decode_fps_steady"] > 0


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


def test_the_nvdec_capacity_run_counts_every_frame_of_a_repeated_clip(tmp_path, monkeypatch):
    import av

    from tests.pipeline.media import FakeNvc, frame_picture, make_video
    from tests.scripts import script_module

    pictures = [frame_picture(i) for i in range(37)]
    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", FakeNvc(pictures, init_ms=1.0))
    video = make_video(tmp_path / "in.mp4", frames=10, codec="libx264")
    with script_module("benchmarks", "pipeline_h200") as bench:
        long = bench.repeat_video(video, tmp_path / "long.mp4", 3)
        with av.open(str(long)) as container:
            assert sum(1 for _ in container.decode(video=0)) == 30  # three copies, each decodable
        got = bench.nvdec_capacity_part(video, tmp_path)
    assert got["clip_frames"] == 37 and got["pyav_decode_fps"] > 0  # the fake decoder's frames, PyAV's clip
    assert set(got["decoders"]) == {"1", "2", "4"}
    for n, run in got["decoders"].items():
        assert run["frames"] == 37 and run["all_frames"] and run["session_init_ms"] == [1.0] * int(n)



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
                              gop_video(tmp_path / "clip.mp4"), 1500.0, {**bench.HEAVY_FAKE, "depth": 3}, settings,
                              "_t")
    assert built == ["pipeline_heavy_cnn_d3"] and run.result["errors"] == {}
    assert got["decode_alone_fps"] == 1500.0 and got["decode_alone_over_bench"] == 3.0
    tried = got["settings_tried"]
    assert [(t["runners"], t["pre_workers"]) for t in tried] == [(2, 1), (1, 2)]
    assert got["idle_between_batches_pct"] == min(t["idle_between_batches_pct"] for t in tried)
    for t in tried:  # several batches in each run, so the gaps between them are told
        assert set(t["idle_gaps"]) == {"count", "median_ms", "max_ms", "over_1ms_pct_of_idle"}, tried
    assert got["frames_in"] == got["frames_out"] == 35 and got["model"]["depth"] == 3
    assert set(run.result["timings_s"]) >= {"build_heavy_t", "bench_heavy_t", "gpu_bound_t_0", "gpu_bound_t_1"}


def test_the_nvdec_split_run_reads_the_clip_with_each_reader(fake_gpu, tmp_path, monkeypatch):
    from tests.pipeline.media import FakeNvc, frame_picture
    from tests.pipeline.test_nvdec_split import gop_video
    from tests.scripts import script_module

    monkeypatch.setitem(sys.modules, "PyNvVideoCodec", FakeNvc([frame_picture(i) for i in range(35)],
                                                               cuda=fake_gpu[1]))
    monkeypatch.setattr("trtkit.pipeline.nvdec_split.CHUNK_FRAMES", 10)
    with script_module("benchmarks", "pipeline_h200") as bench:
        got = bench.nvdec_split_part(gop_video(tmp_path / "clip.mp4"), pyav_fps=100.0)
    assert set(got["decoders"]) == {"1", "2", "4"}
    for n, run in got["decoders"].items():
        assert run["frames"] == 35 and run["decoders_used"] == int(n) and run["speedup"] == round(run["fps"] / 100, 3)
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


def test_the_ab_rounds_compare_variants_round_by_round_against_each_rounds_encoder(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "pipeline_h200.py"), "--fake", "--out",
                           str(tmp_path), "--pairs", "0", "--ab-rounds", "2", "--ab-variants",
                           "base,gpu_wait_block,encoder_threads_2,held_frames", "--alone-frames",
                           "all", "--skip-parts",
                           "gil,folder,nvdec_host,nvdec_capacity,gpu_bound,memory,detection", "--skip-variants",
                           "encoder_slice_threads,switch_interval_1ms,pre_workers_2,cpu_preprocess,encoder_veryfast,"
                           "decode_threads_0,decode_threads_2"], capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((tmp_path / "pipeline-h200.json").read_text())
    ab = data["video_ab"]
    assert data["errors"] == {} and ab["rounds"] == 2, json.dumps(data)[:4000]
    assert [r["round"] for r in ab["runs"]["base"]] == [0, 1]
    assert {r["gpu_wait"] for r in ab["runs"]["gpu_wait_block"]} == {"block"}
    assert {r["gpu_wait"] for r in ab["runs"]["base"]} == {"auto"}
    # the held frames through a sink-only pipeline: every frame the encoder alone encodes, against it
    assert {r["frames_out"] for r in ab["runs"]["held_frames"]} == {data["settings"]["video_frames"]}
    assert {r["slowest_stage"] for r in ab["runs"]["held_frames"]} == {"encode"}
    if sys.platform.startswith("linux"):  # the encoder's CPU a frame, alone and in the pipeline, and cores by stage
        for run in ab["runs"]["base"] + ab["runs"]["gpu_wait_block"]:
            # (the fake's tiny encoder may use less than the counters' 10 ms tick in the pipeline)
            assert run["encode_cpu_ms_alone"] > 0 and run["encode_cpu_ms_pipeline"] >= 0, run
            assert {"decode", "encode", "process"} <= set(run["cores_by_stage"]), run
    for name, summary in ab["summary"].items():
        runs = ab["runs"][name]
        assert summary["runs"] == 2 and summary["ratio"] > 0 and summary["cores_busy"] > 0
        assert all(r["frames_out"] == data["settings"]["video_frames"] for r in runs)
        assert all(r["ratio"] == round(r["e2e_fps"] / r["encode_alone_fps"], 3) for r in runs if
                   r["slowest_stage"] == "encode")
    assert ab["variants"]["encoder_threads_2"] == {"encoder_threads": 2}
    assert "memory_run" not in data and "folder" not in data and "skipped_parts" in data["notes"]


@pytest.mark.parametrize("args, message", [
    (["--ab-rounds", "1", "--ab-variants", "base,turbo"], "A/B variant 'turbo' is not known"),
    (["--skip-parts", "folder,everything"], "--skip-parts everything: not a part"),
])
def test_an_unknown_ab_variant_or_part_stops_the_benchmark_before_anything_runs(tmp_path, args, message):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "pipeline_h200.py"), "--fake", "--out",
                           str(tmp_path), *args], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2 and message in proc.stderr
    assert not (tmp_path / "pipeline-h200.json").exists()


def test_the_encoder_contention_benchmark_brackets_every_condition(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "encoder_contention_h200.py"), "--fake", "--out",
                           str(tmp_path), "--rounds", "2"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((tmp_path / "encoder-contention-h200.json").read_text())
    assert data["errors"] == {}, json.dumps(data)[:3000]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["encoder-contention-h200.json"]  # its checkpoints too
    # no NVDEC on this machine: said, and the other conditions measured twice each
    assert set(data["conditions"]) == {"pipeline_pyav", "decoder_thread", "decoder_process"}
    assert "NVDEC" in data["notes"]["pipeline_nvdec"]
    for run in data["runs"]:  # each against the encoder alone just before and just after it
        assert run["ratio"] == round(run["beside_fps"] / ((run["before_fps"] + run["after_fps"]) / 2), 3)
        assert run["other_fps"] > 0
    runs = data["runs"]
    assert all(a["after_fps"] == b["before_fps"] for a, b in zip(runs, runs[1:]))
    assert [r["round"] for r in runs] == [0, 0, 0, 1, 1, 1]


def test_the_encoder_contention_benchmark_refuses_an_unknown_condition(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "encoder_contention_h200.py"), "--fake", "--out",
                           str(tmp_path), "--conditions", "pipeline_pyav,vacuum"], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.returncode == 2 and "--conditions pipeline_pyav,vacuum" in proc.stderr
