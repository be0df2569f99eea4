"""Ultralytics' ONNX metadata: ``task`` keeps a pose model from being read as a detector (a YOLOv8-pose head
(N, 56, 8400) also fits the yolov8 layout as 52 classes) and the other way round; ``kpt_shape`` tells how many
values each keypoint has."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from tests import models
from tests.detection.test_pose import pose_head
from tests.pipeline.media import make_image_folder
from tests.runtime.fakes import fake_engine_bytes
from trtkit.cli import main as cli_main
from trtkit.detection.names import check_task, metadata_kpt_shape, model_metadata
from trtkit.detection.pose import decode_pose_head, pose_layout
from trtkit.errors import InputError, UsageError

PROFILE = [{"images": [[1, 3, 32, 32], [2, 3, 32, 32], [4, 3, 32, 32]]}]
PERSON = [(0, (16, 16, 8, 8), 0.9, [(14, 12, 0.9)] * 17)]


def onnx_file(path, output, metadata):
    model = models.constant_pose(output, name="output0")
    onnx.helper.set_model_props(model, metadata)
    onnx.save(model, path)
    return path


def engine_file(path, output, metadata):
    path.write_bytes(fake_engine_bytes(models.constant_pose(output, name="output0"), PROFILE))
    path.with_name(path.name + ".manifest.json").write_text(json.dumps({"model": {"metadata": metadata}}))
    return path


def errors(capsys) -> list:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_the_task_and_kpt_shape_of_the_metadata(tmp_path):
    path = onnx_file(tmp_path / "pose.onnx", pose_head(PERSON, keypoints=17), {"task": "pose", "kpt_shape": "[17, 3]"})
    assert model_metadata(path) == {"task": "pose", "kpt_shape": "[17, 3]"}
    assert metadata_kpt_shape(model_metadata(path)) == (17, 3) and metadata_kpt_shape({"kpt_shape": "[4, 2]"}) == (4, 2)
    assert all(metadata_kpt_shape(m) is None for m in (None, {}, {"kpt_shape": "17"}, {"kpt_shape": "[17, 5]"}))
    check_task({"task": "pose"}, "pose", {})
    check_task({}, "detect", {})  # no metadata: the outputs decide, as before
    with pytest.raises(UsageError, match=r"^'m' is a pose model \(its metadata says task: pose\), not a detect one: "
                                         r"give --post pose$"):
        check_task({"task": "pose"}, "detect", {"pose": "--post pose"}, "'m'")
    with pytest.raises(UsageError, match=r"task: obb\), not a detect one, which this does not decode$"):
        check_task({"task": "obb"}, "detect", {"pose": "--post pose"})


def test_a_head_of_x_y_keypoints_read_by_its_kpt_shape():
    head = np.zeros((1, 5 + 2 * 3, 4), np.float32)  # 3 keypoints of x, y: would read as 2 of x, y, visibility
    head[0, :5, 1] = (20, 20, 10, 10, 0.9)
    head[0, 5:, 1] = (11, 12, 13, 14, 15, 16)
    (poses,) = decode_pose_head(head, kpt_shape=(3, 2))
    np.testing.assert_allclose(poses.points[0], [[11, 12], [13, 14], [15, 16]])
    np.testing.assert_allclose(poses.confidence, [[1, 1, 1]])  # no visibility: every keypoint shown
    assert decode_pose_head(head)[0].points.shape == (1, 2, 2)  # what the shape alone says
    with pytest.raises(InputError, match=r"shape \(1, 11, 4\), which its kpt_shape \[17, 3\] does not fit"):
        pose_layout(head, (17, 3))


def test_run_refuses_the_other_tasks_post_in_one_line(fake_gpu, tmp_path, capsys):
    make_image_folder(tmp_path / "in", count=1)
    pose = engine_file(tmp_path / "pose.engine", pose_head(PERSON, keypoints=17), {"task": "pose"})  # (1, 56, 6)
    detect = engine_file(tmp_path / "det.engine", pose_head(PERSON, keypoints=17), {"task": "detect"})
    for engine, post, message in ((pose, "detection", f"error: '{pose}' is a pose model (its metadata says task: "
                                   "pose), not a detect one: give --post pose"),
                                  (detect, "pose", f"error: '{detect}' is a detect model (its metadata says task: "
                                   "detect), not a pose one: give --post detection")):
        argv = ["run", str(engine), "--images", str(tmp_path / "in"), "--out", str(tmp_path / "out"), "--post", post]
        assert cli_main.main(argv) == 2
        assert errors(capsys) == [message]
        assert not (tmp_path / "out").exists()


def test_run_post_pose_decodes_by_the_kpt_shape(fake_gpu, tmp_path, capsys):
    make_image_folder(tmp_path / "in", count=1, sizes=((32, 32),))
    head = np.zeros((1, 5 + 2 * 3, 4), np.float32)
    head[0, :5, 1], head[0, 5:, 1] = (16, 16, 8, 8, 0.9), (11, 12, 13, 14, 15, 16)
    engine = engine_file(tmp_path / "xy.engine", head, {"task": "pose", "kpt_shape": "[3, 2]"})
    results = tmp_path / "r.jsonl"
    argv = ["run", str(engine), "--images", str(tmp_path / "in"), "--post", "pose", "--results", str(results)]
    assert cli_main.main(argv) == 0, capsys.readouterr().err
    (line,) = [json.loads(text) for text in results.read_text().splitlines()]
    np.testing.assert_allclose(line["result"]["points"][0], [[11, 12], [13, 14], [15, 16]], atol=1e-4)


def test_eval_refuses_a_model_of_the_other_task(tmp_path, capsys):
    pose = onnx_file(tmp_path / "pose.onnx", pose_head(PERSON, keypoints=17), {"task": "pose"})
    detect = onnx_file(tmp_path / "det.onnx", pose_head(PERSON, keypoints=17), {"task": "detect"})
    argv = ["eval", "detection", str(pose), "--images", str(tmp_path), "--coco", str(tmp_path / "val.json")]
    assert cli_main.main(argv) == 2
    assert errors(capsys) == [f"error: '{pose}' is a pose model (its metadata says task: pose), not a detect one: "
                              "give eval keypoints"]
    assert cli_main.main(["eval", "keypoints", str(detect), "--reference", str(detect), "--images", str(tmp_path)]) == 2
    assert errors(capsys) == [f"error: '{detect}' is a detect model (its metadata says task: detect), not a pose "
                              "one: give eval detection"]
