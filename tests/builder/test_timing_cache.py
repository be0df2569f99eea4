"""The timing cache every build uses by default: one per GPU and TensorRT in the user's cache folder, merged under a
lock, its provenance checked, named in the manifest."""

from __future__ import annotations

import functools
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

import trtkit.builder.isolate as isolate
from tests import models
from tests.fakes.fake_trt import make_fake_trt
from tests.hardening import run_cli
from tests.runtime.fakes import fake_gpu  # noqa: F401 - fixture
from trtkit.builder.api import build
from trtkit.builder.config import BuildConfig
from trtkit.errors import BuildError, UsageError
from trtkit.manifest import read_manifest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache_root(tmp_path, monkeypatch):
    root = tmp_path / "user-cache"
    monkeypatch.setenv("TRTKIT_CACHE_DIR", str(root))
    return root


@pytest.fixture(autouse=True)
def _trtkit_logs_reach_caplog(monkeypatch):
    monkeypatch.setattr(logging.getLogger("trtkit"), "propagate", True)


def _model(channels: int = 4):
    return models.tiny_conv(dynamic_batch=False, channels=channels)


def _only_cache(folder: Path) -> Path:
    found = sorted(folder.glob("*.cache"))
    assert len(found) == 1, found
    return found[0]


def _entries(path: Path) -> set:
    return set(json.loads(path.read_bytes())["entries"])


def test_a_default_build_creates_the_cache_and_the_next_build_loads_it(cache_root):
    trt = make_fake_trt("10.8.0")  # TensorRT 10 and later share one cache between models
    first = build(_model(), trt=trt)
    path = _only_cache(cache_root / "timing")
    assert path.name.endswith("-trt10.8.0.cache")
    assert first.manifest.timing_cache == {"path": str(path), "default": True, "status": "created"}
    assert json.loads(path.with_name(path.name + ".json").read_text())["tensorrt"] == "10.8.0"
    learnt = _entries(path)
    assert learnt
    second = build(_model(channels=6), trt=trt)
    assert second.manifest.timing_cache["status"] == "hit"
    assert learnt < _entries(path)  # the second build's layers were merged in, the first's kept


def test_on_tensorrt_8_the_default_cache_is_kept_per_model_and_settings(cache_root, fake_trt):
    first = build(_model(), trt=fake_trt)
    path = _only_cache(cache_root / "timing")
    assert first.manifest.timing_cache["status"] == "created" and "-trt8.6.0-" in path.name
    again = build(_model(), BuildConfig(save_prepared=None), trt=fake_trt)
    assert again.manifest.timing_cache == {"path": str(path), "default": True, "status": "hit"}
    other_model = build(_model(channels=6), trt=fake_trt).manifest.timing_cache
    other_settings = build(_model(), BuildConfig(precision="fp16"), trt=fake_trt).manifest.timing_cache
    assert other_model["status"] == other_settings["status"] == "created"
    assert len({path.name, Path(other_model["path"]).name, Path(other_settings["path"]).name}) == 3


def test_an_isolated_build_writes_the_default_cache_in_the_build_worker(cache_root, tmp_path, monkeypatch):
    monkeypatch.setattr(isolate, "DEFAULT_TRT_FACTORY", functools.partial(make_fake_trt, "10.8.0"))
    result = build(_model(), output=tmp_path / "m.engine")
    path = _only_cache(cache_root / "timing")
    assert path.name.endswith("-trt10.8.0.cache") and _entries(path)
    assert read_manifest(tmp_path / "m.engine").timing_cache == result.manifest.timing_cache
    assert result.manifest.timing_cache["path"] == str(path)


_BUILDS = (
    "import sys\n"
    "from tests import models\n"
    "from tests.fakes.fake_trt import make_fake_trt\n"
    "from trtkit.builder.api import build\n"
    "for c in sys.argv[1:]:\n"
    "    build(models.tiny_conv(dynamic_batch=False, channels=int(c)), trt=make_fake_trt('10.8.0'))\n"
)


def test_concurrent_builds_in_two_processes_all_land_and_the_cache_loads(cache_root, tmp_path, monkeypatch):
    fake_trt = make_fake_trt("10.8.0")  # one cache for every model
    env = {**__import__("os").environ, "TRTKIT_CACHE_DIR": str(cache_root)}
    halves = (["1", "2", "3", "4", "5"], ["6", "7", "8", "9", "10"])
    procs = [subprocess.Popen([sys.executable, "-c", _BUILDS, *h], cwd=REPO, env=env) for h in halves]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    merged = _only_cache(cache_root / "timing")
    monkeypatch.setenv("TRTKIT_CACHE_DIR", str(tmp_path / "one-by-one"))
    for channels in halves[0] + halves[1]:
        build(_model(int(channels)), trt=fake_trt)
    assert _entries(merged) == _entries(_only_cache(tmp_path / "one-by-one" / "timing"))
    assert fake_trt.Builder(None).create_builder_config().create_timing_cache(merged.read_bytes()) is not None


def _plant_foreign_cache(path: Path) -> None:
    path.write_bytes(json.dumps({"entries": ["timed on another GPU"]}).encode())
    other = {"gpu": "Other GPU", "compute_capability": "8.0", "tensorrt": "8.6.0"}
    path.with_name(path.name + ".json").write_text(json.dumps(other))


def test_a_default_cache_of_other_provenance_is_replaced_not_used(cache_root, fake_trt, caplog):
    build(_model(), trt=fake_trt)
    path = _only_cache(cache_root / "timing")
    _plant_foreign_cache(path)
    result = build(_model(), trt=fake_trt)
    assert result.manifest.timing_cache["status"] == "replaced"
    assert "timed on another GPU" not in _entries(path) and _entries(path)
    assert json.loads(path.with_name(path.name + ".json").read_text())["gpu"] != "Other GPU"
    assert "was written for GPU Other GPU (compute capability 8.0) with TensorRT 8.6.0" in caplog.text


def test_a_named_cache_of_other_provenance_is_an_error_and_kept_unless_reset(tmp_path, fake_trt):
    path = tmp_path / "t.cache"
    _plant_foreign_cache(path)
    with pytest.raises(BuildError, match="was written for GPU Other GPU .*pass timing_cache_reset") as info:
        build(_model(), BuildConfig(timing_cache=str(path)), trt=fake_trt)
    assert info.value.field == "timing_cache_reset" and _entries(path) == {"timed on another GPU"}
    result = build(_model(), BuildConfig(timing_cache=str(path), timing_cache_reset=True), trt=fake_trt)
    assert result.manifest.timing_cache == {"path": str(path), "default": False, "status": "replaced"}
    assert "timed on another GPU" not in _entries(path)


def test_a_named_cache_without_provenance_is_used(tmp_path, fake_trt):
    path = tmp_path / "t.cache"  # a cache TensorRT itself wrote (trtexec --timingCacheFile): no sidecar
    path.write_bytes(json.dumps({"entries": ["from trtexec"]}).encode())
    result = build(_model(), BuildConfig(timing_cache=str(path)), trt=fake_trt)
    assert result.manifest.timing_cache["status"] == "hit" and "from trtexec" in _entries(path)


def test_no_timing_cache_writes_none(cache_root, tmp_path, capsys, fake_gpu):  # noqa: F811
    model = tmp_path / "m.onnx"
    model.write_bytes(_model().SerializeToString())
    code, out, err = run_cli(["build", str(model), "--no-isolate", "--no-timing-cache"], capsys)
    assert code == 0, err
    assert not cache_root.exists() and "timing cache" not in out
    assert read_manifest(tmp_path / "m.fp32.engine").timing_cache is None
    code, out, err = run_cli(["build", str(model), "--no-isolate"], capsys)
    assert code == 0, err
    path = _only_cache(cache_root / "timing")
    assert path.name.startswith("fake-gpu-sm90-trt8.6.0") and read_manifest(tmp_path / "m.fp32.engine").timing_cache[
        "path"] == str(path)
    assert "timing cache" in out and "created" in out


def test_timing_cache_settings_that_contradict_are_refused(tmp_path, capsys, fake_gpu):  # noqa: F811
    with pytest.raises(UsageError, match="use_timing_cache=False builds without one") as info:
        BuildConfig(timing_cache="t.cache", use_timing_cache=False)
    assert info.value.field == "use_timing_cache"
    with pytest.raises(UsageError, match="the default cache is replaced by itself"):
        BuildConfig(timing_cache_reset=True)
    model = tmp_path / "m.onnx"
    model.write_bytes(_model().SerializeToString())
    code, _, err = run_cli(["build", str(model), "--timing-cache", "t.cache", "--no-timing-cache"], capsys)
    assert code == 2 and "not allowed with argument" in err, err
    code, _, err = run_cli(["build", str(model), "--timing-cache-reset"], capsys)
    assert code == 2 and "--timing-cache-reset" in err and "--timing-cache" in err, err
    assert not (tmp_path / "m.engine").exists()


def test_a_default_cache_that_cannot_be_written_warns_and_the_build_goes_on(tmp_path, monkeypatch, fake_trt, caplog):
    not_a_folder = tmp_path / "cache-is-a-file"
    not_a_folder.write_text("")
    monkeypatch.setenv("TRTKIT_CACHE_DIR", str(not_a_folder))
    result = build(_model(), output=tmp_path / "m.engine", trt=fake_trt)
    assert (tmp_path / "m.engine").read_bytes() == result.engine
    assert "The timing cache" in caplog.text and "could not be updated: Cannot write" in caplog.text
