"""`trtkit build --add-nms` / ``BuildConfig(add_nms=...)``: the plugin is appended while preparing, TensorRT's plugins
are registered for it."""

from __future__ import annotations

import sys

import numpy as np
import onnx
import pytest

from tests import models
from tests.fakes.fake_trt import make_fake_trt
from trtkit.builder.builder import build_serialized, custom_ops
from trtkit.builder.config import BuildConfig
from trtkit.builder.prepare import prepare
from trtkit.builder.profiles import parse_shapes
from trtkit.cli.main import main, make_parser
from trtkit.detection import NmsOptions, add_nms
from trtkit.errors import EngineError
from trtkit.runtime.engine import deserialize

PROFILE = [parse_shapes("images:1x3x32x32,2x3x32x32,4x3x32x32")]


def detector():
    return models.constant_detector(np.zeros((1, 6, 10), np.float32))


def test_plugin_models_register_tensorrt_plugins_before_parsing():
    trt = make_fake_trt("8.6.0")
    result = build_serialized(add_nms(detector()), BuildConfig(profiles=PROFILE), trt=trt)
    assert trt.plugin_inits == [""] and result.engine
    assert custom_ops(add_nms(detector())) == ["EfficientNMS_TRT"]


def test_the_manifest_keeps_the_models_metadata_through_add_nms():
    model = detector()
    model.metadata_props.add(key="names", value="{0: 'a', 1: 'b'}")
    config = BuildConfig(profiles=PROFILE, add_nms=NmsOptions())
    result = build_serialized(model, config, trt=make_fake_trt("8.6.0"))
    assert result.manifest.to_json()["model"]["metadata"] == {"names": "{0: 'a', 1: 'b'}"}
    assert "metadata" not in build_serialized(detector(), BuildConfig(profiles=PROFILE),
                                              trt=make_fake_trt("8.6.0")).manifest.to_json()["model"]


def test_plain_models_leave_the_plugin_library_alone():
    trt = make_fake_trt("8.6.0")
    build_serialized(detector(), BuildConfig(profiles=PROFILE), trt=trt)
    assert trt.plugin_inits == [] and custom_ops(detector()) == []


def test_deserialize_retries_once_with_plugins_registered():
    trt = make_fake_trt("8.6.0")
    for _ in range(2):
        with pytest.raises(EngineError, match="could not be deserialized"):
            deserialize(b"not an engine", trt=trt)
    assert trt.plugin_inits == [""]


def _build_args(*argv):
    return make_parser("build").parse_args(["build", *argv])


def test_prepare_appends_the_plugin_last_and_names_its_settings():
    prepared = prepare(detector(), nms=NmsOptions(0.4, 0.5, 20))
    assert [o.name for o in prepared.proto.graph.output] == ["num_dets", "boxes", "scores", "classes"]
    last = prepared.rewrites[-1]
    assert last.rewrite == "add-nms" and last.status == "applied"
    assert last.what.startswith("EfficientNMS_TRT appended (score > 0.4, IoU 0.5, 20 per image)")
    assert [o.name for o in prepare(detector()).proto.graph.output] == ["output0"]


def test_build_add_nms_options_reach_the_engine_build(tmp_path, monkeypatch):
    seen = {}
    import trtkit.builder.api as api

    def fake_build(model, config, **kwargs):
        seen["nms"] = config.add_nms
        raise SystemExit(0)

    monkeypatch.setattr(api, "build", fake_build)
    path = tmp_path / "det.onnx"
    onnx.save(detector(), path)
    with pytest.raises(SystemExit):
        main(["build", str(path), "--add-nms", "--nms-score", "0.4", "--nms-iou", "0.5", "--nms-max-det", "20"])
    assert seen["nms"] == NmsOptions(0.4, 0.5, 20)


def test_build_add_nms_on_another_layout_is_one_error_line(tmp_path, capsys, fake_trt, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", fake_trt)
    path = tmp_path / "cls.onnx"
    onnx.save(models.tiny_conv(), path)
    code = main(["build", str(path), "--add-nms", "--no-check", "--no-isolate", "-o", str(tmp_path / "x.engine")])
    err = capsys.readouterr().err
    assert code == 1 and "found output 'y' (N, 4, 1, 1)" in err
    assert not (tmp_path / "x.engine").exists()


def test_build_add_nms_on_detr_outputs_says_they_need_none(tmp_path, capsys, fake_trt, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", fake_trt)
    path = tmp_path / "rfdetr.onnx"
    onnx.save(models.constant_outputs({"dets": np.zeros((1, 5, 4)), "labels": np.zeros((1, 5, 3))}), path)
    code = main(["build", str(path), "--add-nms", "--no-check", "--no-isolate", "-o", str(tmp_path / "x.engine")])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and not (tmp_path / "x.engine").exists()
    assert "--add-nms applies to YOLO heads; outputs 'dets' (N, 5, 4), 'labels' (N, 5, 3) are DETR-family" in err
    assert "which need no NMS: each query is one detection already" in err
