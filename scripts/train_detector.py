"""Train a small anchor-free YOLO-style detector on the procedural shapes set and export it to ONNX.

The data comes from ``scripts/make_detection_data.py``. The model is a small CSP-free CNN backbone, an FPN/PAN
neck and decoupled heads on strides 8, 16 and 32, trained with task-aligned assignment (top-k anchors by
``score^0.5 * IoU^6``), CIoU box loss and soft-target BCE, with an EMA of the weights. The exported model has
YOLOv8's head format: input ``images`` ``(N, 3, S, S)`` float32 RGB in 0..1 (letterboxed), output ``output0``
``(N, 4 + classes, anchors)``: ``cx, cy, w, h`` in input pixels, then sigmoid class scores; dynamic batch, opset 17.

After training it scores the EMA model on val with pycocotools (trtkit.eval.coco), exports the ONNX, scores the ONNX
again through onnxruntime when that is installed, and writes into ``--out``: ``detector.onnx``,
``train_log.txt`` and ``fp32_result.json``.

PyTorch is needed only here. Usage::

    python scripts/train_detector.py --data DATA --out OUT [--epochs 60] [--time-budget 150] [--device cuda]

``samples/detection/model/detector.onnx`` came from ``make_detection_data.py /tmp/data --train 8000 --val 2000
--seed 0`` and ``train_detector.py --data /tmp/data --out /tmp/res --epochs 60 --time-budget 150 --batch 128
--lr 3e-3`` on one H200 (the first epoch's time cut the run to 13 epochs; ``model/train_log.txt``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trtkit.detection import Letterbox, decode  # noqa: E402
from trtkit.eval.coco import category_ids, evaluate_coco, load_coco, to_coco_results  # noqa: E402

MAX_OBJECTS = 16


class Log:
    def __init__(self, path: Path):
        self.file = path.open("w")
        self.start = time.time()

    def __call__(self, text: str) -> None:
        line = f"[{time.time() - self.start:7.1f}s] {text}"
        print(line, flush=True)
        self.file.write(line + "\n")
        self.file.flush()


def _load_one(args):
    path, size = args
    letterbox = Letterbox((size, size))
    canvas = np.full((1, size, size, 3), 114, np.uint8)
    meta = letterbox.paste(path, canvas[0])
    return canvas[0].transpose(2, 0, 1).copy(), meta


def load_split(data: Path, split: str, size: int, limit: int | None, workers: int):
    """(uint8 images (N, 3, S, S), boxes (N, MAX_OBJECTS, 4) xyxy input pixels, classes (N, MAX_OBJECTS) or -1,
    image ids, metas, coco)."""
    coco = load_coco(data / f"{split}.json")
    images = coco["images"][:limit] if limit else coco["images"]
    cats = {c: i for i, c in enumerate(category_ids(coco))}
    jobs = [(data / split / im["file_name"], size) for im in images]
    with ProcessPoolExecutor(workers) as pool:
        loaded = list(pool.map(_load_one, jobs, chunksize=64))
    pixels = np.stack([p for p, _ in loaded])
    metas = [m for _, m in loaded]
    boxes = np.zeros((len(images), MAX_OBJECTS, 4), np.float32)
    classes = np.full((len(images), MAX_OBJECTS), -1, np.int64)
    row = {im["id"]: i for i, im in enumerate(images)}
    fill = np.zeros(len(images), int)
    for ann in coco["annotations"]:
        i = row.get(ann["image_id"])
        if i is None or fill[i] >= MAX_OBJECTS:
            continue
        x, y, w, h = ann["bbox"]
        boxes[i, fill[i]] = metas[i].to_input(np.array([x, y, x + w, y + h]))[0]
        classes[i, fill[i]] = cats[ann["category_id"]]
        fill[i] += 1
    return pixels, boxes, classes, [im["id"] for im in images], metas, coco


def build_model(num_classes: int, size: int):
    import torch
    import torch.nn as nn

    def conv(c1, c2, k=3, s=1):
        return nn.Sequential(nn.Conv2d(c1, c2, k, s, k // 2, bias=False), nn.BatchNorm2d(c2), nn.SiLU())

    class Res(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.a, self.b = conv(c, c), conv(c, c)

        def forward(self, x):
            return x + self.b(self.a(x))

    def stage(c1, c2, n):
        return nn.Sequential(conv(c1, c2, 3, 2), *[Res(c2) for _ in range(n)])

    def fuse(c1, c2):
        return nn.Sequential(conv(c1, c2, 1), Res(c2))

    class Head(nn.Module):
        def __init__(self, c, hidden):
            super().__init__()
            self.box = nn.Sequential(conv(c, hidden), conv(hidden, hidden), nn.Conv2d(hidden, 4, 1))
            self.cls = nn.Sequential(conv(c, hidden), conv(hidden, hidden), nn.Conv2d(hidden, num_classes, 1))
            nn.init.constant_(self.box[-1].bias, 1.0)
            nn.init.constant_(self.cls[-1].bias, -math.log(99.0))

        def forward(self, x):
            return self.box(x).flatten(2), self.cls(x).flatten(2)

    class Detector(nn.Module):
        strides = (8, 16, 32)

        def __init__(self):
            super().__init__()
            self.num_classes = num_classes
            self.stem = nn.Sequential(conv(3, 16, 3, 2), stage(16, 32, 1))
            self.c3, self.c4, self.c5 = stage(32, 64, 2), stage(64, 96, 2), stage(96, 128, 1)
            self.up = nn.Upsample(scale_factor=2, mode="nearest")
            self.t4, self.t3 = fuse(128 + 96, 96), fuse(96 + 64, 64)
            self.d3, self.d4 = conv(64, 64, 3, 2), conv(96, 96, 3, 2)
            self.b4, self.b5 = fuse(64 + 96, 96), fuse(96 + 128, 128)
            self.heads = nn.ModuleList([Head(64, 48), Head(96, 48), Head(128, 48)])
            points, strides = [], []
            for s in self.strides:
                n = size // s
                ys, xs = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
                points.append(torch.stack([xs, ys], -1).reshape(-1, 2).float().add(0.5).mul(s))
                strides.append(torch.full((n * n,), float(s)))
            self.register_buffer("anchors", torch.cat(points), persistent=False)
            self.register_buffer("anchor_strides", torch.cat(strides), persistent=False)
            self.export = False

        def forward(self, x):
            c3 = self.c3(self.stem(x))
            c4 = self.c4(c3)
            c5 = self.c5(c4)
            t4 = self.t4(torch.cat([self.up(c5), c4], 1))
            t3 = self.t3(torch.cat([self.up(t4), c3], 1))
            b4 = self.b4(torch.cat([self.d3(t3), t4], 1))
            b5 = self.b5(torch.cat([self.d4(b4), c5], 1))
            outs = [head(f) for head, f in zip(self.heads, (t3, b4, b5))]
            ltrb = nn.functional.softplus(torch.cat([o[0] for o in outs], 2)) * self.anchor_strides
            logits = torch.cat([o[1] for o in outs], 2)
            xy1 = self.anchors.t() - ltrb[:, :2]
            xy2 = self.anchors.t() + ltrb[:, 2:]
            if self.export:
                return torch.cat([(xy1 + xy2) / 2, xy2 - xy1, logits.sigmoid()], 1)
            return torch.cat([xy1, xy2], 1).transpose(1, 2), logits.transpose(1, 2)

    return Detector()


def pairwise_iou(a, b, eps=1e-7):
    """IoU between (B, M, 4) and (B, A, 4) xyxy boxes → (B, M, A)."""
    import torch

    lt = torch.maximum(a[:, :, None, :2], b[:, None, :, :2])
    rb = torch.minimum(a[:, :, None, 2:], b[:, None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    area_a = (a[..., 2:] - a[..., :2]).clamp(min=0).prod(-1)
    area_b = (b[..., 2:] - b[..., :2]).clamp(min=0).prod(-1)
    return inter / (area_a[:, :, None] + area_b[:, None, :] - inter + eps)


def ciou(p, g, eps=1e-7):
    """Complete IoU of matched (K, 4) xyxy boxes."""
    import torch

    lt, rb = torch.maximum(p[:, :2], g[:, :2]), torch.minimum(p[:, 2:], g[:, 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    wp, hp = (p[:, 2] - p[:, 0]).clamp(min=eps), (p[:, 3] - p[:, 1]).clamp(min=eps)
    wg, hg = (g[:, 2] - g[:, 0]).clamp(min=eps), (g[:, 3] - g[:, 1]).clamp(min=eps)
    iou = inter / (wp * hp + wg * hg - inter + eps)
    cw = torch.maximum(p[:, 2], g[:, 2]) - torch.minimum(p[:, 0], g[:, 0])
    ch = torch.maximum(p[:, 3], g[:, 3]) - torch.minimum(p[:, 1], g[:, 1])
    rho2 = ((p[:, :2] + p[:, 2:] - g[:, :2] - g[:, 2:]) ** 2).sum(-1) / 4
    v = (4 / math.pi ** 2) * (torch.atan(wg / hg) - torch.atan(wp / hp)) ** 2
    with torch.no_grad():
        alpha = v / (v - iou + 1 + eps)
    return iou - rho2 / (cw ** 2 + ch ** 2 + eps) - alpha * v


def assign(pred_boxes, pred_scores, anchors, gt_boxes, gt_cls, topk=10):
    """Task-aligned assignment → (foreground mask (B, A), target boxes (B, A, 4), target scores (B, A, C))."""
    import torch

    valid = gt_cls >= 0
    cls_index = gt_cls.clamp(min=0)
    ax, ay = anchors[:, 0], anchors[:, 1]
    inside = ((ax > gt_boxes[..., 0:1]) & (ax < gt_boxes[..., 2:3]) & (ay > gt_boxes[..., 1:2])
              & (ay < gt_boxes[..., 3:4]) & valid[..., None])
    iou = pairwise_iou(gt_boxes, pred_boxes).clamp(min=0)
    score = torch.gather(pred_scores.transpose(1, 2), 1, cls_index[..., None].expand(-1, -1, anchors.shape[0]))
    metric = (score.pow(0.5) * iou.pow(6)) * inside
    top = metric.topk(topk, dim=2).indices
    chosen = torch.zeros_like(inside).scatter_(2, top, True) & inside & (metric > 0)
    # An anchor chosen by several objects goes to the one it overlaps most.
    overlap = torch.where(chosen, iou, torch.full_like(iou, -1.0))
    best = overlap.argmax(1)
    fg = chosen.any(1)
    owner = torch.zeros_like(chosen).scatter_(1, best[:, None], True) & chosen
    metric, iou = metric * owner, iou * owner
    norm = metric / (metric.amax(2, keepdim=True) + 1e-9) * iou.amax(2, keepdim=True)
    soft = norm.amax(1)
    target_boxes = torch.gather(gt_boxes, 1, best[..., None].expand(-1, -1, 4))
    target_cls = torch.gather(cls_index, 1, best)
    target_scores = torch.zeros_like(pred_scores)
    target_scores.scatter_(2, target_cls[..., None], soft[..., None])
    return fg, target_boxes, target_scores * fg[..., None]


def loss_fn(model, images, gt_boxes, gt_cls):
    import torch

    boxes, logits = model(images)
    boxes, logits = boxes.float(), logits.float()
    with torch.no_grad():
        fg, t_boxes, t_scores = assign(boxes.detach(), logits.detach().sigmoid(), model.anchors, gt_boxes, gt_cls)
    total = t_scores.sum().clamp(min=1.0)
    cls = torch.nn.functional.binary_cross_entropy_with_logits(logits, t_scores, reduction="sum") / total
    weight = t_scores.sum(-1)[fg]
    box = ((1.0 - ciou(boxes[fg], t_boxes[fg])) * weight).sum() / total if fg.any() else boxes.sum() * 0
    return 7.5 * box + 0.5 * cls, box.detach(), cls.detach()


def augment(images, boxes, cls, size):
    """Random horizontal and vertical flips of a batch, boxes with them."""
    import torch

    b = images.shape[0]
    valid = (cls >= 0)[..., None]
    for dim, (i1, i2) in ((3, (0, 2)), (2, (1, 3))):
        flip = torch.rand(b, device=images.device) < 0.5
        images = torch.where(flip[:, None, None, None], images.flip(dim), images)
        flipped = boxes.clone()
        flipped[..., i1], flipped[..., i2] = size - boxes[..., i2], size - boxes[..., i1]
        boxes = torch.where(flip[:, None, None] & valid, flipped, boxes)
    return images, boxes


def predict(model, pixels, device, batch=256):
    import torch

    outs = []
    with torch.no_grad():
        for start in range(0, len(pixels), batch):
            x = torch.from_numpy(pixels[start:start + batch]).to(device).float().div_(255)
            outs.append(model(x).float().cpu().numpy())
    return np.concatenate(outs)


def score(outputs, image_ids, metas, coco):
    """pycocotools metrics of head outputs (decoded with trtkit.detection, boxes mapped back)."""
    cats = category_ids(coco)
    results = []
    for start in range(0, len(outputs), 256):
        dets = decode(outputs[start:start + 256], conf_threshold=0.001, iou_threshold=0.65, max_detections=100)
        for k, det in enumerate(dets):
            i = start + k
            results += to_coco_results(image_ids[i], det.mapped(metas[i]), cats)
    return evaluate_coco(coco, results, image_ids)


def export_onnx(model, path: Path, size: int):
    import torch

    model.export = True
    dummy = torch.zeros(1, 3, size, size)
    kwargs = dict(input_names=["images"], output_names=["output0"], opset_version=17,
                  dynamic_axes={"images": {0: "batch"}, "output0": {0: "batch"}})
    try:
        torch.onnx.export(model, dummy, str(path), dynamo=False, **kwargs)
    except TypeError:
        torch.onnx.export(model, dummy, str(path), **kwargs)
    model.export = False


def onnx_outputs(path: Path, pixels, batch=64):
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    outs = [sess.run(None, {"images": pixels[s:s + batch].astype(np.float32) / 255})[0]
            for s in range(0, len(pixels), batch)]
    return np.concatenate(outs)


def train(args, log: Log):
    import torch

    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    torch.backends.cudnn.benchmark = device.type == "cuda"
    t0 = time.time()
    tr = load_split(args.data, "train", args.imgsz, args.limit, args.workers)
    va = load_split(args.data, "val", args.imgsz, args.limit, args.workers)
    num_classes = len(tr[5]["categories"])
    log(f"loaded train {len(tr[0])} / val {len(va[0])} images at {args.imgsz}px in {time.time() - t0:.1f}s; "
        f"{num_classes} classes")
    pixels = torch.from_numpy(tr[0]).to(device)
    gt_boxes, gt_cls = torch.from_numpy(tr[1]).to(device), torch.from_numpy(tr[2]).to(device)
    model = build_model(num_classes, args.imgsz).to(device).to(memory_format=torch.channels_last)
    ema = build_model(num_classes, args.imgsz).to(device)
    ema.load_state_dict(model.state_dict())
    ema.eval()
    log(f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters")
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.05)
    steps_per_epoch = max(1, len(pixels) // args.batch)
    total = steps_per_epoch * args.epochs
    warmup = min(300, total // 10 + 1)
    step, start = 0, time.time()
    amp = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")
    for epoch in range(args.epochs):
        model.train()
        perm = torch.randperm(len(pixels), device=device)
        sums = torch.zeros(2, device=device)
        for k in range(steps_per_epoch):
            idx = perm[k * args.batch:(k + 1) * args.batch]
            x = pixels[idx].float().div_(255)
            x, boxes = augment(x, gt_boxes[idx], gt_cls[idx], args.imgsz)
            lr = args.lr * (step / warmup if step < warmup else
                            0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup))))
            for group in opt.param_groups:
                group["lr"] = lr
            with amp:
                loss, box, cls = loss_fn(model, x.contiguous(memory_format=torch.channels_last), boxes, gt_cls[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
            opt.step()
            decay = 0.9995 * (1 - math.exp(-step / 500))
            with torch.no_grad():
                for e, m in zip(ema.state_dict().values(), model.state_dict().values()):
                    if e.dtype.is_floating_point:
                        e.mul_(decay).add_(m.detach(), alpha=1 - decay)
                    else:
                        e.copy_(m)
            sums += torch.stack([box, cls])
            step += 1
        elapsed = time.time() - start
        box_l, cls_l = (sums / steps_per_epoch).tolist()
        log(f"epoch {epoch + 1}/{args.epochs}: box {box_l:.4f} cls {cls_l:.4f} lr {lr:.2e} ({elapsed:.0f}s)")
        if epoch == 0 and args.time_budget:
            fit = max(1, int(args.time_budget / elapsed))
            if fit < args.epochs:
                log(f"time budget {args.time_budget}s: {fit} epochs fit, not {args.epochs}")
                args.epochs = fit
                total = steps_per_epoch * fit
        if epoch + 1 >= args.epochs:
            break
    log(f"trained {step} steps in {time.time() - start:.0f}s")
    return ema, va


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="folder written by make_detection_data.py")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--imgsz", type=int, default=320)
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--time-budget", type=float, default=0, help="seconds of training; cuts the epochs to fit")
    parser.add_argument("--limit", type=int, default=None, help="use only the first N images of each split")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    log = Log(args.out / "train_log.txt")
    log(f"args: {vars(args)}")
    ema, (pixels, _, _, image_ids, metas, coco) = train(args, log)
    ema = ema.float().eval()
    ema.export = True
    torch_metrics = score(predict(ema, pixels, args.device), image_ids, metas, coco)
    log(f"val (PyTorch, EMA, FP32): {torch_metrics}")
    onnx_path = args.out / "detector.onnx"
    export_onnx(ema.cpu(), onnx_path, args.imgsz)
    log(f"exported {onnx_path} ({onnx_path.stat().st_size / 1e6:.2f} MB)")
    outs = onnx_outputs(onnx_path, pixels)
    onnx_metrics = score(outs, image_ids, metas, coco) if outs is not None else None
    log(f"val (ONNX via onnxruntime, FP32): {onnx_metrics}")
    result = {"val_images": len(image_ids), "imgsz": args.imgsz, "epochs": args.epochs,
              "torch_fp32": torch_metrics.to_json(), "onnx_fp32": onnx_metrics.to_json() if onnx_metrics else None,
              "decode": {"conf_threshold": 0.001, "iou_threshold": 0.65, "max_detections": 100}}
    (args.out / "fp32_result.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
