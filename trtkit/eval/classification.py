"""``trtkit eval classification``: top-1 / top-5 accuracy on a labelled image folder, the ONNX model as reference.

The folder holds one sub-folder per class (``DIR/<class>/*.jpg``); class indices follow the sorted sub-folder
names, as torchvision's ``ImageFolder`` numbers them. Images are pre-processed with the calibration settings
(:class:`calibrators.preprocess.Preprocess`: resize or letterbox, channel order, scale, mean/std), so a model is
evaluated on the pixels it was calibrated on.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from calibrators.preprocess import Preprocess, load_image, with_model_size
from trtkit.errors import CalibrationError, InputError
from trtkit.eval.models import open_model
from trtkit.images import IMAGE_EXTENSIONS


@dataclass
class ClassificationRow:
    """One model's accuracy (points, 0-100); ``agreement``: top-1 matching the reference row's, where there is one."""

    name: str
    model: str
    top1: float
    top5: float
    seconds: float
    agreement: float | None = None

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "model": self.model,
            "top1": self.top1,
            "top5": self.top5,
            "agreement": self.agreement,
            "seconds": round(self.seconds, 3),
        }


@dataclass
class ClassificationEval:
    rows: list[ClassificationRow]
    images: int
    classes: list[str]
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "images": self.images,
            "classes": self.classes,
            "rows": [r.to_json() for r in self.rows],
            "skipped": [{"file": f, "reason": r} for f, r in self.skipped],
        }


def labelled_images(folder) -> tuple[list[str], list[tuple[Path, int]]]:
    """(class names, [(image, class index)]) of a folder with one sub-folder per class.

    Raises:
        InputError: the folder does not exist, has no class sub-folders, or they hold no image.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"Labelled image folder '{folder}' does not exist or is not a folder.")
    classes = sorted(p.name for p in folder.iterdir() if p.is_dir())
    if not classes:
        raise InputError(f"Labelled image folder '{folder}' has no class sub-folders (expected DIR/<class>/*.jpg).")
    items = [
        (p, i)
        for i, name in enumerate(classes)
        for p in sorted((folder / name).iterdir())
        if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS
    ]
    if not items:
        raise InputError(f"The class sub-folders of '{folder}' hold no image file ({', '.join(IMAGE_EXTENSIONS)}).")
    return classes, items


def topk_hits(logits: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    """Whether each label is among the ``k`` highest scores of its row."""
    k = min(k, logits.shape[1])
    top = np.argpartition(-logits, k - 1, axis=1)[:, :k]
    return (top == labels[:, None]).any(1)


def _batches(items, settings: Preprocess, batch: int, skipped: list):
    xs, ys = [], []
    for path, label in items:
        try:
            xs.append(load_image(path, settings))
        except CalibrationError as exc:
            skipped.append((str(path), str(exc.__cause__ or exc)))
            continue
        ys.append(label)
        if len(xs) == batch:
            yield np.stack(xs), np.array(ys)
            xs, ys = [], []
    if xs:
        yield np.stack(xs), np.array(ys)


def predict_labels(model, items, settings: Preprocess, batch: int, skipped: list) -> tuple[np.ndarray, np.ndarray]:
    """(scores (N, classes), labels (N,)) of the readable images."""
    settings = with_model_size(settings, model.input_shape)
    scores, labels = [], []
    for x, y in _batches(items, settings, min(batch, model.max_batch), skipped):
        out = model.infer({model.input_name: x})
        first = np.asarray(next(iter(out.values())))
        scores.append(first.reshape(first.shape[0], -1))
        labels.append(y)
    if not scores:
        raise InputError(f"None of the {len(items)} images could be read ({len(skipped)} skipped).")
    return np.concatenate(scores), np.concatenate(labels)


def evaluate_classification(
    model,
    images,
    *,
    reference=None,
    preprocess: Preprocess | None = None,
    batch: int = 32,
    runner_options: dict | None = None,
) -> ClassificationEval:
    """Top-1 and top-5 accuracy of ``model`` (and of ``reference``, the ONNX model) on a labelled folder.

    Raises:
        InputError: the folder is unusable, or the model's outputs have fewer scores than there are classes.
    """
    classes, items = labelled_images(images)
    settings = preprocess or Preprocess()
    targets = [("model", model)] + ([("onnx", reference)] if reference is not None else [])
    rows: list[ClassificationRow] = []
    skipped: list[tuple[str, str]] = []
    firsts: list[np.ndarray] = []
    for name, target in targets:
        start = time.perf_counter()
        skipped_here: list = []
        with open_model(target, runner_options=runner_options) as opened:
            scores, labels = predict_labels(opened, items, settings, batch, skipped_here)
            name = "onnx" if opened.kind == "onnx" and name == "model" and reference is None else name
            description = opened.description
        if scores.shape[1] < len(classes):
            raise InputError(
                f"{description} gives {scores.shape[1]} scores per image; the folder has {len(classes)} classes."
            )
        skipped = skipped or skipped_here
        firsts.append(scores.argmax(1))
        rows.append(
            ClassificationRow(
                name,
                description,
                round(100 * float(topk_hits(scores, labels, 1).mean()), 3),
                round(100 * float(topk_hits(scores, labels, 5).mean()), 3),
                time.perf_counter() - start,
            )
        )
    if len(rows) == 2:
        rows[0] = replace(rows[0], agreement=round(100 * float((firsts[0] == firsts[1]).mean()), 3))
    return ClassificationEval(rows, len(items) - len(skipped), classes, skipped)
