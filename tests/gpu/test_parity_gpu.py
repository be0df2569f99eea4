"""Parity on a real GPU: FP32 and FP16 engines of tiny conv nets pass, an engine of other weights fails clearly.

Run on the GPU host: ``bash .gpu/bin/gpu-run pytest -m gpu -q tests/gpu/test_parity_gpu.py``. Set
``TRTKIT_GPU_CACHE`` to a folder to keep timing caches between runs, and ``TRTKIT_PARITY_OUT`` to a folder to get
every parity report written there as JSON (``parity-<case>.json``).
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
from trtkit.parity import compare_engine_to_onnx

pytestmark = pytest.mark.gpu

TINY_PROFILE = "x:1x3x8x8,2x3x8x8,4x3x8x8"
SAMPLE_PROFILES = ("images:1x3x64x64,2x3x64x64,4x3x64x64", "images:8x3x64x64,8x3x64x64,16x3x64x64")


@pytest.fixture(scope="module")
def engines(tmp_path_factory, cache_dir):
    """Engine files (with manifests) of the tiny conv net: fp32 (TF32 off), fp16, and fp16 of other weights."""
    folder = tmp_path_factory.mktemp("parity")
    specs = {"fp32": (models.tiny_conv(), "fp32", False), "fp16": (models.tiny_conv(), "fp16", True),
             "wrong": (models.tiny_conv(seed=1), "fp16", True)}
    out = {}
    for name, (model, precision, tf32) in specs.items():
        config = BuildConfig(precision=precision, tf32=tf32, profiles=[parse_shapes(TINY_PROFILE)],
                             tactic_sources=GPU_TACTIC_SOURCES, timing_cache=str(cache_dir / "parity-tiny.cache"))
        out[name] = folder / f"tiny-{name}.engine"
        build(model, config, output=out[name], isolate=False)
    onnx_path = folder / "tiny.onnx"
    onnx_path.write_bytes(models.tiny_conv().SerializeToString())
    out["onnx"] = onnx_path
    return out


def _save(name: str, report) -> None:
    folder = os.environ.get("TRTKIT_PARITY_OUT")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / f"parity-{name}.json").write_text(json.dumps(report.to_dict(), indent=2))


@pytest.mark.parametrize("name", ["fp32", "fp16"])
def test_engine_passes_parity_with_precision_from_its_manifest(engines, name):
    report = compare_engine_to_onnx(engines["onnx"], engines[name], trials=3)
    _save(f"tiny-{name}", report)
    assert report.passed, report.verdict()
    assert report.precision == name
    assert report.shapes == {"x": (2, 3, 8, 8)}
    (worst,) = report.worst()
    assert worst.metrics.cosine > 0.999


def test_engine_of_other_weights_fails_with_a_clear_verdict(engines):
    report = compare_engine_to_onnx(engines["onnx"], engines["wrong"], trials=2)
    _save("tiny-wrong", report)
    assert not report.passed
    verdict = report.verdict()
    assert verdict.startswith("FAIL: 1 of 1 output(s) out of tolerance ('y'); output 'y': max abs error")
    assert "allowed for fp16 (worst at index" in verdict


def test_engine_bytes_every_batch_of_the_profile_and_cuda_graphs(engines):
    data = engines["fp16"].read_bytes()
    for batch in (1, 4):
        report = compare_engine_to_onnx(engines["onnx"], data, shapes={"x": (batch, 3, 8, 8)}, precision="fp16")
        assert report.passed, report.verdict()
    report = compare_engine_to_onnx(engines["onnx"], engines["fp32"], runner_options={"cuda_graph": True}, trials=2)
    assert report.passed, report.verdict()


def test_cli_exit_codes_and_json(engines, tmp_path, capsys):
    from trtkit.cli.main import main

    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    assert main(["parity", str(engines["onnx"]), str(engines["fp16"]), "--trials", "2", "--json", str(good)]) == 0
    assert main(["parity", str(engines["onnx"]), str(engines["wrong"]), "--json", str(bad)]) == 1
    text = capsys.readouterr().out
    assert "PASS: 1 output(s) within tolerance for fp16 over 2 trials" in text
    assert "FAIL: 1 of 1 output(s) out of tolerance ('y')" in text
    assert json.loads(good.read_text())["passed"] is True and json.loads(bad.read_text())["passed"] is False


def test_sample_cnn_fp16_in_its_second_profile(tmp_path, cache_dir):
    from trtkit.sample_model import make_sample_cnn

    model = make_sample_cnn()
    config = BuildConfig(precision="fp16", profiles=[parse_shapes(p) for p in SAMPLE_PROFILES],
                         tactic_sources=GPU_TACTIC_SOURCES, timing_cache=str(cache_dir / "parity-sample.cache"))
    path = tmp_path / "sample-fp16.engine"
    build(model, config, output=path, isolate=False)
    report = compare_engine_to_onnx(model, path, profile_index=1, trials=2)
    _save("sample-fp16-profile1", report)
    assert report.passed, report.verdict()
    assert report.shapes == {"images": (8, 3, 64, 64)}
    (worst,) = report.worst()
    assert worst.metrics.top1_agreement is not None  # (N, 10) logits are classifier-like


def test_localize_builds_a_debug_engine_with_every_tensor_marked(engines):
    from trtkit.manifest import read_manifest
    from trtkit.parity.localize import config_from_manifest, engine_builder, localize_divergence

    config = config_from_manifest(read_manifest(engines["fp16"]))
    located = localize_divergence(engines["onnx"], engine_builder(config), precision="fp16", trials=2)
    _save("tiny-fp16-localize", located.report)
    assert [t.tensor for t in located.tensors] == ["c", "r", "y"]
    assert located.first_failure is None, located.verdict()
