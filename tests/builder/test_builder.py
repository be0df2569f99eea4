import json

import onnx
import pytest

from tests import models
from tests.fakes.fake_trt import make_fake_trt
from trtkit.builder.api import build
from trtkit.builder.builder import build_serialized
from trtkit.builder.config import BuildConfig
from trtkit.builder.profiles import parse_shapes
from trtkit.errors import (
    BuildError,
    DependencyError,
    EngineError,
    ModelError,
    ParseError,
    ProfileError,
    TrtkitError,
    UnsupportedError,
)
from trtkit.manifest import check_manifest, manifest_path, read_manifest

PROFILE = [parse_shapes("x:1x3x8x8,2x3x8x8,4x3x8x8")]


def test_build_writes_engine_manifest_and_timing_cache(tmp_path, fake_trt):
    out = tmp_path / "m.engine"
    cfg = BuildConfig(profiles=PROFILE, timing_cache=str(tmp_path / "t.cache"),
                      tactic_sources=("EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS"))
    result = build(models.tiny_conv(), cfg, output=out, trt=fake_trt)
    assert out.read_bytes() == result.engine
    manifest = json.loads(manifest_path(out).read_text())
    assert manifest["environment"]["tensorrt"] == "8.6.0"
    assert manifest["build"]["profiles"][0]["x"]["max"] == [4, 3, 8, 8]
    assert manifest["build"]["tactic_sources"] == ["EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS"]
    assert manifest["model"]["sha256"] == result.manifest.to_json()["model"]["sha256"]
    assert (tmp_path / "t.cache").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.engine", "m.engine.manifest.json", "t.cache",
                                                          "t.cache.json", "t.cache.lock"]


def test_fp16_flag_is_set_where_it_exists(fake_trt):
    result = build_serialized(models.tiny_conv(), BuildConfig(precision="fp16", profiles=PROFILE), trt=fake_trt)
    assert result.manifest.to_json()["build"]["precision_plan"]["flags"] == ["FP16"]


def test_parse_failure_lists_node_and_op(tmp_path):
    trt = make_fake_trt("10.8.0")
    out = tmp_path / "m.engine"
    with pytest.raises(ParseError, match=r"node 'mystery' \(Mystery\): No importer registered for op: Mystery") as info:
        build(models.unsupported_op(), output=out, trt=trt)
    assert info.value.errors[0].node_op == "Mystery"
    assert list(tmp_path.iterdir()) == []


def test_dynamic_model_without_profile_fails_before_building(fake_trt):
    with pytest.raises(ProfileError, match="dynamic dimensions"):
        build_serialized(models.tiny_conv(), trt=fake_trt)


@pytest.mark.parametrize("data, match", [
    (b"definitely not onnx", "not a valid ONNX model"),
    (b"", "is empty"),
])
def test_not_onnx(tmp_path, fake_trt, data, match):
    path = tmp_path / "bad.onnx"
    path.write_bytes(data)
    with pytest.raises(ModelError, match=match):
        build(path, output=tmp_path / "x.engine", trt=fake_trt)
    assert not (tmp_path / "x.engine").exists()


def test_truncated_onnx(tmp_path, fake_trt):
    data = models.tiny_conv().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelError, match="cut.onnx"):
        build(path, trt=fake_trt)


def test_missing_model_file(tmp_path, fake_trt):
    with pytest.raises(ModelError, match="does not exist"):
        build(tmp_path / "nope.onnx", trt=fake_trt)


def test_unwritable_output_is_refused_before_building(tmp_path, fake_trt):
    with pytest.raises(TrtkitError, match="folder .* does not exist"):
        build(models.tiny_conv(), BuildConfig(profiles=PROFILE), output=tmp_path / "no" / "m.engine", trt=fake_trt)


def test_tactic_source_unknown_in_version():
    trt = make_fake_trt("11.4.0")
    with pytest.raises(UnsupportedError, match=r"Tactic source 'CUBLAS' does not exist in TensorRT 11.4.0"):
        build_serialized(models.tiny_conv(), BuildConfig(profiles=PROFILE, tactic_sources=("CUBLAS",)), trt=trt)


def test_fp16_flag_on_trt11_says_what_to_use():
    trt = make_fake_trt("11.4.0")
    with pytest.raises(UnsupportedError, match="cast"):
        build_serialized(models.tiny_conv(), BuildConfig(precision="fp16", fp16_mode="flag", profiles=PROFILE),
                         trt=trt)


def test_no_gpu_builder_failure_is_a_dependency_error():
    trt = make_fake_trt("8.6.0", fail_cuda_init=True)
    with pytest.raises(DependencyError, match="trtkit doctor"):
        build_serialized(models.tiny_conv(), BuildConfig(profiles=PROFILE), trt=trt)


def test_build_failure_reports_trt_errors(tmp_path, fake_trt):
    def refuse(self, network, config):
        self.logger.log(fake_trt.ILogger.Severity.ERROR, "Internal error: could not find any implementation")
        return None

    fake_trt.Builder.build_serialized_network = refuse
    with pytest.raises(BuildError, match="could not build an engine.*could not find any implementation"):
        build(models.tiny_conv(), BuildConfig(profiles=PROFILE), output=tmp_path / "m.engine", trt=fake_trt)
    assert list(tmp_path.iterdir()) == []


def test_bad_config_values():
    with pytest.raises(TrtkitError, match="precision must be one of 'fp32', 'fp16', 'bf16', 'int8', not 'fp8'"):
        BuildConfig(precision="fp8")
    with pytest.raises(TrtkitError, match="optimization_level must be an integer from 0 to 5"):
        BuildConfig(optimization_level=9)


def _manifest(trt="8.6.0", cc="9.0", gpu="NVIDIA H200", **build):
    return {"environment": {"tensorrt": trt, "compute_capability": cc, "gpu": gpu}, "build": build}


def test_manifest_check_refuses_other_gpu_and_version():
    here = {"tensorrt": "8.6.0", "compute_capability": "9.0", "gpu": "NVIDIA H200"}
    assert check_manifest(_manifest(), current=here) == []
    with pytest.raises(EngineError,
                       match=r"compute capability 8.0 \(this machine has NVIDIA H200, compute capability 9.0\)"):
        check_manifest(_manifest(cc="8.0", gpu="NVIDIA A100"), engine_path="m.engine", current=here)
    with pytest.raises(EngineError, match=r"TensorRT 10.8.0 \(this machine has 8.6.0\).*pass allow_mismatch to try"):
        check_manifest(_manifest(trt="10.8.0"), current=here)
    assert check_manifest(_manifest(cc="8.0"), current=here, allow_mismatch=True)
    assert check_manifest(_manifest(cc="8.0", hardware_compatibility="AMPERE_PLUS"), current=here) == []


def test_read_manifest_missing_and_corrupt(tmp_path):
    assert read_manifest(tmp_path / "m.engine") is None
    manifest_path(tmp_path / "m.engine").write_text("{not json")
    with pytest.raises(EngineError, match="unreadable"):
        read_manifest(tmp_path / "m.engine")


def test_model_with_external_data(tmp_path, fake_trt):
    model = models.tiny_conv()
    path = tmp_path / "ext.onnx"
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="ext.data",
              size_threshold=0)
    assert (tmp_path / "ext.data").exists()
    result = build(path, BuildConfig(profiles=PROFILE), trt=fake_trt)
    assert result.manifest.to_json()["model"]["name"] == "ext.onnx"
    (tmp_path / "ext.data").unlink()
    with pytest.raises(ModelError, match="external data"):
        build(path, BuildConfig(profiles=PROFILE), trt=fake_trt)


def test_parse_failure_on_86_names_node_from_the_model(tmp_path):
    """TensorRT 8.6's parser reports only the node's index; the error still names the node and its op."""
    trt = make_fake_trt("8.6.0")
    with pytest.raises(ParseError, match=r"node 'mystery' \(Mystery\): No importer registered"):
        build(models.unsupported_op(), trt=trt)


def test_out_of_gpu_memory_is_said_as_such_not_as_a_missing_implementation():
    from trtkit.builder.builder import failure_message

    log = [("WARNING", "Requested amount of GPU memory (17179869184 bytes) could not be allocated. There may not be "
                       "enough free memory for allocation to succeed."),
           ("WARNING", "Requested amount of GPU memory (4294967296 bytes) could not be allocated."),
           ("ERROR", "10: [optimizer.cpp::computeCosts::3869] Error Code 10: Internal Error (Could not find any "
                     "implementation for node /conv1/Conv.)")]
    text = failure_message("big.onnx", log, 1 << 30)
    assert text.startswith("TensorRT ran out of GPU memory building 'big.onnx'")
    assert "16384 MiB, 4096 MiB" in text and "workspace limit 1024 MiB" in text and "/conv1/Conv" in text
    ten = failure_message("m.onnx", [("ERROR", "[virtualMemoryBuffer.cpp::resizePhysical::140] Error Code 2: out of "
                                               "Memory (Requested size was 22942842880 bytes.)")], None)
    assert "could not allocate 21880 MiB (workspace limit TensorRT's default" in ten
    plain = failure_message("m.onnx", log[2:], None)
    assert plain.startswith("TensorRT could not build an engine for 'm.onnx'") and "GPU memory" not in plain


def test_a_parser_that_raises_midway_is_a_parse_error_naming_the_library(tmp_path, monkeypatch):
    """TensorRT 8.6's RoiAlign importer raises RuntimeError when libnvinfer_vc_plugin is missing (the GPU host's
    scoreboard, test_roialign_mode_max): a ParseError saying what to install, nothing half written."""
    trt = make_fake_trt("8.6.0")

    def missing_library(self, *args):
        raise RuntimeError("Unable to open library: libnvinfer_vc_plugin.so.8 due to libnvinfer_vc_plugin.so.8: "
                           "cannot open shared object file: No such file or directory")

    monkeypatch.setattr(trt.OnnxParser, "parse", missing_library)
    out = tmp_path / "m.engine"
    with pytest.raises(ParseError, match="stopped parsing 'test'.*libnvinfer_vc_plugin.so.8.*install TensorRT with its "
                                         "plugin libraries"):
        build(models.tiny_conv(dynamic_batch=False), output=out, trt=trt)
    assert list(tmp_path.iterdir()) == []
