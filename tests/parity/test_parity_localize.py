"""--localize: intermediate tensors marked as outputs, a debug engine, the first diverging tensor named."""

from __future__ import annotations

import io
import json

import pytest

from tests import models
from tests.fakes.fake_cuda import FakeCudart
from tests.fakes.fake_trt import make_fake_trt
from trtkit.builder.api import build
from trtkit.builder.config import BuildConfig
from trtkit.builder.profiles import parse_shapes
from trtkit.cli import parity as parity_cli
from trtkit.cli.main import make_parser
from trtkit.cli.render import make_console
from trtkit.errors import EngineError, ModelError
from trtkit.parity import OnnxReference
from trtkit.parity.localize import config_from_manifest, localize_divergence, mark_outputs, markable_tensors
from trtkit.runtime.cuda import Cuda
from trtkit.sample_model import make_sample_cnn

SHAPES = {"images": (2, 3, 64, 64)}


def test_markable_tensors_are_float_node_outputs_in_graph_order():
    found = markable_tensors(make_sample_cnn())
    assert found[:3] == [("stem.conv", "Conv", "stem/Conv"),
                         ("stem.bn", "BatchNormalization", "stem/BatchNormalization"),
                         ("stem.out", "Relu", "stem/Relu")]
    assert found[-1][0] == "logits"
    assert markable_tensors(models.tiny_conv(), ["r"]) == [("r", "Relu", "relu")]
    with pytest.raises(ModelError, match=r"Tensor\(s\) \['w'\] are not float outputs of the model's nodes; "
                                         r"pick from: c, r, y"):
        markable_tensors(models.tiny_conv(), ["w"])


def test_mark_outputs_adds_typed_outputs_and_leaves_the_model_alone():
    model = models.tiny_conv()
    marked = mark_outputs(model, ["c", "r", "y"])
    assert [o.name for o in marked.graph.output] == ["y", "c", "r"]
    assert [o.name for o in model.graph.output] == ["y"]
    dims = [d.dim_param or d.dim_value for d in marked.graph.output[1].type.tensor_type.shape.dim]
    assert dims == ["N", 4, 8, 8]


def _perturbing_builder(first_bad: str, factor: float = 1.1):
    """A 'debug engine' that runs the marked model and scales every tensor from ``first_bad`` on."""

    def build_engine(marked):
        ref = OnnxReference(marked)
        names = [o.name for o in marked.graph.output]
        order = [t for t, _, _ in markable_tensors(marked)]
        bad = set(order[order.index(first_bad):])

        def engine(feed):
            return {k: v * factor if k in bad else v for k, v in ref(feed).items() if k in names}

        return engine

    return build_engine


def test_first_diverging_tensor_is_named_with_its_node():
    located = localize_divergence(make_sample_cnn(), _perturbing_builder("layer1.bn"), precision="fp16", shapes=SHAPES)
    assert located.first_failure.tensor == "layer1.bn"
    assert located.verdict().startswith("first divergence at tensor 'layer1.bn', output of BatchNormalization node "
                                        "'layer1/BatchNormalization' (5 of 19 in graph order): output 'layer1.bn': "
                                        "max abs error")
    assert [t.result.passed for t in located.tensors[:4]] == [True] * 4
    data = json.loads(json.dumps(located.to_dict()))
    assert data["first_failure"] == "layer1.bn" and len(data["tensors"]) == 19


def test_no_divergence_verdict():
    located = localize_divergence(models.tiny_conv(), _perturbing_builder("y", factor=1.0), precision="fp32",
                                  shapes={"x": (1, 3, 8, 8)})
    assert located.first_failure is None
    assert located.verdict() == "no divergence: all 3 tensors of the debug engine are within tolerance"


def _fake_engine(tmp_path, trt, model, name="tiny.engine"):
    config = BuildConfig(precision="fp16", profiles=[parse_shapes("x:1x3x8x8,2x3x8x8,4x3x8x8")],
                         tactic_sources=("EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS"), timing_cache=None)
    path = tmp_path / name
    return path, build(model, config, output=path, trt=trt), config


def test_config_from_manifest_round_trips_the_build_settings(tmp_path):
    _, result, config = _fake_engine(tmp_path, make_fake_trt("8.6.0"), models.tiny_conv())
    again = config_from_manifest(result.manifest)
    assert again == config
    with pytest.raises(ModelError, match="manifest has no 'build' section"):
        config_from_manifest({})


def test_cli_localize_with_fake_tensorrt(tmp_path):
    trt = make_fake_trt("8.6.0")
    path, _, _ = _fake_engine(tmp_path, trt, models.tiny_conv(seed=1), "wrong.engine")
    onnx_path = tmp_path / "tiny.onnx"
    onnx_path.write_bytes(models.tiny_conv().SerializeToString())
    out = tmp_path / "report.json"
    args = make_parser("parity").parse_args(["parity", str(onnx_path), str(path), "--localize", "--json", str(out)])
    console = make_console(file=io.StringIO(), width=200)
    code = parity_cli.run(args, console, runner_options={"trt": trt, "cuda": Cuda(FakeCudart())},
                          build_options={"trt": trt})
    text = console.file.getvalue()
    assert code == 1
    assert "no divergence: all 3 tensors of the debug engine are within tolerance" in text
    assert "built from another model or with other settings" in text
    data = json.loads(out.read_text())
    assert data["passed"] is False and data["localize"]["first_failure"] is None


def test_cli_localize_needs_a_manifest(tmp_path):
    trt = make_fake_trt("8.6.0")
    path, _, _ = _fake_engine(tmp_path, trt, models.tiny_conv())
    path.with_name(path.name + ".manifest.json").unlink()
    onnx_path = tmp_path / "tiny.onnx"
    onnx_path.write_bytes(models.tiny_conv().SerializeToString())
    args = make_parser("parity").parse_args(["parity", str(onnx_path), str(path), "--localize", "--precision", "fp16"])
    with pytest.raises(EngineError, match="--localize rebuilds the engine with the settings in its manifest"):
        parity_cli.run(args, make_console(file=io.StringIO()), runner_options={"trt": trt, "cuda": Cuda(FakeCudart())})
