"""benchmarks/build_overhead.py's dry run on the fake TensorRT: the same commands, fresh processes, the JSON the issue
asks for (the real run is on the GPU host)."""

from __future__ import annotations

import json

import pytest

from tests.scripts import script_module

pytestmark = pytest.mark.bench  # a benchmark harness's test: pytest -m bench


@pytest.fixture(scope="module")
def overhead():
    with script_module("benchmarks", "build_overhead") as module:
        yield module


def test_fake_run_times_raw_and_trtkit_builds_and_writes_the_json(overhead, tmp_path, capsys):
    out = tmp_path / "overhead.json"
    assert overhead.main(["--fake", "--repeats", "1", "--variants", "no-isolate", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    digits = report["models"]["digits_cnn"]
    assert digits["raw_s"] > 0 and digits["trtkit_s"] > 0 and len(digits["trtkit_runs"]) == 1
    assert digits["ratio"] == round(digits["trtkit_s"] / digits["raw_s"], 3)
    assert digits["variants"]["no-isolate"]["flags"] == ["--no-isolate"]
    assert report["tensorrt"] == "fake 8.6.0"
    # each trtkit run's phase log, from its process start to its exit; the isolated run's has the worker's steps
    (timings,) = digits["trtkit_timings_s"]
    assert timings["process_start"] == 0.0 and 0 < timings["exit"] <= digits["trtkit_s"]
    assert timings["worker_ready"] <= timings["call_sent"] <= timings["built"] <= timings["result_received"]
    (in_process,) = digits["variants"]["no-isolate"]["timings_s"]
    assert "built" in in_process and "worker_spawned" not in in_process


def test_models_picks_among_the_models_given(overhead, tmp_path):
    out = tmp_path / "overhead.json"
    assert overhead.main(["--fake", "--repeats", "1", "--models", "digits_cnn", "--out", str(out)]) == 0
    assert list(json.loads(out.read_text())["models"]) == ["digits_cnn"]
    with pytest.raises(SystemExit) as info:
        overhead.main(["--fake", "--models", "resnet50", "--out", str(tmp_path / "o.json")])  # not given
    assert info.value.code == 2


def test_unknown_variant_is_a_usage_error(overhead, tmp_path):
    with pytest.raises(SystemExit) as info:
        overhead.main(["--fake", "--variants", "fast", "--out", str(tmp_path / "o.json")])
    assert info.value.code == 2
