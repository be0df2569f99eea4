"""Issue 14 on the real TensorRT: a timing cache that does not load, and the op table against the real parser.

Run on the GPU host: ``bash .gpu/bin/gpu-run pytest -m gpu -q tests/gpu/test_hardening_gpu.py``. With
``TRTKIT_HARDENING_OUT`` set to a folder, the parser's answers per op are written there as ``op_support.json``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests import models
from tests.conftest import GPU_TACTIC_SOURCES
from trtkit.builder.api import build
from trtkit.builder.config import BuildConfig
from trtkit.builder.profiles import parse_shapes
from trtkit.errors import BuildError

pytestmark = pytest.mark.gpu


def _config(cache: Path, **options) -> BuildConfig:
    return BuildConfig(profiles=[parse_shapes("x:1x3x8x8,2x3x8x8,4x3x8x8")], tactic_sources=GPU_TACTIC_SOURCES,
                       tf32=False, timing_cache=str(cache), **options)


def test_a_timing_cache_that_does_not_load_is_refused_then_replaced(tmp_path):
    cache = tmp_path / "garbage.cache"
    cache.write_bytes(b"\x00\x01 not a timing cache \xff" * 16)
    with pytest.raises(BuildError, match="does not load"):
        build(models.tiny_conv(), _config(cache), output=tmp_path / "a.engine")
    assert cache.read_bytes() == b"\x00\x01 not a timing cache \xff" * 16 and not (tmp_path / "a.engine").exists()
    build(models.tiny_conv(), _config(cache, timing_cache_reset=True), output=tmp_path / "b.engine")
    assert (tmp_path / "b.engine").stat().st_size > 0 and cache.read_bytes()[:4] != b"\x00\x01 n"
    # the cache TensorRT wrote loads again, without reset
    build(models.tiny_conv(), _config(cache), output=tmp_path / "c.engine")


def test_the_default_timing_cache_is_named_for_the_gpu_and_merged_by_the_next_build(tmp_path, monkeypatch):
    import tensorrt as trt

    monkeypatch.setenv("TRTKIT_CACHE_DIR", str(tmp_path / "user-cache"))
    config = BuildConfig(profiles=[parse_shapes("x:1x3x8x8,2x3x8x8,4x3x8x8")], tactic_sources=GPU_TACTIC_SOURCES)
    first = build(models.tiny_conv(), config, output=tmp_path / "a.engine")
    path = Path(first.manifest.timing_cache["path"])
    assert first.manifest.timing_cache["status"] == "created" and path.name.endswith(f"-trt{trt.__version__}.cache")
    assert json.loads(path.with_name(path.name + ".json").read_text())["gpu"] == first.manifest.environment.gpu
    second = build(models.tiny_conv(channels=8), config, output=tmp_path / "b.engine")
    assert second.manifest.timing_cache == {**first.manifest.timing_cache, "status": "hit"}
    assert path.stat().st_size >= len(first.timing_cache)  # the first build's timings were kept, the second's added


def test_the_op_table_agrees_with_the_installed_parser():
    """Every op onnx-tensorrt's list for this version marks Y should have an importer in the real parser."""
    import tensorrt as trt

    from trtkit import _version_compat as compat
    from trtkit.builder.op_support import entry_for
    from trtkit.log import make_trt_logger

    entry = entry_for(trt.__version__)
    if entry is None:
        pytest.skip(f"the op table has no list for TensorRT {trt.__version__}")
    logger = make_trt_logger(trt)
    builder = trt.Builder(logger)
    parser = trt.OnnxParser(builder.create_network(compat.network_flags(trt)), logger)
    ops = sorted(entry["supported"] | entry["unsupported"])
    answers = {op: compat.parser_supports_operator(parser, op) for op in ops}
    out = os.environ.get("TRTKIT_HARDENING_OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        Path(out, "op_support.json").write_text(json.dumps({"tensorrt": trt.__version__, "parser": answers}, indent=1))
    listed_yes_parser_no = sorted(op for op in entry["supported"] if answers[op] is False)
    assert listed_yes_parser_no == [], listed_yes_parser_no
