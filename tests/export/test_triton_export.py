"""``trtkit export triton``: the config Triton reads (parsed back with tritonclient's model-config protobuf), the plan,
the version table, and refusals."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests import models
from tests.fakes.fake_trt import make_fake_trt
from tests.runtime.fakes import fake_engine_bytes, fake_gpu  # noqa: F401  (fixture)
from trtkit.cli import main as cli_main
from trtkit.errors import ProfileError, TrtkitError
from trtkit.export import triton as tx

PROFILE = {"x": [[1, 3, 8, 8], [2, 3, 8, 8], [4, 3, 8, 8]]}


def parse_config(text: str):
    """The config as Triton parses it (tritonclient ships Triton's model_config.proto compiled)."""
    pb2 = pytest.importorskip("tritonclient.grpc.model_config_pb2",
                              reason="tritonclient[grpc] is not installed (pip install 'trtkit[serve]')")
    from google.protobuf import text_format

    return text_format.Parse(text, pb2.ModelConfig())


@pytest.fixture
def engine(tmp_path):
    path = tmp_path / "tiny.engine"
    path.write_bytes(fake_engine_bytes(models.tiny_conv(), [PROFILE]))
    path.with_name("tiny.engine.manifest.json").write_text(json.dumps({"environment": {"tensorrt": "8.6.1"}}))
    return path


def test_config_parses_back_with_engine_io_and_profile(engine, tmp_path):
    result = tx.write_repository(engine, tmp_path / "repo", instances=2, gpus=(0, 1), max_queue_delay_us=250,
                                 trt=make_fake_trt("8.6.0"))
    folder = tmp_path / "repo" / "tiny"
    assert result.folder == folder
    assert (folder / "1" / "model.plan").read_bytes() == engine.read_bytes()
    config = parse_config((folder / "config.pbtxt").read_text())
    assert config.name == "tiny" and config.platform == "tensorrt_plan"
    assert config.max_batch_size == 4
    assert [(i.name, i.data_type, list(i.dims)) for i in config.input] == [("x", 11, [3, 8, 8])]  # 11: TYPE_FP32
    assert [(o.name, list(o.dims)) for o in config.output] == [("y", [4, 1, 1])]
    assert list(config.dynamic_batching.preferred_batch_size) == [2, 4]
    assert config.dynamic_batching.max_queue_delay_microseconds == 250
    group = config.instance_group[0]
    assert group.count == 2 and list(group.gpus) == [0, 1] and group.kind == 1  # 1: KIND_GPU
    assert config.optimization.cuda.graphs is True
    # a graph for every batch the dynamic batcher can form (the backend's default: 1, the preferred and the largest)
    assert [g.batch_size for g in config.optimization.cuda.graph_spec] == [1, 2, 3, 4]
    assert [p.name for p in (tmp_path / "repo").iterdir()] == ["tiny"]  # nothing staged left behind
    modes = [oct(p.stat().st_mode & 0o777) for p in (folder, folder / "1", folder / "1" / "model.plan",
                                                      folder / "config.pbtxt")]
    assert modes == ["0o755", "0o755", "0o644", "0o644"]  # readable by a server running as another user


def test_graph_batches_triton_leaves_the_graphs_to_the_backend_and_a_wrong_choice_is_named(engine, tmp_path):
    result = tx.write_repository(engine, tmp_path / "repo", graph_batches="triton", trt=make_fake_trt("8.6.0"))
    config = parse_config(result.config)
    assert config.optimization.cuda.graphs is True and list(config.optimization.cuda.graph_spec) == []
    with pytest.raises(TrtkitError, match=r"graph_batches must be one of 'every', 'triton', not 'all'"):
        tx.write_repository(engine, tmp_path / "other", graph_batches="all", trt=make_fake_trt("8.6.0"))
    assert not (tmp_path / "other").exists()  # refused before anything was written


def test_the_tensorrt_backends_latency_options_are_set_and_an_unknown_one_is_refused_before_writing(engine, tmp_path):
    result = tx.write_repository(engine, tmp_path / "repo", options=("eager_batching", "busy_wait_events",
                                                                     "gather_kernel"), trt=make_fake_trt("8.6.0"))
    config = parse_config(result.config)
    assert config.optimization.eager_batching is True
    assert config.optimization.gather_kernel_buffer_threshold == 2  # batches of 2 or more requests gather by kernel
    cuda = config.optimization.cuda
    assert cuda.busy_wait_events is True and cuda.graphs is True and cuda.output_copy_stream is False
    assert [g.batch_size for g in cuda.graph_spec] == [1, 2, 3, 4]
    plain = parse_config(tx.config_pbtxt(result.model, cuda_graphs=False, options=("busy_wait_events",)))
    assert plain.optimization.cuda.busy_wait_events is True and plain.optimization.cuda.graphs is False
    assert plain.optimization.eager_batching is False and plain.optimization.cuda.output_copy_stream is False
    assert plain.optimization.gather_kernel_buffer_threshold == 0  # Triton's default: a copy per request
    with pytest.raises(TrtkitError, match=r"option\(s\) busy_wait not known here; give any of busy_wait_events, "
                                          r"eager_batching"):
        tx.write_repository(engine, tmp_path / "other", options=("busy_wait",), trt=make_fake_trt("8.6.0"))
    with pytest.raises(TrtkitError, match=r"output_copy_stream is left out: with it Triton 2.51's TensorRT backend .* "
                                          r"stopped answering requests"):
        tx.write_repository(engine, tmp_path / "other", options=("output_copy_stream",), trt=make_fake_trt("8.6.0"))
    with pytest.raises(TrtkitError, match=r"blocking: a server setting, not the model configuration's: "
                                          r"tritonserver --backend-config=tensorrt,execution-policy=BLOCKING"):
        tx.write_repository(engine, tmp_path / "other", options="blocking", trt=make_fake_trt("8.6.0"))
    assert not (tmp_path / "other").exists()


def test_export_triton_takes_the_latency_options_on_the_command_line(engine, tmp_path, fake_gpu, capsys):  # noqa: F811
    rc = cli_main.main(["export", "triton", str(engine), "--repo", str(tmp_path / "repo"),
                        "--tensorrt-options", "busy_wait_events,eager_batching"])
    assert rc == 0, capsys.readouterr()
    config = parse_config((tmp_path / "repo" / "tiny" / "config.pbtxt").read_text())
    assert config.optimization.eager_batching and config.optimization.cuda.busy_wait_events
    assert not config.optimization.cuda.output_copy_stream


def test_preferred_batch_sizes_on_the_command_line_and_a_size_the_profile_cannot_take(engine, tmp_path, fake_gpu,  # noqa: F811
                                                                                     capsys):
    rc = cli_main.main(["export", "triton", str(engine), "--repo", str(tmp_path / "repo"),
                        "--preferred-batch", "3,1-2"])
    assert rc == 0, capsys.readouterr()
    config = parse_config((tmp_path / "repo" / "tiny" / "config.pbtxt").read_text())
    assert list(config.dynamic_batching.preferred_batch_size) == [1, 2, 3]
    rc = cli_main.main(["export", "triton", str(engine), "--repo", str(tmp_path / "other"), "--preferred-batch", "2,6"])
    err = capsys.readouterr().err
    assert rc != 0 and "preferred batch sizes 2,6: 6 not within 1..4, the largest batch served" in " ".join(err.split())
    assert not (tmp_path / "other").exists()  # refused before anything was written


def test_unbatched_engine_keeps_full_dims(tmp_path):
    path = tmp_path / "fixed.engine"
    path.write_bytes(fake_engine_bytes(models.tiny_conv(dynamic_batch=False)))
    result = tx.write_repository(path, tmp_path / "repo", trt=make_fake_trt("8.6.0"), cuda_graphs=False)
    config = parse_config(result.config)
    assert config.max_batch_size == 0 and list(config.input[0].dims) == [1, 3, 8, 8]
    assert not config.HasField("dynamic_batching") and not config.HasField("optimization")


def test_profile_starting_above_batch_1_is_refused(tmp_path):
    path = tmp_path / "b2.engine"
    path.write_bytes(fake_engine_bytes(models.tiny_conv(), [{"x": [[2, 3, 8, 8], [4, 3, 8, 8], [8, 3, 8, 8]]}]))
    with pytest.raises(ProfileError, match="takes batches 2..8, but Triton sends any batch from 1"):
        tx.triton_model(path, trt=make_fake_trt("8.6.0"))


def test_non_empty_repo_refused_without_force(engine, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "other").mkdir()
    with pytest.raises(TrtkitError, match="exists and is not empty; pass force to add or replace"):
        tx.write_repository(engine, repo, trt=make_fake_trt("8.6.0"))
    assert [p.name for p in repo.iterdir()] == ["other"]
    tx.write_repository(engine, repo, force=True, trt=make_fake_trt("8.6.0"))
    tx.write_repository(engine, repo, force=True, instances=3, trt=make_fake_trt("8.6.0"))  # replaces the model
    assert sorted(p.name for p in repo.iterdir()) == ["other", "tiny"]
    assert "count: 3" in (repo / "tiny" / "config.pbtxt").read_text()


def test_not_an_engine_is_named(tmp_path):
    path = tmp_path / "junk.engine"
    path.write_bytes(b"not an engine at all")
    with pytest.raises(TrtkitError, match="junk.engine' could not be deserialized"):
        tx.write_repository(path, tmp_path / "repo", trt=make_fake_trt("8.6.0"))
    assert not (tmp_path / "repo" / "junk").exists()


# A table of made-up releases, so these tests say what the checks do whatever the real table holds.
TABLE = {
    "30.01": ("3.1.0", "8.6.1.2"),
    "30.02": ("3.2.0", "8.6.1.6"),
    "30.03": ("3.3.0", None),
    "30.04": ("3.4.0", "10.3.0"),
}


@pytest.fixture
def table(monkeypatch):
    monkeypatch.setattr(tx, "TRITON_TENSORRT", TABLE)


def test_releases_for_an_engine_match_on_the_build_number_where_both_have_one(table):
    assert tx.triton_releases_for("8.6.1") == ["30.01", "30.02"]  # no build number: either may be it
    assert tx.triton_releases_for("8.6.1.6") == ["30.02"]  # 30.01 carries 8.6.1.2 and refuses it
    assert tx.triton_releases_for("10.3.0.26") == ["30.04"]
    assert tx.triton_releases_for("9.3.0.post12.dev1") == []
    assert tx.triton_releases_for("8.6") == [] and tx.triton_releases_for(None) == []


def test_version_warnings_name_the_release_that_fits(table):
    model = tx.TritonModel("m", (), (), 4, (4,), "8.6.1.6")
    assert tx.check_triton_version(model, "30.02") == []
    assert tx.check_triton_version(model, "3.2.0") == tx.check_triton_version(model, "3.2") == []
    (warning,) = tx.check_triton_version(model, "30.01")
    assert "Triton 30.01 carries TensorRT 8.6.1.2: it will refuse the plan" in warning
    assert warning.endswith("Releases with TensorRT 8.6.1.6: 30.02")
    (warning,) = tx.check_triton_version(model, "3.4.0")
    assert "carries TensorRT 10.3.0" in warning and warning.endswith(": 30.02")
    (warning,) = tx.check_triton_version(model, "99.01")
    assert "Triton 99.01 is not in trtkit's table" in warning and "30.01 to 30.04" in warning


def test_unverified_release_is_reported_not_guessed(table):
    model = tx.TritonModel("m", (), (), 4, (4,), "10.3.0")
    (warning,) = tx.check_triton_version(model, "30.03")
    assert warning.startswith("TensorRT version for Triton 30.03 not verified")
    assert "tritonserver:30.03-py3" in warning and warning.endswith("Releases known to carry TensorRT 10.3.0: 30.04")
    (warning,) = tx.check_triton_version(model, "3.3.0")  # the server version names the same release
    assert "TensorRT version for Triton 3.3.0 not verified" in warning and "release 30.03" in warning
    assert tx.triton_releases_for("10.3.0") == ["30.04"]  # an unverified row is never suggested


def test_engine_tensorrt_in_no_verified_release(table):
    (warning,) = tx.check_triton_version(tx.TritonModel("m", (), (), 4, (4,), "8.6.0"), None)
    assert "no Triton release in trtkit's table is known to carry TensorRT 8.6.0" in warning
    (warning,) = tx.check_triton_version(tx.TritonModel("m", (), (), 4, (4,), None), "30.01")
    assert "no manifest naming its TensorRT version" in warning


def test_real_table_is_well_formed_and_each_row_is_in_the_docs():
    releases = list(tx.TRITON_TENSORRT)
    assert releases == sorted(releases) and releases[0] <= "23.01" and "25.01" in releases
    docs = (Path(__file__).resolve().parents[2] / "docs" / "triton.md").read_text()
    rows = {cells[0]: cells for cells in
            ([c.strip() for c in line.strip("|").split("|")] for line in docs.splitlines() if line.startswith("| 2"))}
    for release, (server, tensorrt) in tx.TRITON_TENSORRT.items():
        assert re.fullmatch(r"\d\d\.\d\d", release) and re.fullmatch(r"2\.\d+\.\d+", server), release
        assert tensorrt is None or re.fullmatch(r"\d+\.\d+\.\d+(\.\d+)?", tensorrt), release
        assert release in rows, f"docs/triton.md has no row for Triton {release}"
        assert rows[release][1].startswith(server), release
        assert rows[release][2] == (tensorrt or "not verified"), release
        assert tensorrt is None or rows[release][3] not in ("", "not verified"), f"no source for {release}"
    assert set(rows) == set(tx.TRITON_TENSORRT)


def test_cli_export_triton_writes_and_warns(engine, tmp_path, fake_gpu, capsys, table):  # noqa: F811
    code = cli_main.main(["export", "triton", str(engine), "--repo", str(tmp_path / "repo"), "--triton-version",
                          "30.04", "--json", str(tmp_path / "out.json")])
    assert code == 0
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["max_batch_size"] == 4 and "carries TensorRT 10.3.0" in out["warnings"][0]
    # the engine's manifest says 8.6.1: the releases that fit show their build numbers, which Triton checks too
    assert out["warnings"][0].endswith("Releases with TensorRT 8.6.1: 30.01 (8.6.1.2), 30.02 (8.6.1.6)")
    assert cli_main.main(["export", "triton", str(engine), "--repo", str(tmp_path / "repo")]) == 1
    assert "pass --force" in capsys.readouterr().err
    assert cli_main.main(["export", "triton", str(engine), "--repo", str(tmp_path / "r2"), "--instances", "0"]) == 1
    assert cli_main.main(["export", "triton", str(engine), "--repo", str(tmp_path / "r3"), "--gpus", "a"]) == 1
