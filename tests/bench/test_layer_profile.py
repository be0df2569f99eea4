"""Per-layer GPU time (``trtkit.bench.layers``, ``trtkit bench --layers``) on the fake backend: TensorRT's profiler
reports joined with the inspector's layer information, reformats and FP32/TF32 layers flagged."""

from __future__ import annotations

import json

import pytest

from tests import models
from tests.bench.test_cli_bench import run_cli
from tests.fakes.fake_cuda import FakeCudart
from tests.fakes.fake_trt import make_fake_trt
from tests.fakes.fake_trt.runtime import FAKE_LAYER_MS
from tests.runtime.fakes import CONV_PROFILE, fake_engine_bytes, fake_gpu  # noqa: F401 - fixture
from trtkit._version_compat import InspectedLayer
from trtkit.bench.layers import LayerProfile, _join, profile_layers
from trtkit.errors import TrtkitError
from trtkit.runtime.cuda import Cuda


@pytest.mark.parametrize("version", ["8.6.0", "10.8.0", "11.4.0"])
def test_each_layer_is_timed_and_joined_with_its_precision(version):
    trt, cuda = make_fake_trt(version), Cuda(FakeCudart())
    model = models.tiny_conv()
    engine = fake_engine_bytes(model, [CONV_PROFILE], version=version, build_flags=("FP16",))
    profile = profile_layers(engine, {"x": (2, 3, 8, 8)}, runs=4, warmup=1, trt=trt, cuda=cuda)
    names = [n.name or n.op_type for n in model.graph.node]
    # the fake reports layer i at (i + 1) * FAKE_LAYER_MS per run: the mean over runs, slowest first
    assert [layer.name for layer in profile.layers] == names[::-1]
    assert [layer.ms for layer in profile.layers] == pytest.approx(
        [(i + 1) * FAKE_LAYER_MS for i in range(len(names))][::-1])
    assert profile.total_ms == pytest.approx(sum(layer.ms for layer in profile.layers))
    assert sum(layer.share for layer in profile.layers) == pytest.approx(1.0, abs=1e-5)
    assert {layer.precision for layer in profile.layers} == {"FP16"}
    assert all(layer.tactic == "fake_tactic" and layer.layer_type for layer in profile.layers)
    assert not any(layer.high_precision or layer.reformat for layer in profile.layers)
    assert profile.runs == 4 and profile.shapes == {"x": (2, 3, 8, 8)}


def test_fp32_layers_are_flagged_and_summed():
    trt, cuda = make_fake_trt("8.6.0"), Cuda(FakeCudart())
    profile = profile_layers(fake_engine_bytes(models.tiny_conv(), [CONV_PROFILE]), runs=2, trt=trt, cuda=cuda)
    assert all(layer.high_precision for layer in profile.layers)
    summary = profile.summary()
    assert summary["fp32_tf32_layers"] == len(profile.layers)
    assert summary["fp32_tf32_ms"] == pytest.approx(profile.total_ms)
    assert summary["ms_by_precision"] == {"FP32": pytest.approx(profile.total_ms)}


def test_reformat_layers_and_layers_the_inspector_lacks():
    inspected = {"conv": InspectedLayer(name="conv", layer_type="Convolution", precision="INT8", tactic="k"),
                 "Reformatting CopyNode for Input Tensor 0 to conv": InspectedLayer(
                     name="Reformatting CopyNode for Input Tensor 0 to conv", layer_type="Reformat",
                     precision="FP32")}
    times = {"conv": 3.0, "Reformatting CopyNode for Input Tensor 0 to conv": 1.0, "PWN(sigmoid, mul)": 2.0}
    profile = _join(times, inspected, runs=2, shapes={"x": (1, 3)})
    rows = {layer.name: layer for layer in profile.layers}
    assert [layer.name for layer in profile.layers][0] == "conv" and rows["conv"].ms == 1.5
    reformat = rows["Reformatting CopyNode for Input Tensor 0 to conv"]
    assert reformat.reformat and reformat.high_precision
    unknown = rows["PWN(sigmoid, mul)"]
    assert unknown.precision is None and unknown.layer_type is None and not unknown.reformat
    summary = profile.summary()
    assert summary["reformat_layers"] == 1 and summary["reformat_ms"] == 0.5
    assert summary["fp32_tf32_layers"] == 0  # the reformat is counted as a reformat only
    assert LayerProfile.from_json(json.loads(json.dumps(profile.to_json()))).to_json() == profile.to_json()
    assert len(profile.to_json(top=1)["layers"]) == 1


def test_runs_must_be_positive():
    with pytest.raises(TrtkitError, match="runs"):
        profile_layers(b"", runs=0)


def test_cli_prints_the_slowest_layers_and_writes_json(tmp_path, capsys, fake_gpu):  # noqa: F811 - fixture
    engine = tmp_path / "conv.engine"
    engine.write_bytes(fake_engine_bytes(models.tiny_conv(), [CONV_PROFILE]))
    out = tmp_path / "layers.json"
    code, text, err = run_cli(["bench", str(engine), "--layers", "--top", "1", "--runs", "3", "--json", str(out)],
                              capsys)
    assert code == 0, err
    assert "trtkit bench --layers conv.engine" in text and "FP32 high" in text
    assert "FP32/TF32: 3 layer(s)" in text and "mean of 3 runs without a CUDA graph" in text
    data = json.loads(out.read_text())
    assert data["runs"] == 3 and len(data["layers"]) == 3 and data["summary"]["fp32_tf32_layers"] == 3
    assert data["layers"][0]["ms"] >= data["layers"][1]["ms"]


def test_cli_top_must_be_positive(tmp_path, capsys, fake_gpu):  # noqa: F811 - fixture
    engine = tmp_path / "conv.engine"
    engine.write_bytes(fake_engine_bytes(models.tiny_conv(), [CONV_PROFILE]))
    code, _, err = run_cli(["bench", str(engine), "--layers", "--top", "0"], capsys)
    assert code != 0 and "top" in err


def test_cli_layer_options_without_layers_are_refused(tmp_path, capsys, fake_gpu):  # noqa: F811 - fixture
    engine = tmp_path / "conv.engine"
    engine.write_bytes(fake_engine_bytes(models.tiny_conv(), [CONV_PROFILE]))
    code, _, err = run_cli(["bench", str(engine), "--runs", "3"], capsys)
    assert code != 0 and "--runs apply with --layers" in err


def test_cli_layers_with_streams_is_refused(tmp_path, capsys, fake_gpu):  # noqa: F811 - fixture
    engine = tmp_path / "conv.engine"
    engine.write_bytes(fake_engine_bytes(models.tiny_conv(), [CONV_PROFILE]))
    code, _, err = run_cli(["bench", str(engine), "--layers", "--streams", "2"], capsys)
    assert code == 2 and "--layers profiles one execution context" in err and "leave out --streams" in err
