"""One pipeline: `trtkit build`, `trtkit bench model.onnx` and `trtkit.build()` give the same engine bytes."""

from __future__ import annotations

import functools
import io

import isolation_children as children
import onnx
import pytest
from rich.console import Console

import trtkit
import trtkit.builder.isolate as isolate
from tests.fakes.fake_trt import make_fake_trt
from tests.rewrites.test_rewrites import placeholder_dims_model
from tests.sanitize import sanitize_models
from trtkit.cli import bench
from trtkit.cli.main import main, make_parser
from trtkit.cli.options import config_from_args

SHAPES = {"dims": "a:1x2,2x5,4x9 b:1x3,2x3,4x3", "cos": None}


@pytest.mark.parametrize("name", ["dims", "cos"])
def test_same_engine_from_every_entry_point(name, tmp_path, monkeypatch):
    monkeypatch.setattr(isolate, "DEFAULT_TRT_FACTORY", functools.partial(children.fake_trt, "8.6.0"))
    model = placeholder_dims_model() if name == "dims" else sanitize_models.constant_of_shape_conv()
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    shapes = ["--shapes", SHAPES[name]] if SHAPES[name] else []

    assert main(["build", str(path), "-o", str(tmp_path / "cli.engine"), *shapes]) == 0  # isolated, one child
    from_cli = (tmp_path / "cli.engine").read_bytes()

    args = make_parser("bench").parse_args(["bench", str(path), "--cache-dir", str(tmp_path / "cache"), *shapes])
    console = Console(file=io.StringIO())
    from_bench = bench.engine_for(args, console, trt=make_fake_trt("8.6.0")).read_bytes()

    from_library = trtkit.build(str(path), config_from_args(args), trt=make_fake_trt("8.6.0")).engine

    assert from_cli == from_bench == from_library
    # and the rewrites ran: the engine differs from one built without them
    unsanitized = config_from_args(args)
    unsanitized.sanitize = unsanitized.fold_constants = False
    if name == "cos":
        assert trtkit.build(str(path), unsanitized, trt=make_fake_trt("8.6.0")).engine != from_library


def test_the_cache_key_follows_the_prepared_model(tmp_path):
    from trtkit.builder import BuildConfig
    from trtkit.builder.cache import cached_build

    path = tmp_path / "m.onnx"
    onnx.save(sanitize_models.constant_of_shape_conv(), path)
    config = BuildConfig(profiling_verbosity="NONE")
    first, hit = cached_build(path, config, folder=tmp_path / "c", trt=make_fake_trt())
    assert not hit and cached_build(path, config, folder=tmp_path / "c", trt=make_fake_trt()) == (first, True)
    no_fold = BuildConfig(profiling_verbosity="NONE", fold_constants=False)
    other, hit = cached_build(path, no_fold, folder=tmp_path / "c", trt=make_fake_trt())
    assert not hit and other != first
