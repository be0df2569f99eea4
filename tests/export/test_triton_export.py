"""``trtkit export triton``: the config Triton reads (parsed back with tritonclient's model-config protobuf), the plan,
the version table, and refusals."""

from __future__ import annotations

import json

import pytest

from tests import models
from tests.runtime.fakes import fake_engine_bytes, fake_gpu  # noqa: F401  (fixture)
from trtkit.cli import main as cli_main
from trtkit.errors import ProfileError, TrtkitError
from trtkit.export import triton as tx
from trtkit.testing.fake_trt import make_fake_trt

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
    assert [p.name for p in (tmp_path / "repo").iterdir()] == ["tiny"]  # nothing staged left behind
    modes = [oct(p.stat().st_mode & 0o777) for p in (folder, folder / "1", folder / "1" / "model.plan",
                                                      folder / "config.pbtxt")]
    assert modes == ["0o755", "0o755", "0o644", "0o644"]  # readable by a server running as another user


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
    with pytest.raises(TrtkitError, match="exists and is not empty; pass --force"):
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


def test_version_table_and_warnings():
    assert "23.10" in tx.triton_releases_for("8.6.1.6") and "24.05" not in tx.triton_releases_for("8.6.1")
    assert tx.triton_releases_for("8.6.0") == []
    model = tx.TritonModel("m", (), (), 4, (4,), "8.6.1")
    assert tx.check_triton_version(model, "23.10") == []
    assert tx.check_triton_version(model, "2.39.0") == []
    (warning,) = tx.check_triton_version(model, "24.05")
    assert "carries TensorRT 10.0.1: it will refuse the plan" in warning and "23.04" in warning
    (warning,) = tx.check_triton_version(tx.TritonModel("m", (), (), 4, (4,), "8.6.0"), None)
    assert "no Triton release in trtkit's table carries TensorRT 8.6.0" in warning
    assert "not in trtkit's table" in tx.check_triton_version(model, "99.01")[0]


def test_cli_export_triton_writes_and_warns(engine, tmp_path, fake_gpu, capsys):  # noqa: F811
    code = cli_main.main(["export", "triton", str(engine), "--repo", str(tmp_path / "repo"), "--triton-version",
                          "24.12", "--json", str(tmp_path / "out.json")])
    assert code == 0
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["max_batch_size"] == 4 and "carries TensorRT 10.7.0" in out["warnings"][0]
    assert cli_main.main(["export", "triton", str(engine), "--repo", str(tmp_path / "repo")]) == 1
    assert "pass --force" in capsys.readouterr().err
    assert cli_main.main(["export", "triton", str(engine), "--repo", str(tmp_path / "r2"), "--instances", "0"]) == 1
    assert cli_main.main(["export", "triton", str(engine), "--repo", str(tmp_path / "r3"), "--gpus", "a"]) == 1
