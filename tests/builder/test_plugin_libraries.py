"""Plugin libraries (``--plugin-lib``, ``BuildConfig(plugins=...)``, ``TrtRunner(plugins=...)``): loaded before
parsing and before an engine loads, recorded in the manifest, refused with the loader's reason."""

from __future__ import annotations

import json

import pytest

from tests import models
from tests.fakes.fake_cuda import FakeCudart
from tests.hardening import run_cli
from tests.runtime.fakes import fake_engine_bytes, fake_gpu  # noqa: F401 - fixture
from trtkit.builder.api import build
from trtkit.builder.config import BuildConfig
from trtkit.errors import DependencyError, UsageError
from trtkit.manifest import read_manifest
from trtkit.runtime import TrtRunner
from trtkit.runtime.cuda import Cuda


@pytest.fixture
def shared_library():
    """A real shared library (the loader opens it as it would a plugin library)."""
    import _ctypes

    path = getattr(_ctypes, "__file__", None)
    if not path:
        pytest.skip("this Python has _ctypes built in: no shared library file to load")
    return path


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(models.tiny_conv(dynamic_batch=False).SerializeToString())
    return path


@pytest.fixture
def not_a_library(tmp_path):
    path = tmp_path / "libnot.so"
    path.write_text("not a shared library\n")
    return path


def test_the_plugin_libraries_load_before_the_build_and_are_in_the_manifest(model, tmp_path, fake_trt,
                                                                             shared_library):
    build(str(model), BuildConfig(plugins=[shared_library]), output=tmp_path / "m.engine", trt=fake_trt)
    assert fake_trt.plugin_inits == [""]  # then TensorRT's own plugins
    assert read_manifest(tmp_path / "m.engine").build.settings["plugins"] == [shared_library]


def test_a_missing_plugin_library_is_a_usage_error_for_build_run_and_bench(model, tmp_path, capsys,
                                                                           fake_gpu):  # noqa: F811
    missing = str(tmp_path / "libmissing.so")
    code, _, err = run_cli(["build", str(model), "--no-isolate", "--plugin-lib", missing], capsys)
    assert code == 2 and err.strip() == (f"error: --plugin-lib: Plugin library '{missing}' does not exist; give the "
                                         "path of a TensorRT plugin library (.so)"), err
    assert not (tmp_path / "m.engine").exists()
    assert run_cli(["build", str(model), "--no-isolate"], capsys)[0] == 0
    for command in ("run", "bench"):
        code, _, err = run_cli([command, str(tmp_path / "m.engine"), "--plugin-lib", missing], capsys)
        assert code == 2 and f"Plugin library '{missing}' does not exist" in err, (command, err)
    code, _, err = run_cli(["bench", "--server", "localhost:8001", "--model", "m", "--plugin-lib", missing], capsys)
    assert code == 2 and "--plugin-lib: options of an engine's benchmark, not of --server" in err, err


def test_a_file_that_is_not_a_shared_library_is_refused_with_the_loaders_reason(model, tmp_path, capsys, fake_gpu,  # noqa: F811
                                                                                not_a_library):
    code, _, err = run_cli(["build", str(model), "--no-isolate", "--plugin-lib", str(not_a_library)], capsys)
    assert code == 1 and f"Plugin library '{not_a_library}' does not load: " in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "m.engine").exists()
    assert run_cli(["build", str(model), "--no-isolate"], capsys)[0] == 0
    code, _, err = run_cli(["run", str(tmp_path / "m.engine"), "--plugin-lib", str(not_a_library)], capsys)
    assert code == 1 and f"does not load: {not_a_library}: " in err, err  # the loader's own words follow


def test_the_runner_loads_its_plugin_libraries_first(fake_trt, shared_library, not_a_library):
    engine, cuda = fake_engine_bytes(models.tiny_conv(dynamic_batch=False)), Cuda(FakeCudart())
    with TrtRunner(engine, plugins=[shared_library], trt=fake_trt, cuda=cuda):
        assert fake_trt.plugin_inits == [""]
    with pytest.raises(DependencyError, match="does not load"):
        TrtRunner(engine, plugins=[str(not_a_library)], trt=fake_trt, cuda=cuda).activate()
    with pytest.raises(UsageError, match="a list of file paths"):
        TrtRunner(engine, plugins=shared_library)


def test_an_isolated_build_loads_them_in_the_worker(model, tmp_path, monkeypatch, not_a_library):
    import functools

    import trtkit.builder.isolate as isolate
    from tests.fakes.fake_trt import make_fake_trt

    monkeypatch.setattr(isolate, "DEFAULT_TRT_FACTORY", functools.partial(make_fake_trt, "10.8.0"))
    with pytest.raises(DependencyError, match="does not load") as info:
        build(str(model), BuildConfig(plugins=[str(not_a_library)]), output=tmp_path / "m.engine")
    assert info.value.field == "plugins" and not (tmp_path / "m.engine").exists()
    assert json.dumps(BuildConfig(plugins=[not_a_library]).to_json()["plugins"]) == json.dumps([str(not_a_library)])
