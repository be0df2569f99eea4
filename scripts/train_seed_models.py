#!/usr/bin/env python3
"""Train the seed systems' small detectors from scratch on the procedural shapes set and export them to ONNX.

The data comes from ``scripts/make_detection_data.py DATA --train N --val M`` (``DATA/train/*.jpg``,
``DATA/train.json``, ``DATA/val/*.jpg``, ``DATA/val.json``; COCO, category ids 1..8). Each model is converted to its
library's own dataset layout in a work folder, trained the way its users train it, with nothing downloaded (no
pretrained weights; every network connection is refused), then exported the way its users export it:

- ``yolov8n``: ultralytics ``YOLO("yolov8n.yaml").train(data=data.yaml, ...)`` on YOLO txt labels (class ``i`` is
  category ``i + 1``), then ``YOLO(best.pt).export(format="onnx", dynamic=True, simplify=False, opset=17)``. Where
  polars is missing (scripts/seed_wheels.txt leaves it out) the trainer's results.csv is read with ``csv``; the AMP
  check, which would fetch yolo11n.pt, is skipped (AMP stays on for CUDA).
- ``rfdetr-nano``: ``rfdetr.RFDETRNano(pretrain_weights=None).train(dataset_dir=..., ...)`` on a Roboflow COCO
  layout (``train/``, ``valid/``, ``test/`` each with ``_annotations.coco.json``; rfdetr remaps the category ids to
  labels 0..7 in id order). That trainer needs ``rfdetr[train]`` (pytorch_lightning, torchmetrics, ...); without
  it the script trains with a plain loop over rfdetr's own dataset, model and SetCriterion instead, and says so in
  the JSON (``"trainer"``). Then ``.export(dynamic_batch=True, opset_version=17)``. Its ``labels`` output has
  ``classes + 1`` slots, the last a "no object" slot that ``trtkit eval`` leaves out, as it does for users' exports.

Writes ``OUT/NAME-trained.onnx`` and ``OUT/NAME-trained.json`` (epochs, images, seconds, the library's own val metric
where it reports one, the ONNX file's inputs and outputs, network tries, versions).

Runs under a Python with torch (on the GPU host: /opt/torch/.venv/bin/python3) with the seed wheels on PYTHONPATH,
as scripts/export_seed_models.py says::

    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
    python3 scripts/make_detection_data.py DATA --train 8000 --val 2000
    PYTHONPATH=/tmp/site python3 scripts/train_seed_models.py DATA OUT --models yolov8n rfdetr-nano --epochs E \
        [--imgsz 640] [--batch B] [--device 0|cpu] [--workers W] [--work DIR]

``--imgsz`` is YOLO's; RF-DETR nano trains at ``--rfdetr-resolution`` (default 384, a multiple of 32). One model's
failure does not stop the other; the exit status is 1 if any failed.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# sets the offline environment and refuses every network connection, before any library is imported
from export_seed_models import NETWORK_TRIES, describe, each, outputs_text, versions  # noqa: E402


def load_coco(data: Path, split: str) -> dict:
    return json.loads((data / f"{split}.json").read_text())


def class_names(coco: dict) -> list[str]:
    """Category names in id order: class index ``i`` is the ``i``-th category id."""
    return [c["name"] for c in sorted(coco["categories"], key=lambda c: int(c["id"]))]


def _link(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.exists():
        os.symlink(source.resolve(), target)


def yolo_layout(data: Path, work: Path) -> Path:
    """``work/images/{train,val}`` (links), ``work/labels/{train,val}/*.txt`` and ``work/data.yaml``; its path."""
    names = None
    for split in ("train", "val"):
        coco = load_coco(data, split)
        index = {int(c["id"]): i for i, c in enumerate(sorted(coco["categories"], key=lambda c: int(c["id"])))}
        names = names or class_names(coco)
        rows: dict[int, list[str]] = {int(im["id"]): [] for im in coco["images"]}
        sizes = {int(im["id"]): (im["width"], im["height"]) for im in coco["images"]}
        for a in coco["annotations"]:
            w, h = sizes[int(a["image_id"])]
            x, y, bw, bh = a["bbox"]
            box = ((x + bw / 2) / w, (y + bh / 2) / h, bw / w, bh / h)
            rows[int(a["image_id"])].append(f"{index[int(a['category_id'])]} " + " ".join(f"{v:.6f}" for v in box))
        for im in coco["images"]:
            stem = Path(im["file_name"]).stem
            _link(data / split / im["file_name"], work / "images" / split / im["file_name"])
            label = work / "labels" / split / f"{stem}.txt"
            label.parent.mkdir(parents=True, exist_ok=True)
            label.write_text("".join(r + "\n" for r in rows[int(im["id"])]))
    yaml = work / "data.yaml"
    yaml.write_text(f"path: {work.resolve()}\ntrain: images/train\nval: images/val\nnames:\n"
                    + "".join(f"  {i}: {n}\n" for i, n in enumerate(names)))
    return yaml


def _read_results_csv(trainer) -> dict:
    """ultralytics' ``BaseTrainer.read_results_csv`` without polars: results.csv as column → values."""
    try:
        with open(trainer.csv, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError:
        return {}
    columns: dict = {k.strip(): [] for k in (rows[0] if rows else {})}
    for row in rows:
        for k, v in row.items():
            try:
                columns[k.strip()].append(float(v))
            except (TypeError, ValueError):
                columns[k.strip()].append(v)
    return columns


def _patch_ultralytics() -> list[str]:
    """Make ultralytics' trainer work offline and without polars; return what was patched."""
    import importlib.util

    from ultralytics.engine import trainer

    patched = []
    if importlib.util.find_spec("polars") is None:
        trainer.BaseTrainer.read_results_csv = _read_results_csv
        patched.append("read_results_csv (no polars)")
    trainer.check_amp = lambda model: next(model.parameters()).device.type == "cuda"  # would fetch yolo11n.pt
    patched.append("check_amp (skipped: it fetches yolo11n.pt)")
    return patched


def train_yolo(name: str, data: Path, work: Path, args) -> dict:
    from ultralytics import YOLO

    patched = _patch_ultralytics()
    yaml = yolo_layout(data, work / "dataset")
    model = YOLO(f"{name}.yaml")
    model.train(data=str(yaml), epochs=args.epochs, imgsz=args.imgsz, batch=args.batch or 16, device=args.device,
                workers=args.workers, project=str(work / "runs"), name="train", exist_ok=True, pretrained=False,
                plots=False, verbose=False, seed=0, deterministic=False)
    trainer = model.trainer
    best = Path(trainer.best if Path(trainer.best).exists() else trainer.last)
    metrics = {k: round(float(v), 5) for k, v in (trainer.metrics or {}).items() if isinstance(v, (int, float))}
    onnx = YOLO(str(best)).export(format="onnx", dynamic=True, simplify=False, opset=17, imgsz=args.imgsz,
                                  device="cpu")
    return {"onnx": Path(onnx), "trainer": "ultralytics", "val_metric": metrics, "imgsz": args.imgsz,
            "checkpoint": best.name, "patched": patched}


def rfdetr_layout(data: Path, work: Path) -> Path:
    """Roboflow's COCO layout: ``train/`` and ``valid/`` (and ``test/``, val again) each with linked images and
    ``_annotations.coco.json``; its root."""
    for split, folders in (("train", ("train",)), ("val", ("valid", "test"))):
        coco = load_coco(data, split)
        coco = {**coco, "categories": [{**c, "supercategory": "none"} for c in coco["categories"]]}
        for folder in folders:
            for im in coco["images"]:
                _link(data / split / im["file_name"], work / folder / im["file_name"])
            (work / folder / "_annotations.coco.json").write_text(json.dumps(coco))
    return work


def _rfdetr_trainer_available() -> str | None:
    """``None`` where ``RFDETR.train`` can run (rfdetr[train] installed), else why not."""
    try:
        import rfdetr.training  # noqa: F401
    except ImportError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _rfdetr_plain_loop(model, dataset_dir: Path, out: Path, args, device: str) -> dict:
    """Train ``model`` (an ``RFDETR``) with rfdetr's own dataset, model and criterion in a plain AdamW loop."""
    import importlib.util

    import torch
    from rfdetr._namespace import _namespace_from_configs
    from rfdetr.datasets import build_dataset
    from rfdetr.models.lwdetr import build_criterion_from_config
    from rfdetr.utilities.tensors import make_collate_fn

    if importlib.util.find_spec("pycocotools") is None:  # torchvision's CocoDetection imports it
        import faster_coco_eval

        faster_coco_eval.init_as_pycocotools()
    mc = model.model_config
    mc.num_classes = len(class_names(load_coco(Path(args.data), "train")))
    tc = model.get_train_config(dataset_dir=str(dataset_dir), output_dir=str(out), epochs=args.epochs,
                                batch_size=args.batch or 4, num_workers=args.workers, multi_scale=False,
                                augmentation_backend="torchvision", tensorboard=False)
    ns = _namespace_from_configs(mc, tc)
    dataset = build_dataset("train", ns, mc.resolution)
    loader = torch.utils.data.DataLoader(dataset, batch_size=tc.batch_size, shuffle=True, drop_last=False,
                                         num_workers=args.workers,
                                         collate_fn=make_collate_fn(block_size=mc.patch_size * mc.num_windows))
    net = model.model.model
    net.to(device).train()
    criterion, _ = build_criterion_from_config(mc, tc)
    criterion.to(device)
    optimizer = torch.optim.AdamW([p for p in net.parameters() if p.requires_grad], lr=tc.lr,
                                  weight_decay=tc.weight_decay)
    losses = []
    for epoch in range(args.epochs):
        total, steps = 0.0, 0
        for samples, targets in loader:
            samples = samples.to(device)
            targets = [{k: v.to(device) if hasattr(v, "to") else v for k, v in t.items()} for t in targets]
            loss_dict = criterion(net(samples, targets), targets)
            weights = criterion.weight_dict
            loss = sum(loss_dict[k] * weights[k] for k in loss_dict if k in weights)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 0.1)
            optimizer.step()
            total, steps = total + loss.item(), steps + 1
        losses.append(round(total / max(steps, 1), 4))
        print(f"rfdetr-nano: epoch {epoch + 1}/{args.epochs} loss {losses[-1]}", flush=True)
    net.eval()
    model.model.class_names = class_names(load_coco(Path(args.data), "train"))
    return {"train_loss": losses}


def train_rfdetr(name: str, data: Path, work: Path, args) -> dict:
    import rfdetr

    device = "cpu" if args.device == "cpu" else f"cuda:{args.device}" if str(args.device).isdigit() else args.device
    dataset_dir = rfdetr_layout(data, work / "dataset")
    classes = len(class_names(load_coco(data, "train")))
    model = rfdetr.RFDETRNano(pretrain_weights=None, device=device, num_classes=classes,
                              resolution=args.rfdetr_resolution)
    why_not = _rfdetr_trainer_available()
    info = {"resolution": args.rfdetr_resolution}
    if why_not is None:
        model.train(dataset_dir=str(dataset_dir), output_dir=str(work / "runs"), epochs=args.epochs,
                    batch_size=args.batch or 4, num_workers=args.workers, device=device,
                    resolution=args.rfdetr_resolution, tensorboard=False, progress_bar=None)
        info.update(trainer="rfdetr (pytorch_lightning)", val_metric=_rfdetr_val_metric(work / "runs"))
    else:
        print(f"{name}: rfdetr's trainer is unavailable ({why_not}); training with a plain loop", flush=True)
        info.update(trainer=f"plain loop (rfdetr[train] missing: {why_not})", val_metric=None,
                    **_rfdetr_plain_loop(model, dataset_dir, work / "runs", args, device))
    export_dir = work / "export"
    onnx = Path(model.export(output_dir=str(export_dir), dynamic_batch=True, opset_version=17, verbose=False))
    info.update(onnx=onnx)
    return info


def _rfdetr_val_metric(runs: Path) -> dict | None:
    """The last val row rfdetr's trainer logged (its CSV logger's metrics.csv), where there is one."""
    for path in sorted(runs.rglob("metrics.csv"), key=lambda p: p.stat().st_mtime, reverse=True):
        rows = [r for r in csv.DictReader(path.open()) if any(k.startswith("val/") and v for k, v in r.items())]
        if rows:
            return {k: float(v) for k, v in rows[-1].items() if k.startswith("val/") and v}
    return None


MODELS = {"yolov8n": train_yolo, "rfdetr-nano": train_rfdetr}


def train(name: str, args) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"train-{name}-", dir=args.work))
    tries, start, cwd = len(NETWORK_TRIES), time.perf_counter(), os.getcwd()
    os.chdir(work)  # ultralytics writes next to the YAML's name, i.e. here
    try:
        info = MODELS[name](name, args.data.resolve(), work, args)
    finally:
        os.chdir(cwd)
    seconds = round(time.perf_counter() - start, 1)
    made = info.pop("onnx")
    made = made if made.is_absolute() else work / made
    target = args.out / f"{name}-trained.onnx"
    shutil.move(str(made), target)
    for extra in made.parent.glob(made.name + ".data"):
        shutil.move(str(extra), args.out / extra.name)
    images = {s: len(load_coco(args.data, s)["images"]) for s in ("train", "val")}
    size = info.get("imgsz") or info.get("resolution") or 640
    record = {"model": name, "file": target.name, "epochs": args.epochs, "images": images, "seconds": seconds,
              "device": str(args.device), **info, **describe(target, size), "network_tries": NETWORK_TRIES[tries:],
              "versions": versions()}
    (args.out / f"{name}-trained.json").write_text(json.dumps(record, indent=1, default=str) + "\n")
    if not args.keep_work:
        shutil.rmtree(work, ignore_errors=True)
    return record


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("data", type=Path, help="make_detection_data.py's folder (train/, val/, train.json, val.json)")
    p.add_argument("out", type=Path, help="folder for NAME-trained.onnx and NAME-trained.json")
    p.add_argument("--models", nargs="+", choices=sorted(MODELS), default=list(MODELS))
    p.add_argument("--epochs", type=int, required=True)
    p.add_argument("--imgsz", type=int, default=640, help="YOLO's train and export size (default 640)")
    p.add_argument("--rfdetr-resolution", type=int, default=384, help="RF-DETR nano's, a multiple of 32 (384)")
    p.add_argument("--batch", type=int, help="batch size (default: 16 for YOLO, 4 for RF-DETR)")
    p.add_argument("--device", default="0", help="CUDA index or cpu (default 0)")
    p.add_argument("--workers", type=int, default=4, help="data loader workers (default 4)")
    p.add_argument("--work", type=Path, help="folder for the work folders (default: the temp dir)")
    p.add_argument("--keep-work", action="store_true", help="leave the work folders (datasets, runs) in place")
    args = p.parse_args(argv)
    if args.rfdetr_resolution % 32:
        p.error("--rfdetr-resolution must be a multiple of 32 (patch 16 x 2 windows)")
    missing = [n for n in ("train", "val", "train.json", "val.json") if not (args.data / n).exists()]
    if missing:
        p.error(f"{args.data} lacks {', '.join(missing)}: make it with scripts/make_detection_data.py DATA")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.work:
        args.work.mkdir(parents=True, exist_ok=True)
    done, failed = each(args.models, lambda name: train(name, args), lambda info: (
        f"{info['file']} after {info['epochs']} epoch(s) on {info['images']['train']} images in {info['seconds']} s "
        f"({info['trainer']}); val {info.get('val_metric')}; outputs {outputs_text(info)}; "
        f"network tries {len(info['network_tries'])}"))
    print(f"trained {len(done)}, failed {len(failed)} {' '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
