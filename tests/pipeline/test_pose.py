"""``--post pose``: keypoints of fake heatmap and YOLOv8-pose engines decoded per frame, mapped back through the
letterbox or resize, written per frame and drawn with their skeleton on a generated video."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests import models
from tests.detection.test_pose import gaussians, pose_head
from tests.pipeline.media import decode_all, frame_picture, make_video
from tests.runtime.fakes import fake_engine_bytes
from trtkit.cli import main as cli_main
from trtkit.errors import PipelineError

PROFILE = [{"images": [[1, 3, 32, 32], [2, 3, 32, 32], [4, 3, 32, 32]]}]
# 17 keypoints on an 8x8 map of the 32x32 input (stride 4), each at a sub-pixel centre
CENTRES = np.stack([np.linspace(1.3, 6.3, 17), np.linspace(2.2, 5.4, 17)], -1)[None]


def engine_of(output, path):
    path.write_bytes(fake_engine_bytes(models.constant_pose(output), PROFILE))
    return path


def test_heatmap_keypoints_in_frame_pixels_drawn_and_written(backends, tmp_path):
    from trtkit.pipeline import ArraySource, CallbackSink, JsonLinesSink, pose_processing, run_engine

    engine = engine_of(gaussians(CENTRES, (8, 8), sigma=1.0), tmp_path / "pose.engine")
    frames, seen = [frame_picture(i, 64, 48) for i in range(5)], []
    for resize, expected in (("letterbox", (CENTRES[0] * 4 - [0, 4]) / 0.5), ("stretch", CENTRES[0] * [8, 6])):
        seen.clear()
        run_engine(engine, ArraySource(frames), sinks=[CallbackSink(seen.append), JsonLinesSink(tmp_path / "r.jsonl")],
                   processing=pose_processing(resize=resize), resize=resize, **backends)
        for frame in seen:
            np.testing.assert_allclose(frame.result.points[0], expected, atol=1e-3)
            assert frame.image.shape == (48, 64, 3) and not np.array_equal(frame.image, frames[frame.index])
    lines = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert len(lines) == 5 and np.allclose(np.array(lines[0]["result"]["points"][0]), expected, atol=1e-3)


def test_yolov8_pose_people_mapped_back_with_their_boxes(backends, tmp_path):
    from trtkit.pipeline import ArraySource, CallbackSink, pose_processing, run_engine

    head = pose_head([(0, (16, 16, 8, 8), 0.9, [(14, 12, 0.9), (18, 20, 0.8)])], anchors=4)
    seen = []
    run_engine(engine_of(head, tmp_path / "yolo.engine"), ArraySource([frame_picture(0, 64, 48)]),
               sinks=[CallbackSink(seen.append)], processing=pose_processing(), **backends)
    (frame,) = seen
    np.testing.assert_allclose(frame.result.boxes, [[24, 16, 40, 32]], atol=1e-4)
    np.testing.assert_allclose(frame.result.points[0], [[28, 16], [36, 32]], atol=1e-4)


def test_run_post_pose_on_a_video_with_results(fake_gpu, tmp_path, capsys):
    pytest.importorskip("av")
    engine = engine_of(gaussians(CENTRES, (8, 8), sigma=1.0), tmp_path / "pose.engine")
    video, out, results = make_video(tmp_path / "in.mp4", frames=8), tmp_path / "out.mp4", tmp_path / "r.jsonl"
    argv = ["run", str(engine), "--video", str(video), "--out", str(out), "--post", "pose", "--skeleton", "coco17",
            "--results", str(results), "--decoder", "pyav", "--no-live"]
    assert cli_main.main(argv) == 0, capsys.readouterr().err
    assert len(decode_all(out)) == 8 and len(results.read_text().splitlines()) == 8
    assert {"postprocess", "annotate"} <= set(capsys.readouterr().out.split())


def test_refusals(fake_gpu, tmp_path, capsys):
    pytest.importorskip("av")
    five = engine_of(gaussians(CENTRES[:, :5], (8, 8)), tmp_path / "five.engine")
    video, out = make_video(tmp_path / "in.mp4", frames=4), tmp_path / "out.mp4"
    base = ["run", str(five), "--video", str(video), "--decoder", "pyav", "--no-live"]
    for extra, code, message in (
        (["--out", str(out), "--post", "pose", "--skeleton", "coco17"], 1,
         "Skeleton 'coco17' joins 17 keypoints; the model gives 5: give a skeleton for 5 keypoints"),
        (["--post", "pose", "--skeleton", str(tmp_path / "missing.json"), "--results", str(tmp_path / "r.jsonl")], 1,
         "is neither built in (coco17) nor a JSON file"),
        (["--out", str(out), "--skeleton", "coco17"], 2, "--skeleton names the lines between pose keypoints"),
    ):
        assert cli_main.main(base + extra) == code
        errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and message in errors[0], errors
    assert not out.exists() and not (tmp_path / "r.jsonl").exists()  # nothing half-written


def test_a_skeleton_mismatch_stops_the_pipeline_on_the_first_frame(backends, tmp_path):
    from trtkit.pipeline import ArraySource, pose_processing, run_engine

    engine = engine_of(gaussians(CENTRES[:, :5], (8, 8)), tmp_path / "five.engine")
    with pytest.raises(PipelineError, match="stage 'postprocess' failed on frame 0: Skeleton 'coco17' joins 17"):
        run_engine(engine, ArraySource([frame_picture(0)]), processing=pose_processing("coco17"), **backends)
