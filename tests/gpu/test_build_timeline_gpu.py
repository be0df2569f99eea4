"""The build worker on the real TensorRT (GPU host): one builder, kept from the worker's warm-up, serves two builds;
TensorRT's log of each still reaches that build's progress; each build's phase log has the worker's steps.

Run: ``bash .gpu/bin/gpu-run pytest -m gpu -q tests/gpu/test_build_timeline_gpu.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import GPU_TACTIC_SOURCES

pytestmark = pytest.mark.gpu

DIGITS = Path(__file__).resolve().parents[1] / "data" / "digits_cnn.onnx"

# a fresh process, so that the worker is new and this test process's own TensorRT does not count
_SCRIPT = textwrap.dedent("""
    import json, sys
    import trtkit
    from trtkit import BuildConfig, parse_shapes
    config = BuildConfig(profiles=[parse_shapes("images:1x1x8x8,32x1x8x8,64x1x8x8")],
                         tactic_sources=tuple(sys.argv[2].split(",")))
    runs = []
    for name in ("a", "b"):
        events = []
        result = trtkit.build(sys.argv[1], config, output=name + ".engine", on_progress=events.append)
        last = events[-1]
        runs.append({"timings": result.manifest.timings_s, "layers": [last.layers_done, last.layers_total],
                     "engine_bytes": len(result.engine)})
    print(json.dumps({"runs": runs, "tensorrt_here": "tensorrt" in sys.modules}))
""")


def test_two_isolated_builds_share_one_builder_and_log_their_steps(tmp_path):
    done = subprocess.run([sys.executable, "-c", _SCRIPT, str(DIGITS), ",".join(GPU_TACTIC_SOURCES)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["tensorrt_here"] is False
    first, second = report["runs"]
    for run in (first, second):
        done_layers, total = run["layers"]
        assert total and done_layers == total  # the kept logger, pointed at this build, heard TensorRT's lines
        assert run["engine_bytes"] > 0
    steps = ["process_start", "worker_spawned", "tensorrt_imported", "builder_created", "worker_ready", "call_sent",
             "build_started", "builder_ready", "parsed", "built", "serialized", "detail_done", "result_received"]
    timings = first["timings"]
    assert [timings[s] for s in steps] == sorted(timings[s] for s in steps)
    assert "worker_reused" in second["timings"] and "builder_created" not in second["timings"]
    print(json.dumps(report, indent=1))  # the figures, for the GPU log
