"""``benchmarks/runner_vs_anchors.py`` end to end on the fake backend (a tiny stand-in for ResNet-50, no torch): the
GPU host gets one call per session, so the script must not fail on anything but the GPU itself."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from onnx import TensorProto, helper, save

pytestmark = pytest.mark.bench  # a benchmark harness's test: pytest -m bench

ROOT = Path(__file__).resolve().parents[2]
KEYS = {"floor_ms", "floor_compute_ms", "trtkit_ms", "trtkit_graph_ms", "trtkit_device_ms", "polygraphy_ms",
        "loop_ms", "torch_eager_ms", "torch_compile_ms", "bench_gpu_compute_ms"}

WRAPPER = """
import runpy, sys
import cuda.bindings
sys.path.insert(0, {root!r})
from tests.fakes.fake_cuda import FakeCudart
from tests.fakes.fake_trt import make_fake_trt
rt = FakeCudart()
sys.modules["cuda.bindings.runtime"] = rt
cuda.bindings.runtime = rt
sys.modules["tensorrt"] = make_fake_trt("8.6.0")
sys.argv = [{script!r}] + sys.argv[1:]
runpy.run_path({script!r}, run_name="__main__")
"""


def stand_in_model(path: Path) -> None:
    """images (N,3,224,224) → GlobalAveragePool → Flatten → logits (N,3): ResNet-50's I/O names, cheap to run."""
    nodes = [helper.make_node("GlobalAveragePool", ["images"], ["p"]), helper.make_node("Flatten", ["p"], ["logits"])]
    graph = helper.make_graph(nodes, "standin",
                              [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, 224, 224])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    save(model, str(path))


def test_runner_vs_anchors_writes_every_key(tmp_path):
    stand_in_model(tmp_path / "m.onnx")
    wrapper = tmp_path / "wrapper.py"
    wrapper.write_text(WRAPPER.format(root=str(ROOT), script=str(ROOT / "benchmarks" / "runner_vs_anchors.py")))
    results, out = tmp_path / "results" / "runner-h200.json", tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(wrapper), "--onnx", str(tmp_path / "m.onnx"), "--no-torch", "--budget-s", "0.05",
         "--leak-calls", "200", "--batches", "1,2", "--cache", str(tmp_path / "cache"), "--results", str(results),
         "--out", str(out)], capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    data = json.loads(results.read_text())
    assert json.loads((out / "runner-h200.json").read_text()) == data
    assert data["gpu"] == "Fake GPU" and data["tensorrt"] == "8.6.0"
    for batch in ("1", "2"):
        assert set(data[batch]) == KEYS
        for key in KEYS - {"polygraphy_ms", "torch_eager_ms", "torch_compile_ms"}:
            assert data[batch][key] > 0, (batch, key)
    assert data["leak_calls"] >= 200 and data["leak_bytes_device"] == 0
    assert "leak_bytes_host" in data and "b1_graph_over_floor" in data["targets"]
    steps = data["extra"]["1"]["breakdown_us"]
    assert set(steps) == {"infer", "copy_in", "launch", "sync", "copy_out", "in_place_infer", "in_place_launch_sync",
                          "device_infer", "device_launch_sync", "raw_launch_sync"}
    assert all(v > 0 for v in steps.values()), steps
    assert data["extra"]["2"]["bench_gpu_compute_with_transfers_ms"] > 0
    for key in ("trtkit_graph_copy_ms", "loop_graph_registered_ms", "loop_pageable_graph_ms"):
        assert data["extra"]["1"][key] > 0, key
    assert data["targets"]["b1_graph_copy_over_floor"]["value"] > 0
    unexpected = [k for k in data["errors"] if not k.startswith(("torch", "1.polygraphy", "2.polygraphy"))]
    assert unexpected == []
    assert len(list((tmp_path / "cache").glob("*.engine"))) == 1


def test_torch_anchor_runs_from_anywhere_without_trtkit(tmp_path):
    """The GPU host runs it under PyTorch's own Python, where trtkit is not installed: it may only need the
    standard library and benchmarks/timing.py next to it."""
    code = ("import builtins, runpy, sys\n"
            "real = builtins.__import__\n"
            "def guard(name, *a, **k):\n"
            "    if name.split('.')[0] in ('trtkit', 'calibrators'):\n"
            "        raise ImportError('trtkit is not installed here')\n"
            "    return real(name, *a, **k)\n"
            "builtins.__import__ = guard\n"
            f"sys.argv = ['torch_anchor.py', '--help']\n"
            f"runpy.run_path({str(ROOT / 'benchmarks' / 'torch_anchor.py')!r}, run_name='__main__')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "--budget-s" in proc.stdout
