"""``trtkit compare`` on the fake backend: rows and JSON keys, resume from the engine cache, the rotating order of the
rounds, precisions that are not available, refusals before any build, Markdown and the plot."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from PIL import Image

from tests import models
from tests.bench.test_cli_bench import run_cli
from tests.eval.test_classification import channel_mean_classifier
from trtkit.bench.stats import summarize
from trtkit.cli.render import make_console
from trtkit.compare import CompareResult, CompareSettings, Row, compare, render, to_markdown
from trtkit.errors import UsageError

ROW_KEYS = {"precision", "profile", "batch", "mode", "available", "reason", "mean_ms", "std_ms", "median_ms", "p99_ms",
            "samples", "gpu_ms", "gpu_ms_per_image", "images_per_s", "speedup", "engine_mb", "device_memory_mb",
            "memory_mb", "accuracy", "engine"}
QUICK = ["--iterations", "3", "--warmup-ms", "0", "--rounds", "2", "--no-isolate"]


@pytest.fixture
def conv(tmp_path):
    path = tmp_path / "conv.onnx"
    path.write_bytes(models.tiny_conv().SerializeToString())
    return path


def compare_cli(model, capsys, *extra, cache=None):
    cache = cache or model.parent / "cache"
    return run_cli(["compare", str(model), *QUICK, "--cache-dir", str(cache), *extra], capsys)


def test_rows_json_and_markdown(fake_gpu, conv, tmp_path, capsys):
    code, out, err = compare_cli(conv, capsys, "--precisions", "fp32,fp16", "--batches", "1,4", "--json",
                                 str(tmp_path / "c.json"), "--markdown", str(tmp_path / "c.md"))
    assert code == 0, err
    data = json.loads((tmp_path / "c.json").read_text())
    assert data["model"] == str(conv) and data["baseline"] == "fp32" and data["reference"] is None
    assert data["environment"] == {"tensorrt": "8.6.0", "gpu": "Fake GPU", "compute_capability": "9.0"}
    assert data["command"].startswith("trtkit ") and data["date"].endswith("Z")  # a published table says how and when
    rows = data["rows"]
    assert [(r["precision"], r["batch"], r["mode"]) for r in rows] == [
        (p, b, m) for p in ("fp32", "fp16") for b in (1, 4) for m in ("graph", "plain")]
    for row in rows:
        assert set(row) == ROW_KEYS and row["available"] and row["profile"] == "dynamic"
        assert row["samples"] == 6 and row["accuracy"] is None  # 3 queries in each of 2 rounds
        assert set(row["memory_mb"]) == {"weights", "context", "activations", "graph"}
        assert row["device_memory_mb"] > 0 and row["engine_mb"] > 0
    assert all(r["speedup"] == 1.0 for r in rows if r["precision"] == "fp32")
    # speedup is rounded to 3 decimals: half a unit of the last digit, plus the images/s rounding
    assert rows[4]["speedup"] == pytest.approx(rows[4]["images_per_s"] / rows[0]["images_per_s"], abs=6e-4)
    assert "images/s" in out and "engines: 2 built, 0 from the cache" in out
    markdown = (tmp_path / "c.md").read_text().splitlines()
    assert markdown[0].startswith("conv.onnx on Fake GPU, TensorRT 8.6.0")
    assert markdown[2].startswith("| precision | engine | batch | mode | mean ± std ms |")
    assert markdown[4].startswith("| fp32 | dynamic | 1 | graph |") and len(markdown) == 4 + len(rows)


def test_a_rerun_builds_nothing_and_an_interrupted_run_resumes(fake_gpu, conv, tmp_path, capsys):
    settings = CompareSettings(precisions=("fp32", "fp16"), batches=(1, 2), iterations=2, warmup_ms=0.0, rounds=1,
                               cache_dir=str(tmp_path / "cache"), isolate=False)

    def interrupt_at_measuring(step):
        if step.stage == "measure":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        compare(conv, settings, on_progress=interrupt_at_measuring)
    engines = sorted((tmp_path / "cache").glob("conv-*.engine"))
    assert len(engines) == 2
    stamps = [p.stat().st_mtime_ns for p in engines]
    result = compare(conv, settings)
    assert [e["cached"] for e in result.engines] == [True, True]
    code, out, err = compare_cli(conv, capsys, "--precisions", "fp32,fp16", "--batches", "1,2")
    assert code == 0 and "engines: 0 built, 2 from the cache" in out, err
    assert sorted((tmp_path / "cache").glob("conv-*.engine")) == engines
    assert [p.stat().st_mtime_ns for p in engines] == stamps


def test_the_engine_that_goes_first_rotates_each_round(fake_gpu, conv, tmp_path):
    settings = CompareSettings(precisions=("fp32",), batches=(1, 2), static_per_batch=True, iterations=1,
                               warmup_ms=0.0, rounds=3, cache_dir=str(tmp_path / "cache"), isolate=False)
    steps = []
    result = compare(conv, settings, on_progress=steps.append)
    a, b, c = "fp32", "fp32 static b1", "fp32 static b2"
    assert result.rounds == [[a, b, c], [b, c, a], [c, a, b]]
    measured = [s.text for s in steps if s.stage == "measure" and s.text]
    assert measured[8:11] == ["round 2: fp32 static b1, batch 1, graph", "round 2: fp32 static b1, batch 1, plain",
                             "round 2: fp32 static b2, batch 2, graph"]
    assert [(r.profile, r.batch) for r in result.rows if r.mode == "graph"] == [
        ("dynamic", 1), ("dynamic", 2), ("static", 1), ("static", 2)]
    stages = [s.stage for s in steps]
    assert stages.index("measure") > max(i for i, s in enumerate(stages) if s == "build")


def test_precisions_not_available_are_rows_saying_why(fake_gpu, conv, tmp_path, capsys):
    code, out, err = compare_cli(conv, capsys, "--precisions", "fp32,bf16,int8", "--batches", "1", "--json",
                                 str(tmp_path / "c.json"))
    assert code == 0, err
    rows = {r["precision"]: r for r in json.loads((tmp_path / "c.json").read_text())["rows"] if not r["available"]}
    assert set(rows) == {"bf16", "int8"}
    assert "TensorRT 8.6.0 has neither" in rows["bf16"]["reason"] and rows["bf16"]["batch"] is None
    assert "INT8 needs calibration data or a calibration cache" in rows["int8"]["reason"]
    assert rows["int8"]["mean_ms"] is None and rows["int8"]["images_per_s"] is None
    assert "bf16: not available: BF16 needs" in out and "int8: not available" in out
    assert len(list((tmp_path / "cache").glob("*.engine"))) == 1


def test_precision_constraints_apply_to_the_engines_below_fp32(fake_gpu, conv, tmp_path, capsys):
    code, _, err = compare_cli(conv, capsys, "--precisions", "fp32,fp16", "--batches", "1", "--precision-constraints",
                               "prefer", "--json", str(tmp_path / "c.json"))
    assert code == 0, err
    engines = {e["label"]: e["engine"] for e in json.loads((tmp_path / "c.json").read_text())["engines"]}
    settings = {label: Path(path + ".manifest.json").read_text() for label, path in engines.items()}
    assert '"precision_constraints": "prefer"' in settings["fp16"]
    assert '"precision_constraints": "none"' in settings["fp32"]


def test_json_to_stdout_carries_the_json_alone(fake_gpu, conv, capsys):
    code, out, err = compare_cli(conv, capsys, "--precisions", "fp32", "--batches", "1", "--json", "-")
    assert code == 0, err
    assert [r["precision"] for r in json.loads(out)["rows"]] == ["fp32", "fp32"] and "measure" in err


@pytest.mark.parametrize("extra, message", [
    (["--eval", "detection", "--images", "val"], "Scoring detection needs --coco"),
    (["--eval", "classification"], "Scoring classification needs --images"),
    (["--coco", "val.json"], "--coco applies only with --eval"),
    (["--eval", "classification", "--images", "val", "--conf", "0.3"], "--conf applies only with --eval detection"),
    (["--eval", "keypoints", "--images", "val", "--coco", "v.json"], "--coco applies only with --eval detection"),
    (["--eval", "detection", "--images", "val", "--preprocess", "scale=1"], "--preprocess applies only with --eval "
                                                                            "classification"),
    (["--baseline", "int8", "--precisions", "fp32,fp16"], "--baseline must be one of 'fp32', 'fp16'"),
    (["--precisions", "fp32,fp64"], "--precisions must be a non-empty list of distinct names among fp32"),
    (["--batches", "0"], "--batches"),
    (["--rounds", "0"], "--rounds must be an integer >= 1"),
    (["--markdown", "conv.onnx"], "--markdown"),
])
def test_refusals_come_before_any_build(fake_gpu, conv, tmp_path, capsys, monkeypatch, extra, message):
    (tmp_path / "val").mkdir()
    monkeypatch.chdir(tmp_path)
    code, out, err = compare_cli(conv, capsys, *extra)
    assert code == 2 and message in err and err.count("\n") <= 2, err
    assert not (tmp_path / "cache").exists()


def test_eval_data_that_does_not_exist_and_an_engine_are_refused(fake_gpu, conv, tmp_path, capsys):
    code, _, err = compare_cli(conv, capsys, "--eval", "classification", "--images", str(tmp_path / "nope"))
    assert code == 1 and "nope' does not exist or is not a folder" in err
    engine = tmp_path / "conv.engine"
    engine.write_bytes(b"x")
    code, _, err = compare_cli(engine, capsys)
    assert code == 2 and "compare builds its engines from an ONNX model" in err
    assert not (tmp_path / "cache").exists()


def test_plot_without_matplotlib_gives_the_install_line(fake_gpu, conv, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code, _, err = compare_cli(conv, capsys, "--plot", str(tmp_path / "c.png"))
    assert code == 1 and "pip install 'trtkit[plot]'" in err
    assert not (tmp_path / "cache").exists() and not (tmp_path / "c.png").exists()


def test_plot_is_a_png(fake_gpu, conv, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    code, _, err = compare_cli(conv, capsys, "--precisions", "fp32,fp16", "--batches", "1,2", "--plot",
                               str(tmp_path / "c.png"))
    assert code == 0, err
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def labelled(tmp_path):
    for name, colour in {"a_red": (255, 0, 0), "b_green": (0, 255, 0), "c_blue": (0, 0, 255)}.items():
        (tmp_path / "images" / name).mkdir(parents=True)
        Image.new("RGB", (12, 10), colour).save(tmp_path / "images" / name / "0.png")
    onnx.save(channel_mean_classifier(), tmp_path / "cls.onnx")
    return tmp_path


def test_classification_scores_every_dynamic_engine_and_the_onnx_model(fake_gpu, labelled, capsys):
    out_json = labelled / "c.json"
    code, out, err = compare_cli(labelled / "cls.onnx", capsys, "--precisions", "fp32,fp16", "--batches", "1,2",
                                 "--static-per-batch", "--eval", "classification", "--images",
                                 str(labelled / "images"), "--json", str(out_json))
    assert code == 0, err
    data = json.loads(out_json.read_text())
    assert data["reference"]["accuracy"] == {"top1": 100.0, "top5": 100.0}
    assert data["reference"]["metric"] == "top1" and "cls.onnx" in data["reference"]["model"]
    for row in data["rows"]:
        if row["profile"] == "dynamic":
            assert row["accuracy"] == {"top1": 100.0, "top5": 100.0, "delta": 0.0, "below_reference": False}
        else:
            assert row["accuracy"] is None
    assert "top-1" in out and "Δ vs onnx" in out


def test_detection_scores_each_engine_beside_the_onnx_model(fake_gpu, dataset, capsys):
    code, out, err = compare_cli(dataset / "det.onnx", capsys, "--precisions", "fp32", "--batches", "1,2", "--eval",
                                 "detection", "--images", str(dataset / "val"), "--coco", str(dataset / "val.json"),
                                 "--conf", "0.5", "--markdown", str(dataset / "c.md"), "--json",
                                 str(dataset / "c.json"))
    assert code == 0, err
    data = json.loads((dataset / "c.json").read_text())
    assert data["reference"]["accuracy"]["map"] == pytest.approx(100.0)
    assert data["rows"][0]["accuracy"]["map"] == pytest.approx(100.0) and data["rows"][0]["accuracy"]["delta"] == 0
    markdown = (dataset / "c.md").read_text()
    assert "| onnx |" in markdown and "| mAP@[.5:.95] | Δ vs onnx |" in markdown and "↓" not in markdown


def test_a_score_far_below_the_reference_is_marked():
    summary = summarize([1.0, 2.0])
    low = Row("int8", "dynamic", 8, "graph", summary, summary, 100.0, 1.0, {"weights": 1, "context": 1, "graph": 0},
              {"map": 30.0, "delta": -7.5, "below_reference": True})
    reference = {"model": "m.onnx", "task": "detection", "metric": "map", "max_drop": 1.0, "accuracy": {"map": 37.5}}
    result = CompareResult("m.onnx", {"gpu": "G", "tensorrt": "10"}, "fp32", [low], reference, [["int8"]])
    markdown = to_markdown(result)
    assert "| 30.00 ↓ | -7.50 |" in markdown and "| onnx | m.onnx |" in markdown
    assert markdown.rstrip().endswith("↓: more than 1 points below the ONNX model's")
    console = make_console(file=io.StringIO(), width=200)
    render(result, console)
    assert "30.00 ↓" in console.file.getvalue()


def test_library_settings_are_checked(conv):
    with pytest.raises(UsageError, match="batches must be a non-empty list of distinct integers >= 1"):
        compare(conv, CompareSettings(batches=(2, 2)))
    with pytest.raises(UsageError, match="rounds must be an integer >= 1"):
        compare(conv, CompareSettings(rounds=0))


def test_keypoints_are_judged_by_their_deviation_from_the_onnx_models(fake_gpu, tmp_path, capsys):
    (tmp_path / "images").mkdir()
    for i, (y, x) in enumerate([(5, 9), (20, 14)]):
        picture = np.zeros((32, 32, 3), np.uint8)
        picture[y:y + 4, x:x + 4] = 255
        Image.fromarray(picture).save(tmp_path / "images" / f"{i}.png")
    onnx.save(models.pooled_heatmaps(), tmp_path / "pose.onnx")
    code, out, err = compare_cli(tmp_path / "pose.onnx", capsys, "--precisions", "fp32", "--batches", "1",
                                 "--eval", "keypoints", "--images", str(tmp_path / "images"), "--json",
                                 str(tmp_path / "k.json"))
    assert code == 0, err
    data = json.loads((tmp_path / "k.json").read_text())
    assert data["reference"]["metric"] == "max_px" and data["reference"]["accuracy"] is None
    accuracy = data["rows"][0]["accuracy"]
    assert accuracy["max_px"] == accuracy["confident"]["max_px"] == 0.0 and accuracy["units"] == "frame pixels"
    assert accuracy["below_reference"] is False


def test_an_ultralytics_dynamic_export_takes_its_imgsz_for_height_and_width(fake_gpu, tmp_path, capsys):
    model = models.tiny_conv()
    for dim, name in zip(model.graph.input[0].type.tensor_type.shape.dim[2:], ("height", "width")):
        dim.dim_param = name  # as `YOLO(...).export(format="onnx", dynamic=True)` declares its input
    onnx.helper.set_model_props(model, {"imgsz": "[8, 8]"})
    path = tmp_path / "yolo.onnx"
    onnx.save(model, path)
    code, _, err = compare_cli(path, capsys, "--precisions", "fp32", "--batches", "1,2", "--json",
                               str(tmp_path / "c.json"))
    assert code == 0, err
    assert [r["batch"] for r in json.loads((tmp_path / "c.json").read_text())["rows"]] == [1, 1, 2, 2]
