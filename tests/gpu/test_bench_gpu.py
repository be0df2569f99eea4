"""``trtkit bench`` on a real GPU with a tiny engine: runs in a few seconds, sane numbers, JSON. No timing targets.

Run on the GPU host: ``bash .gpu/bin/gpu-run pytest -m gpu -q tests/gpu/test_bench_gpu.py``.
"""

from __future__ import annotations

import json

import pytest

from tests.gpu.test_runtime_gpu import engine_bytes  # noqa: F401 - the session's tiny conv engine (a fixture)

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def engine_path(engine_bytes, tmp_path_factory):  # noqa: F811
    path = tmp_path_factory.mktemp("bench") / "tiny.engine"
    path.write_bytes(engine_bytes)
    return path


@pytest.mark.parametrize("graph,streams,transfers", [(True, 1, True), (False, 1, True), (True, 2, False)])
def test_benchmark_tiny_engine(engine_path, graph, streams, transfers):
    from trtkit.bench import BenchSettings, benchmark

    result = benchmark(engine_path, BenchSettings(cuda_graph=graph, streams=streams, data_transfers=transfers,
                                                  duration_s=0.5, warmup_ms=50))
    assert result.queries > 10 and result.qps > 0 and result.items_per_s == pytest.approx(2 * result.qps)
    assert 0 < result.compute.min <= result.compute.median <= result.compute.max
    assert result.latency.median >= result.compute.median * 0.99
    assert (result.h2d is not None) == transfers
    assert result.e2e.count >= 10 and result.e2e_copied.count >= 10


def test_cli_bench_json(engine_path, tmp_path, capsys):
    from trtkit.cli import main as cli_main

    out = tmp_path / "bench.json"
    code = cli_main.main(["bench", str(engine_path), "--shapes", "x:4x3x8x8", "--duration-s", "0.5",
                          "--warmup-ms", "50", "--json", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    data = json.loads(out.read_text())
    assert data["shapes"] == {"x": [4, 3, 8, 8]}
    assert data["gpu_compute_ms"]["median"] > 0 and data["throughput"]["qps"] > 0
    print(captured.out)


def test_layer_profile_joins_every_timed_layer_with_the_inspector(engine_path, tmp_path, capsys):
    """TensorRT's IProfiler reports arrive after each run (enqueue_emits_profile off, report_to_profiler), and each
    reported name is one the engine inspector lists (the engine is built with DETAILED verbosity)."""
    from trtkit.bench.layers import profile_layers
    from trtkit.cli import main as cli_main

    profile = profile_layers(engine_path, {"x": (4, 3, 8, 8)}, runs=10, warmup=2)
    assert profile.layers and profile.total_ms > 0 and all(layer.ms >= 0 for layer in profile.layers)
    assert all(layer.layer_type is not None for layer in profile.layers), [lay.name for lay in profile.layers]
    assert profile.layers == sorted(profile.layers, key=lambda layer: layer.ms, reverse=True)
    out = tmp_path / "layers.json"
    code = cli_main.main(["bench", str(engine_path), "--layers", "--runs", "5", "--json", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(out.read_text())["summary"]["layers"] == len(profile.layers)
    print(captured.out)
