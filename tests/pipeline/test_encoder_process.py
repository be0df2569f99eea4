"""The encoder in a child process (VideoSink(in_process=True)): a playable file with every frame, nothing left on
discard or when the child dies, the same errors as the in-process writer."""

from __future__ import annotations

import numpy as np
import pytest

from tests.pipeline.media import frame_picture
from trtkit.errors import InputError, TrtkitError
from trtkit.pipeline import ArraySource, Pipeline, VideoSink
from trtkit.pipeline.encoder_process import ProcessVideoWriter
from trtkit.pipeline.video import PyAVReader

pytest.importorskip("av")


def read_back(path) -> list:
    reader = PyAVReader(path)
    try:
        return list(reader)
    finally:
        reader.close()


def hidden(folder) -> list:
    return [p.name for p in folder.iterdir() if p.name.startswith(".")]


def test_a_pipeline_encoding_in_a_child_process_writes_every_frame(tmp_path):
    out = tmp_path / "out.mp4"
    frames = [frame_picture(i, 64, 48) for i in range(25)]
    report = Pipeline(ArraySource(frames), [], [VideoSink(out, fps=25, codec="mpeg4", in_process=True)]).run()
    got = read_back(out)
    assert report.frames_out == len(got) == 25 and got[0].shape == (48, 64, 3)
    # the first frame's picture survives the round trip through shared memory and the encoder
    assert np.abs(got[0].astype(int) - frames[0]).mean() < 20
    assert hidden(tmp_path) == []


def test_discard_leaves_nothing_and_the_child_exits(tmp_path):
    writer = ProcessVideoWriter(tmp_path / "out.mp4", fps=25, codec="mpeg4")
    for i in range(5):
        writer.write(frame_picture(i, 64, 48))
    writer.discard()
    assert list(tmp_path.iterdir()) == [] and writer._child.poll() is not None


def test_a_frame_of_another_size_is_refused_naming_both_sizes(tmp_path):
    writer = ProcessVideoWriter(tmp_path / "out.mp4", fps=25, codec="mpeg4")
    writer.write(frame_picture(0, 64, 48))
    with pytest.raises(InputError, match="Frame 1 is 32x32; the video .* is 64x48"):
        writer.write(np.zeros((32, 32, 3), np.uint8))
    writer.discard()
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_path_or_unknown_codec_fails_before_any_child_starts(tmp_path):
    with pytest.raises(TrtkitError, match="missing"):
        ProcessVideoWriter(tmp_path / "missing" / "out.mp4")
    with pytest.raises(InputError, match="no encoder 'nope'"):
        ProcessVideoWriter(tmp_path / "out.mp4", codec="nope")


def test_a_child_that_dies_is_an_error_and_its_partial_file_is_removed(tmp_path):
    writer = ProcessVideoWriter(tmp_path / "out.mp4", fps=25, codec="mpeg4")
    writer.ready()
    writer._child.kill()
    writer._child.wait()
    with pytest.raises(TrtkitError, match="encoder process for .* ended"):
        for i in range(10):  # the ring's free slots take the first frames; then the answer is missing
            writer.write(frame_picture(i, 64, 48))
    writer.discard()
    assert list(tmp_path.iterdir()) == []
