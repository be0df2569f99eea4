#!/usr/bin/env python3
"""Check what trtkit's CPU side makes of the seed models of scripts/export_seed_models.py, without TensorRT.

For each ``NAME.onnx`` of the folder: onnxruntime on a random batch of 2, then ``trtkit.prepare`` (the ONNX half of
``trtkit build``; with ``--add-nms``'s plugin and ``--input-uint8-nhwc`` where they apply), the detector layout from the
declared outputs (``find_layout(..., unknown_ok=True)``) and from the arrays, their decoding, and the pose decoders.
Prints one JSON object per model and, last, the names of the checks that failed::

    python3 scripts/check_seed_models.py SEED_DIR [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

import numpy as np

# what each model's outputs must be read as: a detector layout (asked for by name where several fit) or a pose form
EXPECT = {
    "yolov8n": ("detect", "yolov8", None),
    "yolov5nu": ("detect", "yolov8", None),
    "yolo11n": ("detect", "yolov8", None),
    "yolov8n-pose": ("pose", "yolov8-pose", None),
    "rtdetr": ("detect", "detr-sigmoid", "detr-sigmoid"),  # RT-DETR's and DETR's outputs look alike: asked by name
    "rfdetr-nano": ("detect", "detr-sigmoid", None),
    "lp-heatmap": ("pose", "heatmaps", None),
    "lp-heatmap-fp16": ("pose", "heatmaps", None),
}
SIZE = {"rfdetr-nano": 384, "lp-heatmap": 256, "lp-heatmap-fp16": 256}


def run_onnx(path: Path, size: int) -> tuple[dict, dict]:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = {}
    for i in session.get_inputs():
        dims = [d if isinstance(d, int) else 2 if k == 0 else size for k, d in enumerate(i.shape)]
        dtype = np.float16 if "float16" in i.type else np.float32
        feed[i.name] = np.random.default_rng(0).random(dims).astype(dtype)
    return feed, dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))


def check(path: Path) -> dict:
    from trtkit import detection
    from trtkit.builder.prepare import prepare
    from trtkit.detection import pose
    from trtkit.model import load_model

    name = path.stem
    kind, expected, head = EXPECT.get(name, ("detect", None, None))
    size = SIZE.get(name, 640)
    report: dict = {"model": name, "failed": []}

    def step(label, fn):
        try:
            report[label] = fn()
        except Exception as exc:
            report[label] = f"ERROR {type(exc).__name__}: {exc}"
            report["failed"].append(label)
            traceback.print_exc(file=sys.stderr)

    feed, outputs = run_onnx(path, size)
    report["ort"] = {n: [list(a.shape), str(a.dtype)] for n, a in outputs.items()}
    declared = load_model(str(path), check=False, external_data=False).proto.graph.output
    specs = {o.name: tuple(d.dim_value or None for d in o.type.tensor_type.shape.dim) for o in declared}
    report["declared"] = {n: ["?" if d is None else d for d in dims] for n, dims in specs.items()}

    def prepared(**options):
        p = prepare(str(path), **options)
        done = [f"{r.rewrite}:{r.status} {r.where}: {r.what}" for r in p.rewrites]
        outs = {o.name: [d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim]
                for o in p.loaded.proto.graph.output}
        return {"rewrites": done, "hazards": [str(h) for h in p.hazards], "outputs": outs}

    step("prepare", prepared)
    step("prepare_uint8_nhwc", lambda: prepared(input_uint8_nhwc=True))
    if expected == "yolov8":
        step("prepare_add_nms", lambda: prepared(nms=detection.NmsOptions()))
    if kind == "detect":
        def layout_declared():
            found = detection.find_layout(specs, head, unknown_ok=True)
            return None if found is None else [found.layout, found.classes]

        def layout_arrays():
            found = detection.find_layout(outputs, head)
            dets = found.decode(outputs, (size, size), conf_threshold=0.0)
            if found.layout != expected:
                raise AssertionError(f"read as {found.layout}, not {expected}")
            return [found.layout, found.classes, [len(d.boxes) for d in dets]]

        step("layout_declared", layout_declared)
        step("layout_arrays", layout_arrays)
        fits = detection.heads.fitting
        step("fitting", lambda: [h.layout + ("" if h.likely else " (unlikely)") for h in fits(outputs)])
    else:
        (out,) = outputs.values()

        def poses():
            if pose.pose_layout(out) != expected:
                raise AssertionError(f"read as {pose.pose_layout(out)}, not {expected}")
            found = pose.decode_poses(out, (size, size), conf_threshold=0.0)
            first = found[0]
            finite = bool(np.isfinite(first.points).all() and np.isfinite(first.confidence).all())
            return {"images": len(found), "points": list(first.points.shape), "finite": finite,
                    "confidence": [float(first.confidence.min()), float(first.confidence.max())]}

        step("pose", poses)
    return report


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", type=Path)
    p.add_argument("--only", action="append")
    args = p.parse_args(argv)
    failed = []
    for path in sorted(args.folder.glob("*.onnx")):
        if args.only and path.stem not in args.only:
            continue
        report = check(path)
        print(json.dumps(report), flush=True)
        failed += [f"{report['model']}:{label}" for label in report["failed"]]
    print("failed:", " ".join(failed) or "none")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
