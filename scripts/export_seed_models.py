#!/usr/bin/env python3
"""Export the seed systems' real models (random or config-initialised weights, nothing downloaded) to ONNX.

Each model is exported the way its users export it, with the library's own exporter where it has one:

- ``yolov8n``, ``yolov5nu``, ``yolo11n``, ``yolov8n-pose``: ultralytics ``YOLO("<name>.yaml").export(format="onnx",
  dynamic=True, simplify=False, opset=17)``;
- ``rtdetr``: transformers ``RTDetrForObjectDetection(RTDetrConfig(num_labels=80))`` through ``torch.onnx.export``
  (outputs ``logits``, ``pred_boxes``, as ``optimum`` exports it);
- ``rfdetr-nano``: ``rfdetr.RFDETRNano(pretrain_weights=None).export(dynamic_batch=True)`` (outputs ``dets``,
  ``labels``);
- ``lp-heatmap`` and ``lp-heatmap-fp16``: Lightning Pose's ``HeatmapTracker`` (17 keypoints, ResNet-50, no
  pretrained weights), exported with the ``torch.onnx.export`` call of ``lightning_pose.api.Model.export``
  (``images`` → ``heatmaps``, dynamic batch, 1x3x256x256; fp16 is that exporter's default precision).

Each ``NAME.onnx`` comes with ``NAME.json``: inputs and outputs (name, dtype, dims as the file declares them), the
output shapes onnxruntime gives for a random batch of 2 at the declared size, the library versions, and any network
connection something tried (every one is refused: the GPU host has no network, and nothing may be fetched).

Runs under a Python with torch (on the GPU host: /opt/torch/.venv/bin/python3), with the wheels of
scripts/seed_wheels.txt installed on PYTHONPATH (scripts/fetch_seed_wheels.sh fetches them into .whl/)::

    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
    PYTHONPATH=/tmp/site python3 scripts/export_seed_models.py OUT_DIR [--only NAME ...] [--skip-existing]

One model's failure does not stop the others; the exit status is 1 if any failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import sys
import tempfile
import time
import traceback
from pathlib import Path

# before ultralytics, transformers or huggingface_hub are imported: no fetches, no auto-installs
os.environ.update(YOLO_OFFLINE="true", YOLO_AUTOINSTALL="false", YOLO_VERBOSE="false", HF_HUB_OFFLINE="1",
                  TRANSFORMERS_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1")
os.environ.setdefault("YOLO_CONFIG_DIR", tempfile.mkdtemp(prefix="ultralytics-config-"))

NETWORK_TRIES: list[str] = []
_connect = socket.socket.connect


def _refuse(sock, address):
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        NETWORK_TRIES.append(str(address))
        raise OSError(f"export_seed_models: network refused ({address})")
    return _connect(sock, address)


socket.socket.connect = _refuse  # type: ignore[method-assign]


def _ultralytics(name: str, work: Path) -> Path:
    from ultralytics import YOLO

    model = YOLO(f"{name}.yaml")
    return Path(model.export(format="onnx", dynamic=True, simplify=False, opset=17, imgsz=640, device="cpu"))


def _rtdetr(name: str, work: Path) -> Path:
    import torch
    from transformers import RTDetrConfig, RTDetrForObjectDetection

    torch.manual_seed(0)
    model = RTDetrForObjectDetection(RTDetrConfig(num_labels=80)).eval()  # COCO's 80, as the released checkpoints

    class Outputs(torch.nn.Module):
        def __init__(self, detector):
            super().__init__()
            self.detector = detector

        def forward(self, pixel_values):
            out = self.detector(pixel_values=pixel_values)
            return out.logits, out.pred_boxes

    path = work / f"{name}.onnx"
    axes = {"pixel_values": {0: "batch"}, "logits": {0: "batch"}, "pred_boxes": {0: "batch"}}
    torch.onnx.export(Outputs(model), (torch.randn(1, 3, 640, 640),), str(path), input_names=["pixel_values"],
                      output_names=["logits", "pred_boxes"], dynamic_axes=axes, opset_version=17, dynamo=False)
    return path


def _rfdetr(name: str, work: Path) -> Path:
    import rfdetr

    model = rfdetr.RFDETRNano(pretrain_weights=None, device="cpu")
    out = model.export(output_dir=str(work), dynamic_batch=True, opset_version=17, verbose=False)
    return Path(out)


def _lightning_pose(name: str, work: Path) -> Path:
    import copy

    import torch
    from lightning_pose.models.heatmap_tracker import HeatmapTracker

    model = HeatmapTracker(num_keypoints=17, backbone="resnet50", pretrained=False).eval()
    dummy = torch.randn(1, 3, 256, 256)
    if name.endswith("fp16"):  # lightning_pose.api.Model.export: a half copy, a half dummy
        model, dummy = copy.deepcopy(model).half(), dummy.half()
    path = work / f"{name}.onnx"
    torch.onnx.export(model, (dummy,), str(path), input_names=["images"], output_names=["heatmaps"],
                      dynamic_axes={"images": {0: "batch"}, "heatmaps": {0: "batch"}}, opset_version=17,
                      do_constant_folding=True)
    return path


MODELS = {  # name: (exporter, the input's height and width where the file leaves them symbolic)
    "yolov8n": (_ultralytics, 640),
    "yolov8s": (_ultralytics, 640),  # yolov8n's sibling: what the timing cache saves across a family
    "yolov5nu": (_ultralytics, 640),
    "yolo11n": (_ultralytics, 640),
    "yolov8n-pose": (_ultralytics, 640),
    "rtdetr": (_rtdetr, 640),
    "rfdetr-nano": (_rfdetr, 384),
    "lp-heatmap": (_lightning_pose, 256),
    "lp-heatmap-fp16": (_lightning_pose, 256),
}


def describe(path: Path, size: int) -> dict:
    """The file's inputs and outputs as declared, and the output shapes onnxruntime gives for a batch of 2 (a
    symbolic height or width: ``size``)."""
    import numpy as np
    import onnx

    model = onnx.load(str(path), load_external_data=False)

    def values(items):
        return [{"name": v.name, "dtype": onnx.helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type).name,
                 "dims": [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]} for v in items]

    inits = {i.name for i in model.graph.initializer}
    info = {"inputs": values([i for i in model.graph.input if i.name not in inits]),
            "outputs": values(model.graph.output),
            "opsets": {o.domain or "ai.onnx": o.version for o in model.opset_import},
            "bytes": path.stat().st_size}
    try:
        import onnxruntime as ort

        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        def dims(declared):
            return [d if isinstance(d, int) and d > 0 else 2 if k == 0 else size for k, d in enumerate(declared)]

        feed = {i["name"]: np.random.default_rng(0).random(dims(i["dims"])).astype(i["dtype"]) for i in info["inputs"]}
        got = session.run(None, feed)
        info["ort_shapes"] = {o.name: list(a.shape) for o, a in zip(session.get_outputs(), got)}
    except Exception as exc:  # the file still counts: the report says why onnxruntime could not run it
        info["ort_error"] = f"{type(exc).__name__}: {exc}"
    return info


def versions() -> dict:
    from importlib import metadata

    found = {}
    for dist in ("torch", "torchvision", "onnx", "onnxruntime", "ultralytics", "transformers", "rfdetr",
                 "lightning-pose", "timm"):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return found


def export(name: str, out: Path) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"seed-{name}-"))
    cwd, tries, start = os.getcwd(), len(NETWORK_TRIES), time.perf_counter()
    os.chdir(work)  # ultralytics writes next to the YAML's name, i.e. here
    try:
        exporter, size = MODELS[name]
        made = exporter(name, work)
    finally:
        os.chdir(cwd)
    made = made if made.is_absolute() else work / made
    target = out / f"{name}.onnx"
    shutil.move(str(made), target)
    for extra in made.parent.glob(made.name + ".data"):  # external weights, where an exporter wrote them
        shutil.move(str(extra), out / extra.name)
    seconds = round(time.perf_counter() - start, 1)
    info = {"model": name, "file": target.name, "export_s": seconds, **describe(target, size),
            "network_tries": NETWORK_TRIES[tries:], "versions": versions()}
    (out / f"{name}.json").write_text(json.dumps(info, indent=1) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    return info


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="folder for NAME.onnx and NAME.json")
    p.add_argument("--only", action="append", choices=sorted(MODELS), help="export this model (repeatable)")
    p.add_argument("--skip-existing", action="store_true", help="leave out models whose NAME.json is already there")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    names = []
    for name in args.only or MODELS:
        if args.skip_existing and (args.out / f"{name}.json").exists():
            print(f"{name}: already there", flush=True)
        else:
            names.append(name)
    done, failed = each(names, lambda name: export(name, args.out), lambda info: (
        f"{info['file']} in {info['export_s']} s; outputs {outputs_text(info)}; onnxruntime "
        f"{info.get('ort_shapes') or info.get('ort_error')}; network tries {len(info['network_tries'])}"))
    print(f"exported {len(done)}, failed {len(failed)} {' '.join(failed)}")
    return 1 if failed else 0


def each(names, work, line) -> tuple[list, list]:
    """``work(name)`` for each name, one's failure not stopping the others; prints ``line(info)`` or the failure.
    Returns (done, failed)."""
    done, failed = [], []
    for name in names:
        try:
            info = work(name)
        except Exception as exc:
            failed.append(name)
            print(f"{name}: FAILED {type(exc).__name__}: {exc}", flush=True)
            traceback.print_exc()
            continue
        done.append(name)
        print(f"{name}: {line(info)}", flush=True)
    return done, failed


def outputs_text(info: dict) -> str:
    return ", ".join(f"{o['name']} {o['dtype']} {o['dims']}" for o in info["outputs"])


if __name__ == "__main__":
    sys.exit(main())
