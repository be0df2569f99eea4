"""benchmarks/build_overhead.py's dry run on the fake TensorRT: the same commands, fresh processes, the JSON the issue
asks for (the real run is on the GPU host)."""

from __future__ import annotations

import json

import pytest

from tests.scripts import script_module


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


def test_unknown_variant_is_a_usage_error(overhead, tmp_path):
    with pytest.raises(SystemExit) as info:
        overhead.main(["--fake", "--variants", "fast", "--out", str(tmp_path / "o.json")])
    assert info.value.code == 2
