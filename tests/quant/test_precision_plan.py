"""Precision planning per TensorRT version on the fake backend: FP16/BF16 modes, INT8 modes, both INT8 paths."""

import json

import numpy as np
import onnx
import pytest

from calibrators.sources import IterableSource
from tests.fakes.fake_trt import make_fake_trt
from tests.quant.qmodels import residual_cnn
from tests.runtime.fakes import fake_gpu  # noqa: F401 - fixture
from trtkit._version_compat import capabilities
from trtkit.builder.builder import statistics_engine_builder
from trtkit.builder.config import BuildConfig, CalibrationSettings
from trtkit.builder.precision import plan_precision, resolve_half_mode, resolve_int8_mode
from trtkit.builder.profiles import parse_shapes
from trtkit.errors import CalibrationError, UnsupportedError
from trtkit.model import load_model

PROFILE = "x:1x3x8x8,4x3x8x8,8x3x8x8"


def with_calibrators(trt):
    """Give a fake 8.6/10 module TensorRT's calibrator base classes (the fake builder does not call them)."""

    class IInt8Calibrator:
        def __init__(self):
            pass

    trt.IInt8Calibrator = IInt8Calibrator
    trt.IInt8EntropyCalibrator2 = type("IInt8EntropyCalibrator2", (IInt8Calibrator,), {})
    trt.IInt8MinMaxCalibrator = type("IInt8MinMaxCalibrator", (IInt8Calibrator,), {})
    return trt


def _plan(trt, precision, **options):
    config = BuildConfig(precision=precision, profiles=[parse_shapes(PROFILE)], **options)
    return plan_precision(trt, load_model(residual_cnn()), config, capabilities(trt),
                          build_statistics_engine=statistics_engine_builder(config, trt))


def _data(n=16, seed=0):
    rng = np.random.default_rng(seed)
    return IterableSource([{"x": rng.standard_normal((4, 3, 8, 8)).astype(np.float32)} for _ in range(n // 4)],
                          identity=f"random-{seed}")


@pytest.mark.parametrize("version, mode, expected", [
    ("8.6.0", "auto", "flag"), ("10.8.0", "auto", "flag"), ("11.4.0", "auto", "cast"), ("10.8.0", "cast", "cast"),
    ("8.6.0", "cast", "cast+flag")])
def test_fp16_mode_per_version(version, mode, expected):
    assert resolve_half_mode(capabilities(make_fake_trt(version)), "fp16", mode) == expected


def test_fp16_modes_missing_in_a_version_say_where_they_exist():
    with pytest.raises(UnsupportedError, match="BuilderFlag.FP16, which TensorRT 11.4.0 does not have; it exists in "
                                               "TensorRT 8.6 to 10.x. Use fp16_mode 'cast'"):
        resolve_half_mode(capabilities(make_fake_trt("11.4.0")), "fp16", "flag")
    with pytest.raises(UnsupportedError, match="BF16 needs BuilderFlag.BF16 or strongly typed networks; "
                                               "TensorRT "
                                               "8.6.0 has neither.* use TensorRT 10 or later"):
        resolve_half_mode(capabilities(make_fake_trt("8.6.0")), "bf16", "auto")
    with pytest.raises(UnsupportedError, match="needs BuilderFlag.BF16, which TensorRT 8.6.0 does not have; it exists "
                                               "in TensorRT 9.0 to 10.x. Use TensorRT 10 or later."):
        resolve_half_mode(capabilities(make_fake_trt("8.6.0")), "bf16", "flag")


def test_fp16_plans_flag_and_cast():
    flag = _plan(make_fake_trt("8.6.0"), "fp16")
    assert flag.flags == ("FP16",) and not flag.strongly_typed
    cast = _plan(make_fake_trt("11.4.0"), "fp16")
    assert cast.flags == () and cast.strongly_typed
    assert cast.model.proto.graph.initializer[0].data_type == onnx.TensorProto.FLOAT16 or any(
        t.data_type == onnx.TensorProto.FLOAT16 for t in cast.model.proto.graph.initializer)
    assert "FP16 model (cast by trtkit), strongly typed network" in cast.notes
    on_86 = _plan(make_fake_trt("8.6.0"), "fp16", fp16_mode="cast")
    assert on_86.flags == ("FP16",) and not on_86.strongly_typed
    cast_note = "FP16 model (cast by trtkit), BuilderFlag.FP16 (TensorRT 8.6.0 has no strongly typed networks)"
    assert cast_note in on_86.notes
    bf16 = _plan(make_fake_trt("10.8.0"), "bf16", fp16_mode="cast")
    assert any(t.data_type == onnx.TensorProto.BFLOAT16 for t in bf16.model.proto.graph.initializer)


@pytest.mark.parametrize("version, algo, expected", [
    ("8.6.0", "entropy", "calibrator"), ("8.6.0", "mse", "qdq"), ("11.4.0", "entropy", "qdq")])
def test_int8_auto_mode(version, algo, expected):
    trt = with_calibrators(make_fake_trt(version)) if version != "11.4.0" else make_fake_trt(version)
    assert resolve_int8_mode(capabilities(trt), "auto", algo) == expected


def test_int8_calibrator_mode_missing_in_11_and_for_mse():
    with pytest.raises(UnsupportedError, match="TensorRT 11.4.0 does not have; they exist in TensorRT 8.6 to 10.x. "
                                               "Use int8_mode 'qdq'"):
        resolve_int8_mode(capabilities(make_fake_trt("11.4.0")), "calibrator")
    with pytest.raises(UnsupportedError, match="no mse calibrator"):
        resolve_int8_mode(capabilities(with_calibrators(make_fake_trt("8.6.0"))), "calibrator", "mse")


def test_int8_without_data_or_cache_says_what_to_give():
    with pytest.raises(CalibrationError, match="INT8 needs calibration data: give an image folder"):
        _plan(make_fake_trt("11.4.0"), "int8")


def test_calib_batch_must_match_the_opt_batch_for_the_native_calibrator(tmp_path):
    trt = with_calibrators(make_fake_trt("8.6.0"))
    settings = CalibrationSettings(source=_data(), batch_size=2)
    with pytest.raises(CalibrationError, match="calibration.batch_size=2 differs from the opt batch 4 of input 'x'"):
        _plan(trt, "int8", calibration=settings)


def test_native_calibrator_feeds_device_buffers_and_writes_a_cache(tmp_path, fake_gpu):  # noqa: F811 - fixture
    _, rt = fake_gpu  # the calibrator's CUDA is the default one: the fake cudart
    trt = with_calibrators(make_fake_trt("8.6.0"))
    cache = tmp_path / "cnn.cache"
    plan = _plan(trt, "int8", calibration=CalibrationSettings(source=_data(8), cache_path=str(cache)))
    assert plan.flags == ("INT8", "FP16") and plan.calibrator is not None
    assert isinstance(plan.calibrator, trt.IInt8EntropyCalibrator2)
    assert plan.calibrator.get_batch_size() == 4
    assert plan.calibrator.read_calibration_cache() is None
    pointers = plan.calibrator.get_batch(["x"])
    rt.run_pending()
    expected = next(iter(_data(8)))["x"]
    got = np.frombuffer(rt._device[pointers[0]].tobytes(), np.float32).reshape(expected.shape)
    np.testing.assert_array_equal(got, expected)
    assert plan.calibrator.get_batch(["x"]) == pointers  # buffer reused
    assert plan.calibrator.get_batch(["x"]) is None  # data exhausted
    plan.calibrator.write_calibration_cache(b"TRT-8600-EntropyCalibration2\nx: 3c010204\n")
    plan.finish()
    assert rt.live_allocations() == {} or not any(rt.live_allocations().values())
    assert json.loads((tmp_path / "cnn.cache.trtkit.json").read_text())["samples"] == 8
    again = _plan(trt, "int8", calibration=CalibrationSettings(source=_data(8), cache_path=str(cache)))
    assert again.calibrator.read_calibration_cache().startswith(b"TRT-8600-EntropyCalibration2")
    assert "(calibration cache reused)" in again.notes[0]


def test_native_calibrator_errors_are_kept_and_raised_after_the_build():
    trt = with_calibrators(make_fake_trt("8.6.0"))
    plan = _plan(trt, "int8", calibration=CalibrationSettings(source=_data(8)))
    assert plan.calibrator.get_batch(["images"]) is None  # wrong input name: no exception into TensorRT
    with pytest.raises(CalibrationError, match="asked for calibration input 'images' but the calibration data has "
                                               "\\['x'\\]"):
        plan.finish()


def test_explicit_qdq_path_calibrates_in_the_fake_tensorrt_and_reuses_its_cache(tmp_path, fake_gpu):  # noqa: F811
    trt, _ = fake_gpu
    cache, saved = tmp_path / "cnn.cache", tmp_path / "cnn.qdq.onnx"
    settings = CalibrationSettings(source=_data(16), cache_path=str(cache), algorithm="minmax")
    plan = _plan(trt, "int8", int8_mode="qdq", calibration=settings, save_qdq_onnx=str(saved))
    assert plan.flags == ("INT8", "FP16")
    ops = [n.op_type for n in plan.model.proto.graph.node]
    assert ops.count("QuantizeLinear") == 9
    assert onnx.load(str(saved)).graph.node[0].op_type == "QuantizeLinear"
    assert plan.calibration["samples"] == 16 and plan.calibration["cache_reused"] is False
    import re

    assert re.search(r"16 samples \(minmax, [\d.]+ s in TensorRT: engine [\d.]+ s, forward passes [\d.]+ s, "
                     r"histograms [\d.]+ s \(GPU\)\)", plan.notes[0]), plan.notes[0]
    table = cache.read_text().splitlines()
    assert table[0] == "TRT-8600-MinMaxCalibration" and len(table) == 6  # header + five activations
    x_max = max(float(np.abs(f["x"]).max()) for f in _data(16))
    from calibrators.cache import parse_cache

    assert parse_cache(cache.read_bytes()).amaxes()["x"] == pytest.approx(x_max, rel=1e-6)
    again = _plan(trt, "int8", int8_mode="qdq", calibration=settings)
    assert again.calibration["cache_reused"] is True
    assert "from calibration cache" in again.notes[0]


def test_explicit_path_on_11_is_strongly_typed(tmp_path, fake_gpu):  # noqa: F811
    trt = make_fake_trt("11.4.0")
    cache = tmp_path / "c.cache"
    from calibrators.cache import Provenance, table_from_amaxes, write_cache

    write_cache(cache, table_from_amaxes({t: 2.0 for t in ("x", "stem_r", "a_r", "res_r", "down")}, (11, 4, 0),
                                         "entropy"),
                Provenance(onnx_sha256=load_model(residual_cnn()).sha256, tensorrt="11.4.0", algorithm="entropy"))
    plan = _plan(trt, "int8", calibration=CalibrationSettings(cache_path=str(cache), algorithm="entropy"))
    assert plan.strongly_typed and plan.flags == ()
    assert "strongly typed Q/DQ network" in plan.notes
    assert any(n.startswith("unquantized layers in FP16 (opset 19, FP16 scales") for n in plan.notes)
    assert plan.model.proto.opset_import[0].version == 19


def test_a_model_with_qdq_needs_no_calibration():
    from trtkit.quant.qdq import insert_qdq

    qdq, _ = insert_qdq(residual_cnn(), {t: 1.0 for t in ("x", "stem_r", "a_r", "res_r", "down")})
    trt = make_fake_trt("8.6.0")
    config = BuildConfig(precision="int8", profiles=[parse_shapes(PROFILE)])
    plan = plan_precision(trt, load_model(qdq, check=False), config, capabilities(trt))
    assert plan.flags == ("INT8", "FP16")
    assert "already holds Q/DQ nodes" in plan.notes[0]


def test_strongly_typed_requests_take_the_model_paths():
    trt10 = with_calibrators(make_fake_trt("10.8.0"))
    fp16 = _plan(trt10, "fp16", strongly_typed=True)
    assert fp16.strongly_typed and fp16.flags == ()
    with pytest.raises(UnsupportedError, match="refuse BuilderFlag.FP16; use FP16 mode 'cast'"):
        _plan(trt10, "fp16", strongly_typed=True, fp16_mode="flag")
    with pytest.raises(UnsupportedError, match="calibrators need BuilderFlag.INT8, which strongly typed networks"):
        _plan(trt10, "int8", strongly_typed=True, int8_mode="calibrator",
              calibration=CalibrationSettings(source=_data()))


def test_strongly_typed_qdq_model_on_10():
    from trtkit.quant.qdq import insert_qdq

    qdq, _ = insert_qdq(residual_cnn(), {t: 1.0 for t in ("x", "stem_r", "a_r", "res_r", "down")})
    trt = make_fake_trt("10.8.0")
    config = BuildConfig(precision="int8", profiles=[parse_shapes(PROFILE)], strongly_typed=True)
    plan = plan_precision(trt, load_model(qdq, check=False), config, capabilities(trt))
    assert plan.strongly_typed and plan.flags == ()


@pytest.mark.parametrize("options, fc_quantized, main_quantized, kept", [
    ({}, False, True, 2),
    ({"qdq_keep_heads": False}, True, True, 1),
    ({"qdq_exclude": ("conv_main",)}, False, False, 3)])
def test_qdq_heads_and_excluded_nodes_follow_the_build_settings(fake_gpu, options, fc_quantized, main_quantized,  # noqa: F811
                                                                kept):
    trt, _ = fake_gpu
    settings = CalibrationSettings(source=_data(4), algorithm="minmax")
    plan = _plan(trt, "int8", int8_mode="qdq", calibration=settings, **options)
    graph = plan.model.proto.graph
    producers = {out: n for n in graph.node for out in n.output}

    def quantized(name):
        node = next(n for n in graph.node if n.name == name)
        return producers[node.input[0]].op_type == "DequantizeLinear"

    assert quantized("fc") is fc_quantized
    assert quantized("conv_main") is main_quantized
    assert f"{kept} kept in higher precision" in plan.notes[0]


def test_cli_qdq_options_reach_the_config():
    import argparse

    from trtkit.cli.options import add_build_options, config_from_args

    parser = argparse.ArgumentParser()
    add_build_options(parser)
    config = config_from_args(parser.parse_args(["--int8", "--int8-mode", "qdq", "--qdq-quantize-heads",
                                                 "--qdq-exclude", "conv_main, fc"]))
    assert config.qdq_keep_heads is False and config.qdq_exclude == ("conv_main", "fc")
    assert config_from_args(parser.parse_args(["--int8"])).qdq_keep_heads is True


def test_qdq_options_on_a_calibrator_build_are_refused_before_calibrating(fake_gpu):  # noqa: F811
    trt, _ = fake_gpu
    settings = CalibrationSettings(source=_data(4), algorithm="entropy")
    with pytest.raises(UnsupportedError, match=r"placement settings \(the quantized heads\) need Q/DQ nodes.*"
                                               "use int8_mode 'qdq'"):
        _plan(trt, "int8", int8_mode="calibrator", calibration=settings, qdq_keep_heads=False)
