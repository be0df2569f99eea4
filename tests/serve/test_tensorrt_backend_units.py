"""``trtkit serve --backend tensorrt``: engines written for Triton's own TensorRT backend, the backend folder and
TensorRT's libraries found (or a clear error), the server's backends folder made with it; no Triton runs here (the
tests that start one are in test_serve_triton.py)."""

from __future__ import annotations

import types

import pytest

from tests.fakes.fake_trt import make_fake_trt
from tests.serve.test_python_backend_units import _parse
from trtkit.errors import DependencyError, UsageError
from trtkit.serve import tensorrt_backend as native
from trtkit.serve.server import Server, ServeSettings, load_model


def _backends(tmp_path):
    folder = tmp_path / "backends" / "tensorrt"
    folder.mkdir(parents=True)
    (folder / native.BACKEND_LIBRARY).write_bytes(b"\x7fELF")
    return tmp_path / "backends"


def test_the_repository_is_the_export_config_with_the_batch_and_instances_asked_for(tmp_path, engine):
    settings = ServeSettings(instances=2, gpus=(0, 3), backend="tensorrt", max_batch=3, max_queue_delay_us=250,
                             triton_backends=str(_backends(tmp_path)))
    model = load_model(engine, settings, trt=make_fake_trt("8.6.0"))
    repo = native.write_repository([model], settings, tmp_path / "repo")
    config = _parse((repo / "tiny" / "config.pbtxt").read_text())
    assert config.name == "tiny" and config.platform == "tensorrt_plan" and config.max_batch_size == 3
    assert [(t.name, list(t.dims)) for t in config.input] == [("x", [3, 8, 8])]
    assert list(config.dynamic_batching.preferred_batch_size) == [2, 3]
    assert config.dynamic_batching.max_queue_delay_microseconds == 250
    assert [(g.count, list(g.gpus)) for g in config.instance_group] == [(2, [0, 3])]
    assert config.optimization.cuda.graphs
    # a graph for every batch the dynamic batcher can form, not only Triton's 1, preferred and largest
    assert [g.batch_size for g in config.optimization.cuda.graph_spec] == [1, 2, 3]
    plan = repo / "tiny" / "1" / "model.plan"
    assert plan.read_bytes() == engine.read_bytes()
    native.write_repository([model], settings, tmp_path / "repo")  # written again over the first: no error
    assert plan.resolve() == engine.resolve()


def test_preferred_batch_sizes_asked_for_reach_the_config(tmp_path, engine):
    settings = ServeSettings(backend="tensorrt", preferred_batch_sizes=(1, 3, 4),
                             triton_backends=str(_backends(tmp_path)))
    model = load_model(engine, settings, trt=make_fake_trt("8.6.0"))
    repo = native.write_repository([model], settings, tmp_path / "repo")
    config = _parse((repo / "tiny" / "config.pbtxt").read_text())
    assert list(config.dynamic_batching.preferred_batch_size) == [1, 3, 4] and config.max_batch_size == 4


def test_a_backends_folder_without_the_tensorrt_backend_is_named_with_what_to_do(tmp_path, engine):
    with pytest.raises(DependencyError, match=r"give triton_backends, the folder that holds tensorrt/"
                                              r"libtriton_tensorrt.so; build it .*build_triton_trt_backend.sh"):
        native.tensorrt_backend(None)
    with pytest.raises(DependencyError, match=r"Triton backends folder '.*nowhere' does not exist; build it"):
        native.tensorrt_backend(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DependencyError, match=r"'.*empty' has no tensorrt/libtriton_tensorrt.so"):
        native.tensorrt_backend(tmp_path / "empty")
    assert native.tensorrt_backend(_backends(tmp_path)) == tmp_path / "backends" / "tensorrt"


def test_graph_batches_triton_leaves_the_graphs_to_the_backend_and_goes_with_the_tensorrt_backend_only(
        tmp_path, engine):
    settings = ServeSettings(backend="tensorrt", graph_batches="triton", triton_backends=str(_backends(tmp_path)))
    settings.check()
    model = load_model(engine, settings, trt=make_fake_trt("8.6.0"))
    config = _parse(native.model_config(model, settings))
    assert config.optimization.cuda.graphs and list(config.optimization.cuda.graph_spec) == []
    off = _parse(native.model_config(model, ServeSettings(backend="tensorrt", cuda_graph=False)))
    assert not off.optimization.cuda.graphs and list(off.optimization.cuda.graph_spec) == []
    with pytest.raises(UsageError, match=r"graph_batches 'triton' chooses the CUDA graphs of Triton's TensorRT "
                                         r"backend \(the 'tensorrt' backend\); the 'python' backend's runners capture"):
        ServeSettings(backend="python", graph_batches="triton").check()
    with pytest.raises(UsageError, match=r"graph_batches must be one of 'every', 'triton', not 'some'"):
        ServeSettings(backend="tensorrt", graph_batches="some").check()


def test_the_tensorrt_backends_latency_options_reach_the_config_and_the_server_and_are_checked(tmp_path, engine):
    settings = ServeSettings(backend="tensorrt", tensorrt_options=("eager_batching", "blocking"),
                             triton_backends=str(_backends(tmp_path)))
    settings.check()
    model = load_model(engine, settings, trt=make_fake_trt("8.6.0"))
    config = _parse(native.model_config(model, settings))
    assert config.optimization.eager_batching and config.optimization.cuda.graphs
    assert not config.optimization.cuda.busy_wait_events and not config.optimization.cuda.output_copy_stream
    # blocking is the server's: each instance on a thread of its own
    assert native.backend_config(settings) == {"backend-config": "tensorrt,execution-policy=BLOCKING"}
    assert native.backend_config(ServeSettings(backend="tensorrt")) == {}
    with pytest.raises(UsageError, match=r"tensorrt_options are options of Triton's TensorRT backend "
                                         r"\(the 'tensorrt' backend\), not of the 'python' backend"):
        ServeSettings(backend="python", tensorrt_options=("busy_wait_events",)).check()
    with pytest.raises(UsageError, match=r"option\(s\) spin not known here; give any of busy_wait_events, "
                                         r"eager_batching, gather_kernel, blocking"):
        ServeSettings(backend="tensorrt", tensorrt_options=("spin",)).check()


def test_triton_backends_only_goes_with_the_tensorrt_backend(tmp_path):
    with pytest.raises(UsageError, match="triton_backends is Triton's TensorRT backend's folder, for "
                                         "the 'tensorrt' backend, not 'python'"):
        ServeSettings(backend="python", triton_backends=str(tmp_path)).check()


def test_the_server_refuses_a_missing_backend_before_loading_anything_and_asks_nothing_of_numpy(tmp_path, engine,
                                                                                                 monkeypatch):
    def python_backend_only(*_):
        raise AssertionError("the Python backend's requirements were checked for the tensorrt backend")

    monkeypatch.setattr("trtkit.serve.tritonserver.require_pytriton", lambda: types.SimpleNamespace(__file__="x"))
    monkeypatch.setattr("trtkit.serve.python_backend.check_numpy", python_backend_only)
    monkeypatch.setattr("trtkit.serve.python_backend.check_backend_stub", python_backend_only)
    server = Server([engine], ServeSettings(backend="tensorrt"), trt=make_fake_trt("8.6.0"))
    with pytest.raises(DependencyError, match="pytriton wheel does not carry"):
        server.start()
    assert server.models == []


def test_tensorrt_libraries_are_found_beside_the_module_or_in_tensorrt_libs(tmp_path, monkeypatch):
    here = tmp_path / "site" / "tensorrt"
    here.mkdir(parents=True)
    module = types.SimpleNamespace(__file__=str(here / "__init__.py"))
    with pytest.raises(DependencyError, match=r"No libnvinfer.so.\* next to the tensorrt module"):
        native.tensorrt_library_dir(module)
    (tmp_path / "site" / "tensorrt_libs").mkdir()
    (tmp_path / "site" / "tensorrt_libs" / "libnvinfer.so.10").write_bytes(b"")
    assert native.tensorrt_library_dir(module) == tmp_path / "site" / "tensorrt_libs"
    (here / "libnvinfer.so.8").write_bytes(b"")
    assert native.tensorrt_library_dir(module) == here
    monkeypatch.setattr("trtkit.serve.tritonserver.require_pytriton", lambda: types.SimpleNamespace(__file__="x"))
    env = native.backend_environment(module, {"LD_LIBRARY_PATH": f"/py/lib:{here}", "X": "1"})
    assert env == {"LD_LIBRARY_PATH": f"{here}:/py/lib"}


def test_the_servers_backends_folder_gets_a_copy_of_the_tensorrt_backend(tmp_path):
    pytest.importorskip("pytriton", reason="the serve extra (nvidia-pytriton) ships the tritonserver folder")
    from trtkit.serve import tritonserver

    root = tritonserver.prepare_server(tmp_path / "work", None, (native.tensorrt_backend(_backends(tmp_path)),))
    copied = root / "backends" / "tensorrt" / native.BACKEND_LIBRARY
    assert copied.read_bytes() == b"\x7fELF" and not copied.is_symlink()
    assert not (root / "backends" / "python" / "triton_python_backend_stub").exists()


def test_the_cli_names_the_flag_and_serves_under_any_numpy_with_the_tensorrt_backend(engine, tmp_path, monkeypatch,
                                                                                    capsys):
    import numpy as np

    from trtkit.cli import main as cli_main

    monkeypatch.setattr("trtkit.serve.tritonserver.require_pytriton", lambda: types.SimpleNamespace(__file__="x"))
    monkeypatch.setattr(np, "__version__", "2.2.6")  # pytriton's Python backend would refuse it; this one does not
    assert cli_main.main(["serve", str(engine), "--backend", "tensorrt"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "give --triton-backends, the folder that holds tensorrt/libtriton_tensorrt.so" in err, err
    assert cli_main.main(["serve", str(engine), "--triton-backends", str(tmp_path)]) == 2  # a usage error
    err = " ".join(capsys.readouterr().err.split())
    assert ("--triton-backends is Triton's TensorRT backend's folder, for the 'tensorrt' backend, not 'python'"
            in err), err
