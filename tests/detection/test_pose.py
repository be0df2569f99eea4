"""trtkit.detection.pose: heatmap keypoints below the cell on synthetic Gaussians with known centres, YOLOv8-pose
heads, the way back to the frame through a letterbox or a plain resize, skeletons and drawing."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from trtkit.detection import Letterbox, letterbox_meta
from trtkit.detection.pose import (
    Poses,
    Skeleton,
    decode_heatmaps,
    decode_pose_head,
    decode_poses,
    draw_poses,
    load_skeleton,
    pose_layout,
    to_frame,
)
from trtkit.errors import InputError


def gaussians(centres, shape, sigma=1.5, normalize=False, precision=None):
    """(N, K, H, W) heatmaps of Gaussians at ``centres`` (N, K, 2) x, y in cells; ``precision``: a 2x2 inverse
    covariance (anisotropic, rotated) instead of ``sigma``."""
    rows, cols = shape
    yy, xx = np.mgrid[0:rows, 0:cols]
    d = np.stack([xx - centres[..., 0, None, None], yy - centres[..., 1, None, None]], -1)
    inverse = np.eye(2) / sigma**2 if precision is None else np.asarray(precision)
    maps = np.exp(-np.einsum("...i,ij,...j->...", d, inverse, d) / 2)
    return maps / maps.sum((-2, -1), keepdims=True) if normalize else maps


@pytest.mark.parametrize("kind", ["unnormalized", "softmax-normalized", "anisotropic"])
def test_subpixel_centres_of_gaussians_far_closer_than_the_peak_cell(kind):
    rng = np.random.default_rng(0)
    centres = np.stack([rng.uniform(2, 13, (8, 5)), rng.uniform(2, 9, (8, 5))], -1)  # x in 0..16, y in 0..12
    maps = gaussians(centres, (12, 16), normalize=kind == "softmax-normalized",
                     precision=[[0.3, 0.12], [0.12, 0.6]] if kind == "anisotropic" else None)
    truth = centres * 4  # a 48x64 input, stride 4
    refined, confidence = decode_heatmaps(maps.astype(np.float32), (48, 64))
    cell, _ = decode_heatmaps(maps, (48, 64), refine=False)
    refined_error = np.linalg.norm(refined - truth, axis=-1)
    cell_error = np.linalg.norm(cell - truth, axis=-1)
    assert refined_error.max() < 0.01 and cell_error.mean() > 0.8  # input pixels; a cell is 4 of them
    assert refined.shape == (8, 5, 2) and confidence.shape == (8, 5) and confidence.min() > 0.5


def test_float16_heatmaps_move_refined_keypoints_by_a_small_fraction_of_a_pixel():
    rng = np.random.default_rng(2)
    maps = gaussians(np.stack([rng.uniform(3, 60, (4, 8)), rng.uniform(3, 60, (4, 8))], -1), (64, 64), sigma=1.25,
                     normalize=True)  # Lightning Pose's form: 64x64 softmax heatmaps of a 256x256 input
    exact, _ = decode_heatmaps(maps, (256, 256))
    rounded, _ = decode_heatmaps(maps.astype(np.float16), (256, 256))
    assert np.linalg.norm(rounded - exact, axis=-1).max() < 0.05


def test_confidence_is_high_for_one_peak_about_half_for_two_and_low_for_a_flat_map():
    one = gaussians(np.array([[[8.0, 8.0]]]), (16, 16), sigma=1.0)[0, 0]
    two = one + np.roll(one, 7, axis=1)
    flat = np.ones((16, 16)) + np.random.default_rng(1).uniform(0, 1e-3, (16, 16))
    _, confidence = decode_heatmaps(np.stack([one, two, flat])[None], (64, 64))
    high, split, low = confidence[0]
    assert high > 0.95 and 0.4 < split < 0.6 and low < 0.15


def test_peaks_on_the_border_and_saddles_stay_at_their_cell():
    maps = np.zeros((1, 2, 8, 8), np.float32)
    maps[0, 0, 0, 5] = 1.0  # on the top border
    maps[0, 0, 1, 5] = 0.5
    maps[0, 1, 3:6, 3:6] = [[0.95, 0.5, 0.05], [0.5, 1.0, 0.5], [0.05, 0.5, 0.95]]  # a saddle along the diagonals
    points, _ = decode_heatmaps(maps, (32, 32))
    np.testing.assert_allclose(points[0], [[20, 0], [16, 16]])


def test_points_go_back_through_a_letterbox_and_a_plain_resize():
    points = np.array([[16.0, 16.0], [0.0, 4.0]], np.float32)
    meta = letterbox_meta(64, 48, (32, 32))  # scale 0.5, 4 rows of padding on top
    np.testing.assert_allclose(to_frame(points, meta), [[32, 24], [0, 0]])
    _, metas = Letterbox((32, 32))([np.zeros((48, 64, 3), np.uint8)])
    np.testing.assert_allclose(to_frame(points, metas[0]), [[32, 24], [0, 0]])
    # the pipeline's meta: the same letterbox, and a plain resize of 64x48 to 32x32 (x by 0.5, y by 2/3)
    np.testing.assert_allclose(to_frame(points, {"scale": 0.5, "pad": (0, 4)}), [[32, 24], [0, 0]])
    np.testing.assert_allclose(to_frame(points, {"scale": (0.5, 32 / 48), "pad": (0, 0)}), [[32, 24], [0, 6]])


def pose_head(people, keypoints=2, anchors=6):
    """(1, 5 + 3K, anchors) head: ``people`` is [(anchor, (cx, cy, w, h), score, [(x, y, v), ...])]."""
    head = np.zeros((1, 5 + 3 * keypoints, anchors), np.float32)
    for anchor, box, score, points in people:
        head[0, :4, anchor], head[0, 4, anchor] = box, score
        head[0, 5:, anchor] = np.ravel(points)
    return head


def test_yolov8_pose_head_keeps_people_through_nms_with_their_keypoints():
    head = pose_head([(1, (20, 20, 10, 10), 0.9, [(18, 17, 0.9), (22, 23, 0.2)]),
                      (2, (21, 20, 10, 10), 0.8, [(0, 0, 1), (0, 0, 1)]),      # the same person: suppressed
                      (4, (50, 50, 8, 8), 0.6, [(49, 48, 0.7), (51, 52, 0.6)]),
                      (5, (10, 50, 8, 8), 0.1, [(9, 49, 0.9), (11, 51, 0.9)])])  # below the score threshold
    (poses,) = decode_pose_head(head)
    assert poses.points.shape == (2, 2, 2) and pose_layout(head) == "yolov8-pose"
    np.testing.assert_allclose(poses.points[0], [[18, 17], [22, 23]])
    np.testing.assert_allclose(poses.confidence, [[0.9, 0.2], [0.7, 0.6]])
    np.testing.assert_allclose(poses.boxes[1], [46, 46, 54, 54])
    (nobody,) = decode_pose_head(head, conf_threshold=0.95)
    assert nobody.points.shape == (0, 2, 2) and nobody.boxes.shape == (0, 4)
    mapped = poses.mapped({"scale": 0.5, "pad": (0, 4)})
    np.testing.assert_allclose(mapped.boxes[1], [92, 84, 108, 100])
    np.testing.assert_allclose(mapped.points[0, 0], [36, 26])


def test_decode_poses_reads_either_layout_and_refuses_others():
    maps = gaussians(np.array([[[3.25, 2.5]]]), (8, 8))
    (poses,) = decode_poses(maps, (32, 32))
    assert poses.boxes is None and poses.points.shape == (1, 1, 2)
    np.testing.assert_allclose(poses.points[0, 0], [13, 10], atol=1e-3)
    with pytest.raises(InputError, match=r"heatmaps \(N, K, H, W\) or a YOLOv8-pose head .* shape \(1, 7, 3\)"):
        decode_poses(np.zeros((1, 7, 3)), (8, 8))


def test_skeletons_built_in_and_from_a_file(tmp_path):
    coco = load_skeleton("coco17")
    coco.check(17)
    with pytest.raises(InputError, match=r"Skeleton 'coco17' joins 17 keypoints; the model gives 12: give a skel"):
        coco.check(12)
    (tmp_path / "paw.json").write_text("[[0, 1], [1, 2]]")
    paw = load_skeleton(str(tmp_path / "paw.json"))
    paw.check(3)
    paw.check(5)
    with pytest.raises(InputError, match="joins 3 keypoints; the model gives 2"):
        paw.check(2)
    for text in ("[[0, 1], [1]]", "[[0, -1]]", "{}", "not json"):
        (tmp_path / "bad.json").write_text(text)
        with pytest.raises(InputError, match=r"neither built in \(coco17\) nor a JSON file of \[a, b\]"):
            load_skeleton(str(tmp_path / "bad.json"))
    with pytest.raises(InputError, match="Skeleton 'coco18' is neither built in"):
        load_skeleton("coco18")


def test_drawing_shows_confident_keypoints_and_their_lines():
    poses = Poses(np.array([[[10, 10], [30, 10], [30, 30]]], np.float32), np.array([[0.9, 0.9, 0.1]], np.float32))
    skeleton = Skeleton("three", ((0, 1), (1, 2)))
    out = np.asarray(draw_poses(Image.new("RGB", (40, 40)), poses, skeleton))
    assert out[10, 10].any() and out[10, 20].any()  # a keypoint, and the line from it to the next
    assert not out[30, 30].any() and not out[20, 30].any()  # below the confidence: neither it nor its line
