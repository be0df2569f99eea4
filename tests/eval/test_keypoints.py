"""`trtkit eval keypoints`: keypoint deviation of a pose model from its reference in frame pixels, over all and over
confident keypoints, on image folders and frames sampled from a video; the refusals."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from PIL import Image

from tests import models
from tests.detection.test_pose import gaussians, pose_head
from tests.runtime.fakes import fake_engine_bytes, fake_gpu  # noqa: F401 - fixture
from trtkit.cli.main import main
from trtkit.errors import InputError
from trtkit.eval.keypoints import compare, evaluate_keypoints
from trtkit.eval.models import Model

CENTRES = np.array([[[2.5, 3.0], [5.0, 5.0], [4.0, 4.0]]])  # cells of an 8x8 map of a 32x32 input (stride 4)


def heatmap_model(shift_x: float = 0.0):
    """A callable model: Gaussian heatmaps at CENTRES (keypoint 0 moved ``shift_x`` cells), keypoint 2 flat (no
    confidence: its peak is wherever noise puts it, in a different cell for each model)."""

    def infer(feed):
        n = len(feed["images"])
        maps = gaussians(CENTRES + [[shift_x, 0], [0, 0], [0, 0]], (8, 8), sigma=1.0)
        maps[:, 2] = 1 + np.random.default_rng(int(shift_x * 10)).uniform(0, 1e-3, (8, 8))
        return {"heatmaps": np.repeat(maps, n, 0).astype(np.float32)}

    return Model(infer, "images", ("N", 3, 32, 32), 4)


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "images").mkdir()
    for i in range(3):  # a red, a green and a blue spot: the three keypoints of models.pooled_heatmaps
        pixels = np.zeros((64, 64, 3), np.uint8)
        for channel, (x, y) in enumerate([(20 + i, 12), (40, 30 + i), (10, 50)]):
            pixels[y : y + 6, x : x + 6, channel] = 255
        Image.fromarray(pixels).save(tmp_path / "images" / f"{i}.png")
    return tmp_path / "images"


def test_subpixel_deviation_in_frame_pixels_over_confident_keypoints(folder):
    result = evaluate_keypoints(heatmap_model(0.3), heatmap_model(), images=folder)
    # 0.3 cells = 1.2 input pixels = 2.4 pixels of the 64x64 frame (letterboxed to 32x32 at scale 0.5)
    assert result.confident.keypoints == 6 and result.confident.max_px == pytest.approx(2.4, abs=1e-3)
    assert result.confident.mean_px == pytest.approx(1.2, abs=1e-3)
    assert result.all.keypoints == 9 and result.all.max_px > 5  # the flat keypoint moved to another cell
    assert (result.images, result.layout, result.decoding) == (3, "heatmaps", "subpixel")
    cell = evaluate_keypoints(heatmap_model(0.3), heatmap_model(), images=folder, refine=False)
    assert cell.decoding == "peak-cell" and cell.confident.max_px == 8.0  # 2.5 → 2.8 cells: the next cell, 8 px


def test_yolov8_pose_keypoints_of_the_reference_person():
    ref = pose_head([(1, (20, 20, 10, 10), 0.9, [(10, 20, 0.9), (30, 40, 0.3)])], anchors=3)
    ours = ref.copy()
    ours[0, 5:7, 1] = [13, 24]
    ours[0, 5:, 2] = 999  # other anchors do not count
    identity = {"scale": 1.0, "pad": (0, 0)}
    d, confidence, layout = compare(ours, ref, (64, 64), [identity])
    assert layout == "yolov8-pose" and d.tolist() == [5.0, 0.0] and confidence.tolist() == pytest.approx([0.9, 0.3])
    d, _, _ = compare(ours, ref, (64, 64), [{"scale": (0.5, 0.25), "pad": (0, 0)}])  # a plain resize
    assert d.tolist() == [pytest.approx(np.hypot(6, 16)), 0.0]
    with pytest.raises(InputError, match=r"output \(1, 11, 2\) and the reference.s \(1, 11, 3\) differ"):
        compare(ours[:, :, :2], ref, (64, 64), [identity])


@pytest.fixture
def pose_files(tmp_path, folder):
    onnx.save(models.pooled_heatmaps(), tmp_path / "pose.onnx")
    (tmp_path / "pose.engine").write_bytes(fake_engine_bytes(models.pooled_heatmaps(), [
        {"images": [[1, 3, 32, 32], [2, 3, 32, 32], [4, 3, 32, 32]]}]))
    onnx.save(models.pooled_heatmaps(name="coords"), tmp_path / "other.onnx")
    return tmp_path


def test_cli_on_the_fake_engine_against_its_onnx_model(fake_gpu, pose_files, capsys):  # noqa: F811
    from tests.pipeline.media import make_video

    video = make_video(pose_files / "in.mp4", frames=12, width=64, height=48)
    base = ["eval", "keypoints", str(pose_files / "pose.engine"), "--reference", str(pose_files / "pose.onnx")]
    assert main(base + ["--video", str(video), "--frames", "5", "--json", "-"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["images"] == 5 and out["all"]["keypoints"] == 15 and out["all"]["max_px"] == 0.0
    assert out["units"] == "frame pixels" and out["decoding"] == "subpixel"
    images = ["--images", str(pose_files / "images"), "--max-px", "0.01"]
    assert main(base + images + ["--json", "-"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["passed"] and out["confident"]["keypoints"] == 9 and out["confident"]["max_px"] == 0.0
    assert main(base + images + ["--peak-cell", "--preprocess", "resize=stretch"]) == 0
    table = capsys.readouterr().out
    assert "3 frames, heatmaps, peak-cell" in table and "confidence >= 0.5" in table
    # the gate fails where no keypoint is confident
    assert main(base + ["--video", str(video), "--max-px", "1"]) == 1
    assert "FAIL: no confident keypoint" in capsys.readouterr().out


def test_refusals_say_what_is_wrong_in_one_line(fake_gpu, pose_files, capsys):  # noqa: F811
    from tests.pipeline.media import make_video

    engine, video = str(pose_files / "pose.engine"), make_video(pose_files / "short.mp4", frames=6)
    cases = [
        (["--video", str(video), "--frames", "10", "--reference", str(pose_files / "pose.onnx")],
         f"Frames of video '{video}': 6, fewer than the 10 asked to sample; sample 6 or fewer."),
        (["--images", str(pose_files / "images"), "--frames", "4", "--reference", str(pose_files / "pose.onnx")],
         "fewer than the 4 asked to sample; sample 3 or fewer."),
        (["--images", str(pose_files / "images"), "--reference", str(pose_files / "other.onnx")],
         "has outputs coords;"),
    ]
    for argv, message in cases:
        assert main(["eval", "keypoints", engine, *argv]) == 1
        errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and message in errors[0], errors
    assert main(["eval", "keypoints", engine, "--images", "x"]) == 2  # --reference is required
    assert "--reference" in capsys.readouterr().err
    with pytest.raises(InputError, match="give it as reference"):
        evaluate_keypoints(heatmap_model(), None, images=pose_files / "images")


def test_onnx_models_as_lightning_pose_and_ultralytics_export_them(folder, tmp_path):
    # Lightning Pose's export is float16 by default (the float32 batches are cast to it); ultralytics' dynamic
    # export leaves height and width symbolic and writes its size as the imgsz metadata
    half, dynamic = models.pooled_heatmaps(), models.pooled_heatmaps()
    w = onnx.numpy_helper.to_array(half.graph.initializer[0]).astype(np.float16)
    half.graph.initializer[0].CopyFrom(onnx.numpy_helper.from_array(w, "w"))
    for value in (half.graph.input[0], half.graph.output[0]):
        value.type.tensor_type.elem_type = onnx.TensorProto.FLOAT16
    for value in (dynamic.graph.input[0], dynamic.graph.output[0]):
        for dim in value.type.tensor_type.shape.dim[2:]:
            dim.dim_param = "hw"
    onnx.helper.set_model_props(dynamic, {"imgsz": "[32, 32]"})
    onnx.save(half, tmp_path / "half.onnx")
    onnx.save(dynamic, tmp_path / "dynamic.onnx")
    result = evaluate_keypoints(str(tmp_path / "dynamic.onnx"), str(tmp_path / "half.onnx"), images=folder)
    assert result.images == 3 and result.confident.keypoints == 9 and result.confident.max_px < 0.05
