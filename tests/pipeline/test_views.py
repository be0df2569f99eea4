"""Multi-view models: one source per camera view (a 5-D input as Lightning Pose's multi-view models take them, or an
input per view), frames in lockstep, keypoints mapped back to each view's frame, outputs per view."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests import models
from tests.detection.test_pose import gaussians
from tests.pipeline.media import decode_all, make_video
from tests.runtime.fakes import fake_engine_bytes
from trtkit.cli import main as cli_main
from trtkit.errors import InputError

STACKED = [{"images": [[1, 2, 3, 32, 32], [2, 2, 3, 32, 32], [4, 2, 3, 32, 32]]}]
SEPARATE = [{name: [[1, 3, 32, 32], [2, 3, 32, 32], [4, 3, 32, 32]] for name in ("top", "side")}]
# 5 keypoints per view on an 8x8 map of the 32x32 input (stride 4): the views' peaks differ
TOP = np.stack([np.linspace(1.3, 6.3, 5), np.linspace(2.2, 5.4, 5)], -1)
SIDE = TOP[::-1] * [0.9, 1.1]


def engine(path, profile=STACKED, **options):
    path.write_bytes(fake_engine_bytes(models.multiview(**options), profile))
    return path


def pose_engine(path):
    heatmaps = np.concatenate([gaussians(TOP[None], (8, 8)), gaussians(SIDE[None], (8, 8))], axis=1)
    return engine(path, heatmaps=heatmaps)


def gray(levels, width=32, height=32):
    return [np.full((height, width, 3), level, np.uint8) for level in levels]


def test_keypoints_of_each_view_mapped_to_its_own_frame(backends, tmp_path):
    from trtkit.pipeline import ArraySource, CallbackSink, JsonLinesSink, pose_processing, run_engine

    top, side = gray(range(0, 40, 10), 64, 48), gray(range(5, 45, 10), 48, 64)  # landscape and portrait
    seen = []
    sinks = [CallbackSink(seen.append), JsonLinesSink(tmp_path / "r.jsonl")]
    report = run_engine(pose_engine(tmp_path / "mv.engine"), {"top": ArraySource(top), "side": ArraySource(side)},
                        sinks=sinks, processing=pose_processing(), **backends)
    assert report.frames_out == 4 and report.source["engine_input"] == "images"
    for frame in seen:  # letterboxed to 32x32 at scale 0.5: top padded 4 rows at the top, side 4 columns at the left
        np.testing.assert_allclose(frame.result["top"].points[0], (TOP * 4 - [0, 4]) / 0.5, atol=1e-3)
        np.testing.assert_allclose(frame.result["side"].points[0], (SIDE * 4 - [4, 0]) / 0.5, atol=1e-3)
        assert frame.image["top"].shape == (48, 64, 3) and frame.image["side"].shape == (64, 48, 3)
        assert not np.array_equal(frame.image["side"], side[frame.index])  # drawn
    lines = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert len(lines) == 4 and set(lines[0]["result"]) == {"top", "side"}


@pytest.mark.parametrize("profile, options", [(STACKED, {}), (SEPARATE, {"inputs": ("top", "side")})])
def test_frames_are_paired_by_index_and_the_run_stops_at_the_shortest_view(backends, tmp_path, caplog, profile,
                                                                            options):
    from trtkit.pipeline import ArraySource, CallbackSink, run_engine

    seen = []
    sources = {"side": ArraySource(gray([5, 15, 25])), "top": ArraySource(gray([0, 10, 20, 30, 40]))}
    if not options:  # a 5-D input takes the views in the order given
        sources = dict(reversed(sources.items()))
    report = run_engine(engine(tmp_path / "mv.engine", profile, **options), sources, sinks=[CallbackSink(seen.append)],
                        batch=2, **backends)
    means = np.array([frame.outputs["means"] for frame in seen]) * 255
    np.testing.assert_allclose(means, [[0, 5], [10, 15], [20, 25]], atol=1e-3)  # top then side, frame by frame
    assert "view side ended after 3 frame(s): stopped at the shortest" in report.source["stopped"]
    assert "stopped at the shortest" in caplog.text


class Unread:
    """A source that fails the test if a frame is read."""

    fps = 25

    def __iter__(self):
        raise AssertionError("a frame was read")

    def close(self):
        pass


@pytest.mark.parametrize("profile, options, sources, message", [
    (SEPARATE, {"inputs": ("top", "side")}, ("top", "side", "front"),
     "View 'front' is no input of the engine; its inputs: top, side"),
    (SEPARATE, {"inputs": ("top", "side")}, ("top",), "Engine input 'side' has no source; give one per input"),
    (STACKED, {}, ("top",), "Engine input 'images' (-1, 2, 3, 32, 32) takes 2 views, in order; 1 source(s) are given"),
])
def test_views_the_engine_does_not_take_are_refused_before_any_frame(backends, tmp_path, profile, options, sources,
                                                                      message):
    from trtkit.pipeline import run_engine

    with pytest.raises(InputError) as caught:
        run_engine(engine(tmp_path / "mv.engine", profile, **options), {s: Unread() for s in sources}, **backends)
    assert message in str(caught.value)


def test_a_single_source_for_a_multi_view_engine_is_told_to_give_one_per_view(backends, tmp_path):
    from trtkit.pipeline import ArraySource, run_engine

    with pytest.raises(InputError, match=r"a multi-view input \(N, V, C, H, W\) takes a source per view"):
        run_engine(engine(tmp_path / "mv.engine"), ArraySource(gray([0])), **backends)


def test_run_views_with_an_output_per_view_and_results(fake_gpu, tmp_path, capsys):
    pytest.importorskip("av")
    top, side = make_video(tmp_path / "top.mp4", frames=6, fps=25), make_video(tmp_path / "side.mp4", frames=4, fps=30)
    out, results = tmp_path / "top_out.mp4", tmp_path / "r.jsonl"
    argv = ["run", str(pose_engine(tmp_path / "mv.engine")), "--view", f"top={top}", "--view", f"side={side}",
            "--post", "pose", "--out", f"top={out}", "--results", str(results), "--decoder", "pyav", "--no-live"]
    assert cli_main.main(argv) == 0
    printed = capsys.readouterr()
    assert len(decode_all(out)) == 4 and not (tmp_path / "side_out.mp4").exists()
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(lines) == 4 and len(lines[0]["result"]["side"]["points"][0]) == 5
    assert "view side ended after 4 frame(s): stopped at the shortest" in printed.err
    assert "frame rates differ (top 25, side 30 fps)" in printed.err


def test_run_view_refusals(fake_gpu, tmp_path, capsys):
    pytest.importorskip("av")
    mv, video = engine(tmp_path / "mv.engine", SEPARATE, inputs=("top", "side")), make_video(tmp_path / "v.mp4")
    base = ["run", str(mv), "--decoder", "pyav", "--no-live", "--view", f"top={video}"]
    for extra, code, message in (
        (["--view", f"front={video}"], 1, "View 'front' is no input of the engine; its inputs: top, side"),
        ([], 1, "Engine input 'side' has no source"),
        (["--view", str(video)], 2, f"--view '{video}': give NAME=FILE"),
        (["--view", f"side={video}", "--out", f"front={tmp_path / 'o.mp4'}"], 2, "'front' is not a --view"),
        (["--view", f"side={video}", "--video", str(video)], 2, "not allowed with argument"),
    ):
        assert cli_main.main(base + extra) == code
        err = capsys.readouterr().err
        assert message in err.replace("\n", " "), err
    assert not list(tmp_path.glob("o.mp4*"))
