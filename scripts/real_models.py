"""The real-model scoreboard: models exported from the libraries users export from, through the raw TensorRT API
and through trtkit (FP32 and FP16), each judged against onnxruntime as ``trtkit parity`` judges.

Each case of :data:`CASES` (a library's constructor, random weights, an exporter, an opset, a dynamic batch axis or
not) is exported by the PyTorch interpreter ``--torch-python`` (a small export script per case, run as a
subprocess: torch is never imported here), then run in child processes of this script, one stage after another:

- ``ort``: onnxruntime (onnx's reference evaluator where onnxruntime is not installed) runs the export on a seeded
  random input, which the other stages are fed;
- ``prepare`` (CPU only, not in the default ``--stages``): ``trtkit.prepare`` as a default build runs it (compatibility
  rewrites, constant folding, for TensorRT 8.6's documented parser), the prepared model run in onnxruntime and
  judged against the export's outputs with parity's FP32 tolerance; then trtkit's FP16 cast of it (the model
  ``--fp16-mode cast`` builds, strongly typed) with parity's FP16 tolerance. A prepare that raises fails naming why;
  the rewrites that did not apply and the nodes a build would refuse (hazards) are recorded beside the verdicts;
- ``raw``: :func:`onnx_backend_suite.run_raw`, a minimal raw-API parse, FP32 build (TF32 off) at builder
  optimization level ``--opt-level`` and run, as a user without trtkit would;
- ``trtkit``: ``trtkit.build`` FP32 then FP16 at the same optimization level, each engine through
  ``trtkit.parity.compare_engine_to_onnx``.

At most ``--jobs`` (two at most: GPU time-slicing makes more builds at once slower in all) cases run at once, each
within ``--case-timeout-s``; a child that dies is recorded as ``crash`` and the run goes on. The results file is
written atomically after each case, and a case already in it is skipped (``--redo NAME`` runs it again), so the
scoreboard grows over several calls. No case starts once the time left under ``--budget-s`` is less than the
median seconds of the cases run so far.

``--stages`` picks the stages (``ort`` always runs: the others need its feed); a case already in the results is run
again when it lacks a stage asked for, its other stages kept.

On the GPU host:  bash .gpu/bin/gpu-run python3 scripts/real_models.py --budget-s 480
On a CPU (smoke): python scripts/real_models.py --fake --limit 3 --out /tmp/real.json
On a CPU (prepare): python scripts/real_models.py --stages ort,prepare --jobs 1 --out /tmp/real-prepare.json \
                      --torch-python TORCH_VENV/bin/python --export-pythonpath EXTRA_PACKAGES
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "benchmarks"))
import onnx_backend_suite as suite  # noqa: E402 - scripts/ is on sys.path from here on
from timing import run_stamp  # noqa: E402

TORCH_PYTHON = "/opt/torch/.venv/bin/python3"
LIBRARIES = {"timm": "timm", "torchvision": "torchvision", "transformers": "transformers",
             "ultralytics": "ultralytics", "rfdetr": "rfdetr", "lightning-pose": "lightning_pose"}
STAGES = ("ort", "prepare", "raw", "trtkit")
DEFAULT_STAGES = "ort,raw,trtkit"
SKIP_CODE = 3  # the export script's exit code when the case's library is not installed
FAKE_CRASH = "REAL_MODELS_FAKE_CRASH"  # with --fake, "<case>:<stage>": that child calls os._exit


def case(name, library, ctor, shape=(1, 3, 224, 224), exporter="torchscript", opset=17, dynamic=True,
         call="tensor") -> dict:
    """One scoreboard case. ``ctor``: a Python expression, evaluated after ``import <library>``, that makes the model;
    ``call``: ``tensor`` (``model(x)``) or ``images`` (``model(list(x))``, torchvision's detection API)."""
    assert exporter in ("torchscript", "dynamo") and 11 <= opset <= 20 and library in LIBRARIES
    return {"name": name, "library": library, "ctor": ctor, "shape": list(shape), "exporter": exporter,
            "opset": opset, "dynamic": dynamic, "call": call}


def _tv(name, **kw):
    return case(f"tv_{name}", "torchvision", f"torchvision.models.{name}(weights=None)", **kw)


def _tvdet(name, shape=(1, 3, 320, 320), **kw):
    ctor = f"torchvision.models.detection.{name}(weights=None, weights_backbone=None)"
    return case(f"tv_{name}", "torchvision", ctor, shape, dynamic=False, call="images", **kw)


def _tvseg(name, **kw):
    ctor = f"torchvision.models.segmentation.{name}(weights=None, weights_backbone=None)"
    return case(f"tv_{name}", "torchvision", ctor, (1, 3, 320, 320), **kw)


def _timm(name, shape=(1, 3, 224, 224), **kw):
    tag = {"dynamo": "_dynamo"}.get(kw.get("exporter", ""), "") + (f"_op{kw['opset']}" if "opset" in kw else "")
    return case(f"timm_{name}{tag}", "timm", f"timm.create_model({name!r}, pretrained=False)", shape, **kw)


def _hf(name, model, config, shape=(1, 3, 224, 224), **kw):
    return case(f"hf_{name}", "transformers", f"transformers.{model}(transformers.{config})", shape, **kw)


def _yolo(cfg, **kw):
    kind = "RTDETR" if cfg.startswith("rtdetr") else "YOLO"  # YOLO() refuses an RT-DETR yaml
    return case(f"yolo_{cfg.split('.')[0]}", "ultralytics", f"ultralytics.{kind}({cfg!r}).model", (1, 3, 640, 640),
                **kw)


DETR_CONFIG = ("backbone=None, use_timm_backbone=False, use_pretrained_backbone=False, "
               "backbone_config=transformers.ResNetConfig()")
CASES = [
    *(_timm(n) for n in ("convnext_tiny", "efficientnet_b0", "vit_tiny_patch16_224", "swin_tiny_patch4_window7_224",
                         "mobilenetv3_large_100", "mobilenetv4_conv_small", "regnety_016", "resnet50",
                         "deit_small_patch16_224", "efficientvit_b0", "levit_128", "mobilevit_s", "repvgg_a0",
                         "ghostnet_100", "convnextv2_atto", "cspdarknet53", "eva02_tiny_patch14_224")),
    _timm("convnext_tiny", exporter="dynamo", opset=18),
    _timm("vit_tiny_patch16_224", exporter="dynamo", opset=18),
    _timm("mobilenetv3_large_100", exporter="dynamo", opset=20),
    _timm("efficientnet_b0", opset=11),
    _timm("mobilenetv3_large_100", opset=13, dynamic=False),
    _timm("swin_tiny_patch4_window7_224", opset=14, dynamic=False),
    *(_tv(n) for n in ("resnet18", "mobilenet_v3_large", "regnet_y_400mf", "vit_b_16", "swin_t", "convnext_tiny",
                       "shufflenet_v2_x1_0", "squeezenet1_0", "densenet121", "efficientnet_v2_s", "maxvit_t")),
    _tv("resnet50", opset=11, dynamic=False),
    _tv("efficientnet_b0", exporter="dynamo", opset=18),
    *(_tvdet(n) for n in ("fasterrcnn_mobilenet_v3_large_fpn", "retinanet_resnet50_fpn", "fcos_resnet50_fpn",
                          "maskrcnn_resnet50_fpn", "keypointrcnn_resnet50_fpn")),
    _tvdet("ssdlite320_mobilenet_v3_large", opset=16),
    *(_tvseg(n) for n in ("deeplabv3_mobilenet_v3_large", "fcn_resnet50", "lraspp_mobilenet_v3_large")),
    _hf("detr", "DetrForObjectDetection", f"DetrConfig({DETR_CONFIG})", (1, 3, 512, 512), dynamic=False),
    _hf("conditional_detr", "ConditionalDetrForObjectDetection", f"ConditionalDetrConfig({DETR_CONFIG})",
        (1, 3, 512, 512), dynamic=False),
    _hf("deformable_detr", "DeformableDetrForObjectDetection", f"DeformableDetrConfig({DETR_CONFIG})",
        (1, 3, 512, 512), dynamic=False),
    _hf("rt_detr", "RTDetrForObjectDetection", "RTDetrConfig(use_pretrained_backbone=False)", (1, 3, 640, 640),
        dynamic=False),
    _hf("yolos", "YolosForObjectDetection", "YolosConfig(num_hidden_layers=4)", (1, 3, 512, 512), dynamic=False),
    _hf("segformer", "SegformerForSemanticSegmentation", "SegformerConfig()", (1, 3, 512, 512)),
    _hf("vit", "ViTForImageClassification", "ViTConfig()"),
    _hf("clip_vision", "CLIPVisionModel", "CLIPVisionConfig()"),
    _hf("dinov2", "Dinov2Model", "Dinov2Config(num_hidden_layers=6)"),
    _hf("convnext", "ConvNextForImageClassification", "ConvNextConfig()"),
    _hf("vit_dynamo", "ViTForImageClassification", "ViTConfig()", exporter="dynamo", opset=18),
    *(_yolo(c) for c in ("yolov8n.yaml", "yolo11n.yaml", "yolov5nu.yaml", "yolov8n-seg.yaml", "yolov8n-pose.yaml",
                         "yolov10n.yaml", "rtdetr-l.yaml")),
    *(case(f"rfdetr_{n.lower()}", "rfdetr", f"_export_mode(rfdetr.RFDETR{n}(pretrain_weights=None).model.model)",
           (1, 3, size, size), dynamic=False) for n, size in (("Nano", 384), ("Base", 560))),
    case("lightning_pose_heatmap", "lightning-pose",
         "importlib.import_module('lightning_pose.models.heatmap_tracker').HeatmapTracker("
         "num_keypoints=17, backbone='resnet50', pretrained=False)", (1, 3, 256, 256)),
]

EXPORT_SCRIPT = '''\
import importlib, sys
try:
    import {module}
except ImportError as exc:
    print("{library} is not installed ({{}})".format(exc))
    sys.exit({skip})
import torch

torch.manual_seed(0)
torch.backends.mha.set_fastpath_enabled(False)  # nn.MultiheadAttention's fused eval path has no ONNX export


def _export_mode(model):  # rfdetr's own export: position embeddings precomputed (no antialiased interpolation)
    model.export()
    return model

model = ({ctor}).eval()


def tensors(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if hasattr(value, "to_tuple"):
        value = value.to_tuple()
    if isinstance(value, dict):
        value = list(value.values())
    return [t for v in value for t in tensors(v)] if isinstance(value, (list, tuple)) else []


class Flat(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return tuple(tensors(self.model(list(x) if {images} else x)))


x = torch.randn(*{shape})
axes = {{"input": {{0: "batch"}}}} if {dynamic} else None
with torch.no_grad():
    torch.onnx.export(Flat(model), (x,), {path!r}, opset_version={opset}, input_names=["input"], dynamic_axes=axes,
                      dynamo={dynamo})
print("exported")
'''


# --- a child: one stage of one case ----------------------------------------------------------------------------------


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:400]


def run_environment(stages, fake: bool) -> dict:
    """The GPU and TensorRT of a run with the raw and trtkit stages; a CPU run (ort, prepare) says it had none."""
    import onnx

    env = {"onnx": onnx.__version__}
    if reference_backend() == "onnxruntime":
        import onnxruntime

        env["onnxruntime"] = onnxruntime.__version__
    if {"raw", "trtkit"} & set(stages) and not fake:
        from trtkit.bench.report import environment

        return {**env, **environment()}
    return {**env, "gpu": "none (a CPU run: onnxruntime and trtkit's prepare)",
            "tensorrt": "none (prepared for TensorRT 8.6's parser)"}


def reference_backend() -> str:
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return "onnx-reference"
    return "onnxruntime"


def run_stage(stage: str, folder: Path, item: dict, fake: bool, opt_level: int) -> dict:
    """One stage's result (``status`` ``pass``/``fail`` and ``error``; the trtkit stage one per precision)."""
    if fake and os.environ.get(FAKE_CRASH) == f"{item['name']}:{stage}":
        os._exit(11)
    model = folder / "model.onnx"
    if stage == "ort":
        import numpy as np

        from trtkit.parity.reference import OnnxReference, load_model

        feed = {"input": np.random.default_rng(0).standard_normal(item["shape"]).astype(np.float32)}
        np.savez(folder / "feed.npz", **feed)
        try:
            OnnxReference(load_model(str(model)), backend=reference_backend())(feed)
        except Exception as exc:  # noqa: BLE001 - every failure is the case's result
            return {"status": "fail", "error": _first_line(exc)}
        return {"status": "pass", "error": None}
    if stage == "prepare":
        return run_prepare(folder, model)
    from trtkit.parity import compare_engine_to_onnx

    trt, cudart, cuda = suite._backend(fake)
    import numpy as np

    feed = dict(np.load(folder / "feed.npz"))
    runner = {"trt": trt, "cuda": cuda} if fake else None

    def verdict(engine, precision, runner_options=None) -> dict:
        report = compare_engine_to_onnx(str(model), engine, inputs=feed, precision=precision,
                                        reference=reference_backend(), runner_options=runner_options)
        return {"status": "pass" if report.passed else "fail",
                "error": None if report.passed else report.verdict().strip().splitlines()[0][:400]}

    if stage == "raw":
        try:
            return verdict(lambda f: suite.run_raw(model, f, trt, cudart, opt_level=opt_level), "fp32")
        except Exception as exc:  # noqa: BLE001
            return {"status": "fail", "error": _first_line(exc)}
    import trtkit
    from trtkit.builder import BuildConfig
    from trtkit.builder.api import save
    from trtkit.builder.profiles import Profile

    shape = item["shape"]
    profiles = [Profile.from_json({"input": {"min": [1, *shape[1:]], "opt": shape, "max": shape}})] \
        if item["dynamic"] else []
    out = {}
    for precision in ("fp32", "fp16"):
        try:
            config = BuildConfig(precision=precision, optimization_level=opt_level, tf32=False,
                                 tactic_sources=suite.TACTIC_SOURCES, profiling_verbosity="NONE", profiles=profiles)
            engine = folder / f"{precision}.engine"
            save(trtkit.build(str(model), config), engine)
            out[precision] = verdict(str(engine), precision, runner)
        except Exception as exc:  # noqa: BLE001
            out[precision] = {"status": "fail", "error": _first_line(exc)}
    return out


def run_prepare(folder: Path, model: Path) -> dict:
    """The ``prepare`` stage: trtkit's prepare (then its FP16 cast) against the export, both in onnxruntime."""
    import numpy as np

    import trtkit
    from trtkit.builder.sanitize import save_model
    from trtkit.parity.compare import compare_outputs
    from trtkit.parity.reference import OnnxReference, load_model
    from trtkit.parity.tolerance import tolerance_for
    from trtkit.quant.fp16 import convert_float

    feed = dict(np.load(folder / "feed.npz"))
    reference = OnnxReference(load_model(str(model)), backend=reference_backend())(feed)

    def verdict(path: Path, precision: str) -> dict:
        try:
            got = OnnxReference(load_model(str(path)), backend=reference_backend())(feed)
        except Exception as exc:  # noqa: BLE001
            return {"status": "fail", "error": _first_line(exc)}
        got = {k: v.astype(reference[k].dtype) if k in reference else v for k, v in got.items()}
        failed = [r for r in compare_outputs(got, reference, tolerance_for(precision)) if not r.passed]
        return {"status": "fail" if failed else "pass", "error": failed[0].summary[:400] if failed else None}

    started = time.monotonic()
    try:
        prepared = trtkit.prepare(str(model))
        prepared.save(folder / "prepared.onnx")
    except Exception as exc:  # noqa: BLE001
        failed = {"status": "fail", "error": _first_line(exc)}
        return {**failed, "fp16": failed}
    out = verdict(folder / "prepared.onnx", "fp32")
    out.update(summary=prepared.summary()[:400], seconds=round(time.monotonic() - started, 2),
               not_applied=[str(r)[:300] for r in prepared.rewrites if r.status != "applied"][:8],
               hazards=[str(h)[:300] for h in prepared.hazards][:8])
    try:
        save_model(convert_float(prepared.proto, dtype="fp16", keep_io_types=True).model, folder / "fp16.onnx")
        out["fp16"] = verdict(folder / "fp16.onnx", "fp16")
    except Exception as exc:  # noqa: BLE001
        out["fp16"] = {"status": "fail", "error": _first_line(exc)}
    return out


def child_main(stage: str, folder: str, fake: bool, opt_level: int) -> int:
    folder_path = Path(folder)
    item = json.loads((folder_path / "case.json").read_text())
    result = run_stage(stage, folder_path, item, fake, opt_level)
    (folder_path / f"{stage}.json").write_text(json.dumps(result))
    return 0


# --- the parent: export, the children, the results file --------------------------------------------------------------


def fake_export(item: dict, path: Path) -> None:
    """A tiny onnx.helper model (Relu) with the case's input shape, standing in for the export."""
    import onnx
    from onnx import TensorProto, helper

    dims = ["batch", *item["shape"][1:]] if item["dynamic"] else item["shape"]
    graph = helper.make_graph([helper.make_node("Relu", ["input"], ["output"])], item["name"],
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, dims)],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, dims)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", item["opset"])]), str(path))


def export_script(item: dict, path: Path) -> str:
    """The Python the torch interpreter runs to export ``item`` to ``path``."""
    return EXPORT_SCRIPT.format(module=LIBRARIES[item["library"]], library=item["library"], skip=SKIP_CODE,
                                ctor=item["ctor"], images=item["call"] == "images", shape=tuple(item["shape"]),
                                dynamic=item["dynamic"], path=str(path), opset=item["opset"],
                                dynamo=item["exporter"] == "dynamo")


def export(item: dict, folder: Path, args, timeout_s: float) -> dict:
    """``{status: pass|fail|skip|timeout, error, seconds}`` of writing ``folder/model.onnx``."""
    started = time.monotonic()
    model = folder / "model.onnx"
    status, error = "pass", None
    if args.fake:
        fake_export(item, model)
    else:
        (folder / "export.py").write_text(export_script(item, model))
        try:
            env = {**os.environ, "PYTHONPATH": args.export_pythonpath} if args.export_pythonpath else None
            done = subprocess.run([args.torch_python, str(folder / "export.py")], capture_output=True, text=True,
                                  timeout=timeout_s, cwd=folder, env=env)
            if done.returncode == SKIP_CODE:
                status, error = "skip", done.stdout.strip().splitlines()[-1]
            elif done.returncode != 0 or not model.exists():
                lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
                status, error = "fail", (lines[-1] if lines else f"exit code {done.returncode}")[:400]
        except subprocess.TimeoutExpired:
            status, error = "timeout", f"export stopped after {timeout_s:.0f} s"
    return {"status": status, "error": error, "seconds": round(time.monotonic() - started, 2)}


def run_child(stage: str, folder: Path, args, timeout_s: float) -> dict:
    """The stage's result from its own process; ``crash`` when that process died, ``timeout`` when it ran late."""
    result = folder / f"{stage}.json"
    result.unlink(missing_ok=True)
    command = [sys.executable, str(Path(__file__).resolve()), "--child", stage, str(folder),
               "--opt-level", str(args.opt_level)] + (["--fake"] if args.fake else [])
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=max(1.0, timeout_s))
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "error": f"stopped after {timeout_s:.0f} s"}
    if result.exists():
        return json.loads(result.read_text())
    tail = [line for line in done.stderr.strip().splitlines() if line.strip()][-1:]
    return {"status": "crash", "error": f"child exit code {done.returncode}" + (f": {tail[0][:300]}" if tail else "")}


def run_case(item: dict, work: Path, args, stages: list) -> dict:
    started = time.monotonic()
    deadline = started + args.case_timeout_s
    folder = work / item["name"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "case.json").write_text(json.dumps(item))
    record = {k: item[k] for k in ("library", "ctor", "shape", "exporter", "opset", "dynamic")}
    record["export"] = export(item, folder, args, deadline - time.monotonic())
    record.update(ort_runs=False, ort_error=None, crash=False)
    skipped = {"status": "skip", "error": record["export"]["error"]}
    results = {s: {"fp32": skipped, "fp16": skipped} if s == "trtkit" else skipped for s in stages}
    if record["export"]["status"] == "pass":
        ort = run_child("ort", folder, args, deadline - time.monotonic())
        record.update(ort_runs=ort["status"] == "pass", ort_error=ort["error"], crash=ort["status"] == "crash")
        if record["ort_runs"]:
            for stage in stages:
                results[stage] = run_child(stage, folder, args, deadline - time.monotonic())
                record["crash"] |= results[stage].get("status") == "crash"
        else:
            skipped = {"status": "skip", "error": "onnxruntime does not run the export"}
            results = {s: {"fp32": skipped, "fp16": skipped} if s == "trtkit" else skipped for s in stages}
    if "trtkit" in results:
        trtkit_result = results.pop("trtkit")
        if "status" in trtkit_result:  # the whole child failed: both precisions share its fate
            trtkit_result = {"fp32": trtkit_result, "fp16": trtkit_result}
        record.update(trtkit_fp32=trtkit_result["fp32"], trtkit_fp16=trtkit_result["fp16"])
    if "prepare" in results and "fp16" not in results["prepare"]:  # a crash or timeout: the FP16 half shares it
        results["prepare"]["fp16"] = dict(results["prepare"])
    record.update(results, seconds=round(time.monotonic() - started, 2))
    return record


def summarize(models: dict) -> dict:
    """The counts; a stage's passes only where some model has that stage's results."""
    ran = [m for m in models.values() if m["export"]["status"] == "pass"]
    ort = [m for m in ran if m["ort_runs"]]
    passes = {"trtkit_pass": ("trtkit_fp32",), "trtkit_fp16_pass": ("trtkit_fp16",), "raw_pass": ("raw",),
              "prepare_pass": ("prepare",), "prepare_fp16_pass": ("prepare", "fp16")}
    counts = {key: sum(functools.reduce(dict.get, path, m)["status"] == "pass" for m in ort if path[0] in m)
              for key, path in passes.items() if any(path[0] in m for m in models.values())}
    return {"models": len(ran), "ort_runs": len(ort), **counts,
            "crash": sum(m["crash"] for m in models.values()),
            "export_skip": sum(m["export"]["status"] == "skip" for m in models.values()),
            "export_fail": sum(m["export"]["status"] in ("fail", "timeout") for m in models.values())}


def write_atomic(path: Path, report: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(report, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def default_out(fake: bool) -> Path:
    import importlib.metadata

    try:
        version = "fake" if fake else importlib.metadata.version("tensorrt")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return ROOT / "benchmarks" / "results" / f"real-models-{version}.json"


def select(args, parser) -> list:
    """The cases this run starts: ``--only`` (all named must exist; in its order), less the done ones but ``--redo``,
    ``--limit``."""
    names = {c["name"] for c in CASES}
    only = [n for n in (args.only or "").split(",") if n]
    redo = [n for n in (args.redo or []) for n in n.split(",") if n]
    unknown = sorted(set(only + redo) - names)
    if unknown:
        parser.error(f"no case named {', '.join(unknown)} (--list shows the table)")
    by_name = {c["name"]: c for c in CASES}
    return [by_name[n] for n in (dict.fromkeys(only) if only else by_name)][: args.limit]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated case names (only these)")
    parser.add_argument("--redo", action="append", help="run this case again though the results have it (repeatable)")
    parser.add_argument("--limit", type=int, help="at most N cases of the table (after --only)")
    parser.add_argument("--list", action="store_true", help="print the case table and exit")
    parser.add_argument("--budget-s", type=float, default=480.0, help="start no case once the time left is short")
    parser.add_argument("--case-timeout-s", type=float, default=420.0, help="export and every stage of one case")
    parser.add_argument("--jobs", type=int, default=2, choices=(1, 2), help="cases at once (builds at once)")
    parser.add_argument("--opt-level", type=int, default=0, help="builder optimization level of every build")
    parser.add_argument("--stages", default=DEFAULT_STAGES, help=f"comma-separated, of {', '.join(STAGES)}")
    parser.add_argument("--torch-python", default=TORCH_PYTHON, help="the interpreter with torch that exports")
    parser.add_argument("--export-pythonpath", help="PYTHONPATH of the exports (libraries beside --torch-python's)")
    parser.add_argument("--work-dir", help="exports and engines (default: a temporary folder)")
    parser.add_argument("--out", help="results JSON (default benchmarks/results/real-models-<trt version>.json)")
    parser.add_argument("--fake", action="store_true", help="trtkit's fake TensorRT, tiny models for the exports")
    parser.add_argument("--child", nargs=2, metavar=("STAGE", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child_main(args.child[0], args.child[1], args.fake, args.opt_level)
    if args.list:
        for c in CASES:
            print(f"{c['name']:40} {c['library']:14} {c['exporter']:11} opset {c['opset']} "
                  f"{'dynamic' if c['dynamic'] else 'static '} {c['ctor']}")
        return 0
    stages = [s for s in STAGES[1:] if s in args.stages.split(",")]
    if set(args.stages.split(",")) - set(STAGES):
        parser.error(f"--stages {args.stages}: the stages are {', '.join(STAGES)}")
    if not args.fake and not Path(args.torch_python).exists():
        parser.error(f"--torch-python {args.torch_python} does not exist: give the interpreter that has torch")
    started = time.monotonic()
    out = Path(args.out) if args.out else default_out(args.fake)
    report = json.loads(out.read_text()) if out.exists() else {"models": {}}
    redo = {n for r in (args.redo or []) for n in r.split(",") if n}
    done = {n: m for n, m in report["models"].items() if all(s in m or f"{s}_fp32" in m for s in stages)}
    pending = [c for c in select(args, parser) if c["name"] not in done or c["name"] in redo]
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="real-models-"))
    lock, durations = threading.Lock(), []
    report.update(run_stamp(), environment=run_environment(stages, args.fake), reference=reference_backend(),
                  opt_level=args.opt_level)
    print(f"{len(pending)} cases to run ({len(CASES)} in the table), work in {work}", flush=True)

    def worker():
        while True:
            with lock:
                left = args.budget_s - (time.monotonic() - started)
                if not pending or left < (statistics.median(durations) if durations else 0) or left <= 0:
                    return
                item = pending.pop(0)
            record = run_case(item, work, args, stages)
            with lock:
                durations.append(record["seconds"])
                report["models"][item["name"]] = {**report["models"].get(item["name"], {}), **record}
                report["summary"] = summarize(report["models"])
                write_atomic(out, report)
                verdicts = [f"{k} {record[k]['status']}" for k in ("prepare", "raw", "trtkit_fp32", "trtkit_fp16")
                            if k in record] + ([f"prepare_fp16 {record['prepare']['fp16']['status']}"]
                                               if "prepare" in record else [])
                print(f"{item['name']}: export {record['export']['status']}, ort {record['ort_runs']}, "
                      f"{', '.join(verdicts)}{' CRASH' if record['crash'] else ''} ({record['seconds']} s)",
                      flush=True)

    threads = [threading.Thread(target=worker) for _ in range(args.jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    report["summary"] = summarize(report["models"])
    write_atomic(out, report)
    print(json.dumps(report["summary"]), f"not started: {len(pending)}", f"wrote {out}", sep="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
