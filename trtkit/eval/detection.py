"""``trtkit eval detection``: COCO box metrics of an engine or ONNX model on an image folder, ONNX as the reference.

Each image is letterboxed to the model's input size, the outputs are decoded in their layout
(:mod:`trtkit.detection.heads`: YOLO heads through numpy NMS, the DETR family's top scores, the ``EfficientNMS_TRT``
plugin's outputs), boxes are mapped back to the original image and scored with
pycocotools. Images pillow cannot read are skipped, named, and counted in the result.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from trtkit.detection import Detections, ImageReadError, Letterbox, find_layout, list_images, open_image
from trtkit.errors import InputError
from trtkit.eval.coco import CocoMetrics, category_ids, evaluate_coco, load_coco, to_coco_results
from trtkit.eval.models import open_model


@dataclass(frozen=True)
class DecodeSettings:
    """How head outputs become detections for scoring (COCO practice: a low threshold, up to 100 per image)."""

    conf_threshold: float = 0.001
    iou_threshold: float = 0.65
    max_detections: int = 100

    def options(self) -> dict:
        return asdict(self)


@dataclass
class EvalRow:
    """One model's result: its name (``onnx`` for the reference), what it is, and its metrics."""

    name: str
    model: str
    metrics: CocoMetrics
    seconds: float

    def to_json(self) -> dict:
        return {"name": self.name, "model": self.model, "seconds": round(self.seconds, 3), **self.metrics.to_json()}

    @classmethod
    def from_json(cls, data: dict) -> EvalRow:
        return cls(data["name"], data["model"], CocoMetrics.from_json(data), data["seconds"])


@dataclass
class DetectionEval:
    """Result of :func:`evaluate_detection`: one row per model, the images scored and those skipped."""

    rows: list[EvalRow]
    images: int
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def row(self, name: str) -> EvalRow:
        return next(r for r in self.rows if r.name == name)

    def to_json(self) -> dict:
        return {
            "images": self.images,
            "skipped": [{"file": f, "reason": r} for f, r in self.skipped],
            "rows": [r.to_json() for r in self.rows],
        }

    @classmethod
    def from_json(cls, data: dict) -> DetectionEval:
        return cls(
            [EvalRow.from_json(r) for r in data["rows"]],
            data["images"],
            [(s["file"], s["reason"]) for s in data.get("skipped", [])],
        )


def match_images(coco: dict, files: list[Path]) -> list[tuple[Path, int]]:
    """Pair each image file with its COCO image id (by file name).

    Raises:
        InputError: files without an annotation entry, or annotated images missing from the folder (a few named).
    """
    by_name = {Path(im["file_name"]).name: int(im["id"]) for im in coco["images"]}
    names = {f.name for f in files}
    unknown = sorted(names - by_name.keys())
    missing = sorted(by_name.keys() - names)
    for items, what in (
        (unknown, "images in the folder have no entry in the COCO file"),
        (missing, "images of the COCO file are not in the folder"),
    ):
        if items:
            few = ", ".join(items[:5]) + (", ..." if len(items) > 5 else "")
            raise InputError(f"{len(items)} {what} (the file names must match 'file_name'): {few}")
    return [(f, by_name[f.name]) for f in files]


def read_images(pairs, batch: int, skipped: list):
    """Batches of ``(pillow images, image ids)``; unreadable files go to ``skipped`` as (file, reason)."""
    images, ids = [], []
    for path, image_id in pairs:
        try:
            images.append(open_image(path))
        except ImageReadError as exc:
            skipped.append((str(path), str(exc.__cause__ or exc)))
            continue
        ids.append(image_id)
        if len(images) == batch:
            yield images, ids
            images, ids = [], []
    if images:
        yield images, ids


def no_object_slot(layout, categories) -> int | None:
    """The logits' slot past the classes that RF-DETR exports (its "no object", never trained positive), left out
    of the scores: the last slot where a sigmoid DETR head has one more class than the annotations' categories."""
    return len(categories) if layout.layout == "detr-sigmoid" and layout.classes == len(categories) + 1 else None


def predict_coco(
    infer: Callable,
    input_name: str,
    size,
    pairs,
    categories,
    *,
    batch: int = 8,
    decode: DecodeSettings | None = None,
    skipped: list | None = None,
    letterbox: Letterbox | None = None,
    head: str | None = None,
    outputs: dict | None = None,
) -> tuple[list, list]:
    """Run ``infer`` over the images; return (COCO result entries, the image ids read). ``letterbox`` makes the
    batches (default: float NCHW batches of ``size``); ``head`` names the output layout (default: the one the
    ``outputs``, name → shape, fit, checked before any image is read; where they are unknown or have unknown dims,
    the first batch's outputs).

    Raises:
        LayoutError: the outputs fit no layout, several, or not ``head``.
    """
    decode = decode or DecodeSettings()
    letterbox = letterbox or Letterbox(size)
    layout = None if outputs is None else find_layout(outputs, head, unknown_ok=True)
    results, read = [], []
    skipped = [] if skipped is None else skipped
    for images, ids in read_images(pairs, batch, skipped):
        tensor, metas = letterbox(images)
        found = infer({input_name: tensor})
        layout = layout or find_layout(found, head)
        slot = no_object_slot(layout, categories)
        for image_id, det, meta in zip(ids, layout.decode(found, size, **decode.options()), metas):
            if slot is not None:
                keep = det.classes != slot
                det = Detections(det.boxes[keep], det.scores[keep], det.classes[keep])
            results += to_coco_results(image_id, det.mapped(meta), categories)
        read += ids
    return results, read


def evaluate_detection(
    model,
    images,
    coco,
    *,
    reference=None,
    batch: int = 8,
    decode: DecodeSettings | None = None,
    on_progress: Callable[[str], None] | None = None,
    runner_options: dict | None = None,
    head: str | None = None,
    normalize: dict | None = None,
) -> DetectionEval:
    """COCO mAP@[.5:.95], mAP@.5 and AR@100 of ``model`` (and of ``reference``, the ONNX model) on a folder.

    Args:
        model: an engine file, an ONNX file, or a :class:`~trtkit.eval.models.Model`.
        images: the image folder.
        coco: the COCO annotation file (or its loaded dict) of those images.
        reference: the ONNX model scored as the ``onnx`` row (run with onnxruntime where installed); ``None``
            for none. When ``model`` is itself an ONNX file it is the reference row.
        batch: images per inference call (capped by an engine's profile).
        decode: thresholds of the numpy decode (engines with the NMS plugin use their own).
        runner_options: extra ``TrtRunner`` keyword arguments (tests pass fakes).
        head: the output layout (a key of :data:`trtkit.detection.LAYOUTS`); ``None``: the one the outputs fit.
        normalize: ``{"mean", "std"}`` of the letterbox, after its 1/255 (``None``: 0..1, as YOLO models take).

    Raises:
        InputError: the folder or annotation file is unusable, or their images do not match.
        LayoutError: a model's outputs fit no layout, several, or not ``head`` (before any image is read).
        DependencyError: pycocotools (or TensorRT for an engine) is missing.
    """
    coco = coco if isinstance(coco, dict) else load_coco(coco)
    pairs = match_images(coco, list_images(images))
    categories = category_ids(coco)
    rows: list[EvalRow] = []
    skipped: list[tuple[str, str]] = []
    targets = [("model", model)]
    if reference is not None and str(reference) != str(model):
        targets.append(("onnx", reference))
    for name, target in targets:
        start = time.perf_counter()
        with open_model(target, runner_options=runner_options) as opened:
            row_name = "onnx" if opened.kind == "onnx" and name == "model" else name
            if on_progress:
                on_progress(f"{row_name}: {opened.description}")
            skipped_here: list = []
            results, read = predict_coco(
                opened.infer,
                opened.input_name,
                opened.input_size,
                pairs,
                categories,
                batch=min(batch, opened.max_batch),
                decode=decode,
                skipped=skipped_here,
                letterbox=opened.letterbox(**(normalize or {})),
                head=head,
                outputs=opened.outputs,
            )
            if not skipped:
                skipped = skipped_here
        if not read:
            raise InputError(f"No image of '{images}' could be read ({len(skipped)} skipped).")
        metrics = evaluate_coco(coco, results, read)
        rows.append(EvalRow(row_name, opened.description, metrics, time.perf_counter() - start))
    return DetectionEval(rows, len(pairs) - len(skipped), skipped)


def below_minimum(result: DetectionEval, min_map: float | None) -> list[str]:
    """Names of the rows whose mAP@[.5:.95] (points) is below ``min_map``."""
    if min_map is None:
        return []
    return [r.name for r in result.rows if r.metrics.map < min_map]


def skipped_summary(skipped: list[tuple[str, str]]) -> str | None:
    if not skipped:
        return None
    names = ", ".join(Path(f).name for f, _ in skipped[:5]) + (", ..." if len(skipped) > 5 else "")
    return f"{len(skipped)} image(s) could not be read and were skipped: {names}"
