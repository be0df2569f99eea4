"""Foundation on a real GPU: build → run → compare, graphs, profile checks, manifest refusal, CLI, ResNet-50.

Run on the GPU host: ``bash .gpu/bin/gpu-run pytest -m gpu -q``. Set ``TRTKIT_GPU_CACHE`` to a folder to keep
timing caches and exported models between runs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests import models
from tests.conftest import GPU_TACTIC_SOURCES
from trtkit.builder.api import build
from trtkit.builder.config import BuildConfig
from trtkit.builder.profiles import parse_shapes
from trtkit.errors import EngineError, InputError
from trtkit.manifest import manifest_path

pytestmark = pytest.mark.gpu

TORCH_PY = "/opt/torch/.venv/bin/python3"
ROOT = Path(__file__).resolve().parents[2]


def reference(model, feed):
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(model).run(None, feed)


def rel_err(got, ref) -> float:
    return float(np.max(np.abs(got.astype(np.float64) - ref)) / (np.max(np.abs(ref)) or 1.0))


@pytest.fixture(scope="module")
def tiny_engine(tmp_path_factory, cache_dir):
    out = tmp_path_factory.mktemp("tiny") / "tiny.engine"
    cfg = BuildConfig(profiles=[parse_shapes("x:1x3x8x8,2x3x8x8,4x3x8x8")], tactic_sources=GPU_TACTIC_SOURCES,
                      tf32=False, timing_cache=str(cache_dir / "tiny.cache"))
    build(models.tiny_conv(), cfg, output=out)  # isolated (child process) build, the default
    return out


@pytest.mark.proves("fp32")
def test_tiny_conv_matches_onnx_reference(tiny_engine):
    from trtkit import TrtRunner

    x = np.random.default_rng(1).standard_normal((3, 3, 8, 8)).astype(np.float32)
    with TrtRunner(tiny_engine) as runner:
        y = runner.infer({"x": x})["y"]
    assert y.shape == (3, 4, 1, 1)
    assert rel_err(y, reference(models.tiny_conv(), {"x": x})[0]) <= 1e-4


@pytest.mark.proves("cuda_graphs")
def test_graph_and_plain_outputs_are_bit_identical(tiny_engine):
    from trtkit import TrtRunner

    x = np.random.default_rng(2).standard_normal((4, 3, 8, 8)).astype(np.float32)
    with TrtRunner(tiny_engine) as plain, TrtRunner(tiny_engine, cuda_graph=True) as graphed:
        a = plain.infer({"x": x})["y"].copy()
        b = graphed.infer({"x": x})["y"].copy()
        c = graphed.infer({"x": x})["y"].copy()  # a replay of the captured graph
    assert np.array_equal(a, b) and np.array_equal(a, c)


def test_shape_outside_profile_is_refused_then_runner_still_works(tiny_engine):
    from trtkit import TrtRunner

    with TrtRunner(tiny_engine) as runner:
        with pytest.raises(InputError, match=r"Input 'x': shape \(5, 3, 8, 8\) is outside profile 0"):
            runner.infer({"x": np.zeros((5, 3, 8, 8), np.float32)})
        with pytest.raises(InputError, match="x"):
            runner.infer({"x": np.zeros((1, 3, 8, 8), np.float64)})
        assert runner.infer({"x": np.zeros((1, 3, 8, 8), np.float32)})["y"].shape == (1, 4, 1, 1)


def test_manifest_naming_another_gpu_is_refused(tiny_engine, tmp_path):
    from trtkit.runtime.engine import load_engine

    engine = tmp_path / "other.engine"
    shutil.copy(tiny_engine, engine)
    manifest = json.loads(manifest_path(tiny_engine).read_text())
    manifest["environment"].update(gpu="NVIDIA A100-SXM4-80GB", compute_capability="8.0")
    manifest_path(engine).write_text(json.dumps(manifest))
    with pytest.raises(EngineError, match="compute capability 8.0"):
        load_engine(engine)
    assert load_engine(engine, allow_mismatch=True) is not None


def test_corrupt_engine_is_a_clear_error(tmp_path):
    from trtkit.runtime.engine import load_engine

    bad = tmp_path / "bad.engine"
    bad.write_bytes(b"\x00" * 1000)
    with pytest.raises(EngineError, match="bad.engine"):
        load_engine(bad)


def test_parse_error_on_gpu_names_the_node(tmp_path):
    from trtkit.errors import ParseError

    with pytest.raises(ParseError, match="mystery|Mystery"):
        build(models.unsupported_op(), BuildConfig(tactic_sources=GPU_TACTIC_SOURCES), output=tmp_path / "u.engine")
    assert list(tmp_path.iterdir()) == []


def test_cli_build_inspect_run(tmp_path, capsys, cache_dir):
    from trtkit.cli.main import main

    model = tmp_path / "tiny.onnx"
    model.write_bytes(models.tiny_conv().SerializeToString())
    engine = tmp_path / "tiny.engine"
    assert main(["build", str(model), "-o", str(engine), "--shapes", "x:1x3x8x8,2x3x8x8,4x3x8x8", "--fp16",
                 "--tactic-sources", ",".join(GPU_TACTIC_SOURCES),
                 "--timing-cache", str(cache_dir / "tiny.cache")]) == 0
    assert main(["inspect", str(engine), "--json", str(tmp_path / "i.json")]) == 0
    info = json.loads((tmp_path / "i.json").read_text())
    assert [t["name"] for t in info["io"]] == ["x", "y"]
    assert info["profiles"][0]["x"]["max"] == [4, 3, 8, 8]
    assert main(["run", str(engine)]) == 0
    out = capsys.readouterr().out
    assert "y" in out


# --- ResNet-50 exported with torchvision (random weights), dynamic batch 1..32 -------------------------------------


@pytest.fixture(scope="module")
def resnet50(cache_dir):
    onnx_path, ref_path = cache_dir / "resnet50.onnx", cache_dir / "resnet50_ref.npz"
    if not (onnx_path.exists() and ref_path.exists()):
        if not Path(TORCH_PY).exists():
            pytest.skip(f"PyTorch is not at {TORCH_PY}: cannot export ResNet-50")
        subprocess.run([TORCH_PY, str(ROOT / "scripts/export_torchvision.py"), "resnet50", str(onnx_path),
                        "--reference", str(ref_path), "--batch", "4"], check=True)
    return onnx_path, np.load(ref_path)


@pytest.mark.parametrize("tf32, tolerance", [(True, 3e-3), (False, 1e-4)])  # TF32 rounding depends on the tactics
def test_resnet50_matches_pytorch(resnet50, cache_dir, tmp_path, tf32, tolerance):
    from trtkit import TrtRunner

    onnx_path, ref = resnet50
    cfg = BuildConfig(profiles=[parse_shapes("images:1x3x224x224,8x3x224x224,32x3x224x224")],
                      tactic_sources=GPU_TACTIC_SOURCES, tf32=tf32, timing_cache=str(cache_dir / "resnet50.cache"))
    engine = tmp_path / "resnet50.engine"
    build(onnx_path, cfg, output=engine, isolate=False)  # in-process: saves a CUDA start
    with TrtRunner(engine) as runner:
        logits = runner.infer({"images": ref["images"]})["logits"]
    err = rel_err(logits, ref["logits"])
    print(f"ResNet-50 FP32 tf32={tf32}: max abs err / max |ref| = {err:.3e} (allowed {tolerance})")
    assert err <= tolerance
