"""The typed manifest: manifests written before it existed still load, and it writes the same JSON they had."""

import json
from pathlib import Path

import pytest

from tests import models
from tests.fakes.fake_trt import make_fake_trt
from trtkit.builder.api import build
from trtkit.builder.config import BuildConfig
from trtkit.builder.profiles import parse_shapes
from trtkit.errors import EngineError
from trtkit.manifest import FORMAT, Manifest, manifest_path, read_manifest
from trtkit.parity.localize import config_from_manifest
from trtkit.parity.tolerance import precision_from_manifest

# written by trtkit at ba5ca0a (the manifest was a dict then), from the build in _config() on the fake TensorRT 8.6
OLD = Path(__file__).parent / "data" / "manifest-format1-tiny-fp16.json"


def _config():
    return BuildConfig(precision="fp16", profiles=[parse_shapes("x:1x3x8x8,2x3x8x8,4x3x8x8")],
                       tactic_sources=("EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS"), precision_constraints="prefer")


def _keys(data, prefix=""):
    """Every key path of a JSON value (lists by their first item)."""
    if isinstance(data, dict):
        return {k for key, value in data.items() for k in {prefix + key} | _keys(value, prefix + key + ".")}
    if isinstance(data, list) and data:
        return _keys(data[0], prefix)
    return set()


def test_a_manifest_written_before_the_type_loads_typed(tmp_path):
    engine = tmp_path / "tiny-fp16.engine"
    manifest_path(engine).write_text(OLD.read_text())
    manifest = read_manifest(engine)
    assert manifest.format == 1 and manifest.environment.tensorrt == "8.6.0"
    assert manifest.model.inputs == {"x": ["N", 3, 8, 8]} and manifest.model.opset == 17
    assert manifest.build.precision == "fp16" and manifest.build.tf32 and not manifest.build.version_compatible
    assert manifest.build.profiles[0]["x"]["max"] == [4, 3, 8, 8]
    assert manifest.build.precision_plan.flags == ["FP16"]
    assert manifest.engine_file == "tiny-fp16.engine" and manifest.extra == {}
    assert manifest.to_json() == json.loads(OLD.read_text())  # nothing lost, nothing added


def test_readers_of_the_old_manifest_get_what_they_got_from_the_dict():
    old = json.loads(OLD.read_text())
    assert precision_from_manifest(old) == precision_from_manifest(Manifest.from_json(old)) == "fp16"
    assert config_from_manifest(old) == config_from_manifest(Manifest.from_json(old)) == _config()


def test_a_new_build_writes_every_key_the_old_manifest_had_with_the_same_values(tmp_path):
    out = tmp_path / "tiny-fp16.engine"
    result = build(models.tiny_conv(), _config(), output=out, trt=make_fake_trt("8.6.0"))
    written = json.loads(manifest_path(out).read_text())
    old = json.loads(OLD.read_text())
    assert _keys(old) <= _keys(written)  # settings added since (prepare, sanitize, ...) come on top
    assert written["format"] == FORMAT and {k: written["build"][k] for k in old["build"]} == old["build"]
    assert written["model"] == old["model"]
    assert Manifest.from_json(written).prepare == written["prepare"]
    assert isinstance(result.manifest, Manifest) and result.manifest.engine_file is None


def test_unknown_keys_are_kept_and_a_later_format_is_refused(tmp_path):
    data = dict(json.loads(OLD.read_text()), signed_by="ci")
    assert Manifest.from_json(data).to_json()["signed_by"] == "ci"
    manifest_path(tmp_path / "m.engine").write_text(json.dumps(dict(data, format=FORMAT + 1)))
    with pytest.raises(EngineError, match=f"format {FORMAT + 1}; this trtkit reads formats 1 to {FORMAT}"):
        read_manifest(tmp_path / "m.engine")
    with pytest.raises(EngineError, match="must be a JSON object; got list"):
        Manifest.from_json([])
