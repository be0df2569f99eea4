"""Detect objects in a folder of images with a YOLO-style engine (or its ONNX model) and save annotated copies.

    python samples/detection/detect.py model.engine images/ --out annotated/

The engine may return the YOLOv8 head (decoded here with numpy NMS) or, built with ``trtkit build --add-nms``, the
EfficientNMS plugin's ``num_dets, boxes, scores, classes``. An engine built with ``--input-uint8-nhwc`` takes the
letterboxed pixels as they are (uint8 NHWC: the cast, scale and transpose run on the GPU); the sample sees that from
the engine's input dtype. With an engine the letterbox itself runs on the GPU where its kernels load (the decoded
pixels go to the device once; two small kernels resize, pad and convert them into the engine's input, in its
stream): ``--letterbox cpu`` keeps it in numpy, and the sample says which one runs and why. An ``.onnx`` model runs
on the CPU instead (onnxruntime where installed), for a first look without a GPU. Images pillow cannot read are
named and skipped; the count is given at the end. ``--timing`` prints the median per-image pre-processing,
inference and post-processing times (with the GPU letterbox, ``pre`` is the host's part: its kernels run in the
engine's stream and finish within ``infer``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from trtkit.detection import ImageReadError, detections_from_outputs, draw, list_images, open_image
from trtkit.errors import TrtkitError
from trtkit.eval.models import open_model

# the runner replays one CUDA graph per batch size (copies included) and hands back views of its output buffers,
# which the post step reads before the next call
RUNNER_OPTIONS = {"cuda_graph": True, "copy_outputs": False}


class Detector:
    """Letterbox → model → decode → map back, for one batch of pillow images or RGB arrays; times each step."""

    def __init__(self, model, conf: float = 0.25, iou: float = 0.45, max_det: int = 100, letterbox: str = "auto"):
        self.model = model
        # on the GPU where it loads (into the engine's input, in its stream); else one numpy batch array, page-locked
        # by the runner. `letterbox_reason`: why numpy, or None.
        self.letterbox, self.letterbox_reason = model.pick_letterbox(letterbox, reuse=True)
        self.input_name = model.input_name
        self.decode = {"conf_threshold": conf, "iou_threshold": iou, "max_detections": max_det}
        self.times = {"pre": [], "infer": [], "post": []}

    def __call__(self, images):
        t0 = time.perf_counter()
        batch, metas = self.letterbox(images)
        t1 = time.perf_counter()
        outputs = self.model.infer({self.input_name: batch})
        t2 = time.perf_counter()
        dets = [d.mapped(m) for d, m in zip(detections_from_outputs(outputs, **self.decode), metas)]
        t3 = time.perf_counter()
        for key, seconds in (("pre", t1 - t0), ("infer", t2 - t1), ("post", t3 - t2)):
            self.times[key].append(seconds / len(images))
        return dets

    def close(self) -> None:
        self.letterbox.close()


def class_names(path: Path | None, model_path: Path) -> list[str] | None:
    """Names from a text file (one a line) or a COCO file's categories; else ``classes.txt`` beside the model."""
    if path is None:
        path = model_path.parent / "classes.txt"
        if not path.is_file():
            return None
    if path.suffix == ".json":
        return [c["name"] for c in sorted(json.loads(path.read_text())["categories"], key=lambda c: c["id"])]
    return [line.strip() for line in path.read_text().splitlines() if line.strip()]


def batches(files, size: int, skipped: list):
    group = []
    for path in files:
        try:
            group.append((path, open_image(path)))
        except ImageReadError as exc:
            skipped.append(path)
            print(f"skipped {path}: {exc.__cause__ or exc}", file=sys.stderr)
            continue
        if len(group) == size:
            yield group
            group = []
    if group:
        yield group


def run(args) -> int:
    files = [args.images] if args.images.is_file() else list_images(args.images)
    args.out.mkdir(parents=True, exist_ok=True)
    names = class_names(args.names, args.model)
    skipped: list = []
    with open_model(str(args.model), runner_options=RUNNER_OPTIONS if args.cuda_graph else None) as model:
        detector = Detector(model, args.conf, args.iou, args.max_det, args.letterbox)
        print(f"letterbox: {detector.letterbox.where}"
              + (f" ({detector.letterbox_reason})" if detector.letterbox_reason else ""), file=sys.stderr)
        try:
            for group in batches(files, min(args.batch, model.max_batch), skipped):
                for (path, image), det in zip(group, detector([image for _, image in group])):
                    draw(image, det, names).save(args.out / f"{path.stem}.jpg", quality=90)
                    print(f"{path.name}: {len(det)} detection(s)")
        finally:
            detector.close()
    done = len(files) - len(skipped)
    print(f"{done} image(s) annotated in {args.out}" + (f"; {len(skipped)} skipped (unreadable)" if skipped else ""))
    if args.timing and done:
        parts = {k: statistics.median(v) * 1e3 for k, v in detector.times.items()}
        print("per image, median ms: " + ", ".join(f"{k} {v:.3f}" for k, v in parts.items())
              + f", total {sum(parts.values()):.3f}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path, help="engine file (or ONNX model, run on the CPU)")
    parser.add_argument("images", type=Path, help="an image folder or one image")
    parser.add_argument("--out", type=Path, required=True, help="folder for the annotated images")
    parser.add_argument("--conf", type=float, default=0.25, help="score threshold (0.25)")
    parser.add_argument("--iou", type=float, default=0.45, help="NMS IoU threshold (0.45)")
    parser.add_argument("--max-det", type=int, default=100, help="detections per image (100)")
    parser.add_argument("--batch", type=int, default=1, help="images per inference call (1)")
    parser.add_argument("--names", type=Path, help="class names: a text file, one a line, or a COCO JSON file")
    parser.add_argument("--timing", action="store_true", help="print median per-image pre/infer/post times")
    parser.add_argument("--letterbox", choices=("auto", "gpu", "cpu"), default="auto",
                        help="where the letterbox runs: on the GPU where its kernels load (auto), or always (gpu), "
                             "or in numpy (cpu)")
    parser.add_argument("--cuda-graph", action=argparse.BooleanOptionalAction, default=True,
                        help="replay the engine and its copies as one CUDA graph per batch size (default: on)")
    args = parser.parse_args(argv)
    try:
        return run(args)
    except TrtkitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
