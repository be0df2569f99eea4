"""``trtkit bench`` and ``trtkit run`` on the fake backend: options, JSON schema, ONNX build cache, errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests import models
from tests.runtime.fakes import CONV_PROFILE, fake_engine_bytes
from trtkit.cli import main as cli_main

SUMMARY_KEYS = {"count", "min", "mean", "median", "p90", "p95", "p99", "max", "stdev", "cov"}


def run_cli(argv, capsys):
    code = cli_main.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def engine_file(tmp_path):
    path = tmp_path / "conv.engine"
    path.write_bytes(fake_engine_bytes(models.tiny_conv(), [CONV_PROFILE]))
    return path


@pytest.mark.parametrize("command", ["bench", "run"])
def test_help_lists_the_options(command, capsys):
    code, out, _ = run_cli([command, "--help"], capsys)
    assert code == 0
    wanted = {"bench": ["--cuda-graph", "--no-data-transfers", "--streams", "--warmup-ms", "--duration-s",
                        "--iterations", "--json", "--shapes"],
              "run": ["--input", "--shapes", "--cuda-graph", "--save-outputs", "--json"]}[command]
    for option in wanted:
        assert option in out


def test_bench_json_schema(fake_gpu, engine_file, tmp_path, capsys):
    out_json = tmp_path / "bench.json"
    code, out, err = run_cli(["bench", str(engine_file), "--shapes", "x:3x3x8x8", "--iterations", "20",
                              "--warmup-ms", "5", "--streams", "2", "--json", str(out_json)], capsys)
    assert code == 0, err
    assert "GPU compute" in out and "throughput" in out
    data = json.loads(out_json.read_text())
    assert data["shapes"] == {"x": [3, 3, 8, 8]} and data["batch"] == 3 and data["queries"] == 20
    assert data["settings"]["streams"] == 2 and data["settings"]["cuda_graph"] is True
    for key in ("latency_ms", "gpu_compute_ms", "enqueue_ms",
                "h2d_ms", "d2h_ms", "e2e_ms", "e2e_copied_ms"):
        assert set(data[key]) == SUMMARY_KEYS, key
    assert "infer(), input copied" in out
    assert data["latency_ms"]["count"] == 20
    assert data["throughput"]["items_per_s"] == pytest.approx(3 * data["throughput"]["qps"], rel=1e-3)
    assert isinstance(data["warnings"], list)
    assert data["environment"] == {"tensorrt": "8.6.0", "gpu": "Fake GPU", "compute_capability": "9.0"}


def test_bench_without_transfers_has_no_copy_times(fake_gpu, engine_file, tmp_path, capsys):
    code, _, err = run_cli(["bench", str(engine_file), "--no-data-transfers", "--no-cuda-graph", "--iterations",
                            "5", "--warmup-ms", "0", "--no-e2e", "--json", str(tmp_path / "b.json")], capsys)
    assert code == 0, err
    data = json.loads((tmp_path / "b.json").read_text())
    assert data["h2d_ms"] is None and data["d2h_ms"] is None and data["e2e_ms"] is None
    assert data["e2e_copied_ms"] is None
    assert data["shapes"] == {"x": [2, 3, 8, 8]}  # the profile's opt shape


def test_bench_shape_outside_profile_is_one_line(fake_gpu, engine_file, capsys):
    code, _, err = run_cli(["bench", str(engine_file), "--shapes", "x:9x3x8x8", "--iterations", "3"], capsys)
    assert code == 1
    assert "Input 'x': shape (9, 3, 8, 8) is outside profile 0 (min (1, 3, 8, 8), max (4, 3, 8, 8))" in err
    assert err.count("\n") == 1


def test_bench_onnx_builds_once_then_uses_the_cache(fake_gpu, tmp_path, capsys):
    model = tmp_path / "conv.onnx"
    model.write_bytes(models.tiny_conv().SerializeToString())
    argv = ["bench", str(model), "--shapes", "x:1x3x8x8,2x3x8x8,4x3x8x8", "--no-isolate", "--iterations", "3",
            "--warmup-ms", "0", "--no-e2e", "--cache-dir", str(tmp_path / "cache")]
    code, out, err = run_cli(argv, capsys)
    assert code == 0, err
    assert "built and cached" in out
    engines = list((tmp_path / "cache").glob("conv-*.engine"))
    assert len(engines) == 1
    code, out, err = run_cli(argv, capsys)
    assert code == 0 and "using cached engine" in out
    code, out, err = run_cli(argv + ["--fp16"], capsys)  # other settings: another engine
    assert code == 0 and "built and cached" in out
    assert len(list((tmp_path / "cache").glob("conv-*.engine"))) == 2


def test_bench_missing_engine_is_one_line(fake_gpu, tmp_path, capsys):
    code, _, err = run_cli(["bench", str(tmp_path / "nope.engine")], capsys)
    assert code == 1 and "does not exist" in err and err.count("\n") == 1


def test_run_with_npz_and_random_inputs(fake_gpu, tmp_path, capsys):
    engine = tmp_path / "two.engine"
    engine.write_bytes(fake_engine_bytes(models.two_inputs(), [{"a": [[1, 4], [2, 4], [3, 4]],
                                                                "b": [[1, 4], [2, 4], [3, 4]]}]))
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.save(tmp_path / "a.npy", a)
    b = np.ones((3, 4), np.float32)
    np.savez(tmp_path / "b.npz", b=b)
    code, out, err = run_cli(["run", str(engine), "-i", f"a={tmp_path / 'a.npy'}", "-i", str(tmp_path / "b.npz"),
                              "--save-outputs", str(tmp_path / "out.npz"), "--json", str(tmp_path / "r.json")],
                             capsys)
    assert code == 0, err
    saved = np.load(tmp_path / "out.npz")
    np.testing.assert_array_equal(saved["y"], a * 2 + b)
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["outputs"]["y"]["shape"] == [3, 4] and report["outputs"]["y"]["max"] == 23.0
    code, out, err = run_cli(["run", str(engine), "--shapes", "a:2x4 b:2x4"], capsys)
    assert code == 0 and "2x4" in out


def test_run_misnamed_input_is_one_line(fake_gpu, engine_file, tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 8, 8), np.float32))
    code, _, err = run_cli(["run", str(engine_file), "-i", f"images={tmp_path / 'x.npy'}"], capsys)
    assert code == 1 and "Unknown input 'images'" in err and "the engine's inputs are 'x'" in err


def test_run_npy_without_name_is_one_line(fake_gpu, engine_file, tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 8, 8), np.float32))
    code, _, err = run_cli(["run", str(engine_file), "-i", str(tmp_path / "x.npy")], capsys)
    assert code == 1 and "give the input name" in err


@pytest.mark.parametrize("option,value,message", [("--streams", "0", "--streams must be at least 1, got 0"),
                                                  ("--iterations", "0", "--iterations must be at least 1"),
                                                  ("--duration-s", "0", "--duration-s must be positive"),
                                                  ("--warmup-ms", "-1", "--warmup-ms cannot be negative")])
def test_bench_refuses_settings_that_measure_nothing(engine_file, capsys, option, value, message):
    code, _, err = run_cli(["bench", str(engine_file), option, value], capsys)
    assert code == 1 and message in err and err.count("\n") == 1
