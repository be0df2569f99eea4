"""``trtkit eval``: accuracy of an engine or ONNX model on labelled data, the ONNX model as the reference row."""

from __future__ import annotations

HELP = "Measure accuracy: COCO mAP for detectors, top-1/top-5 for classifiers, keypoint deviation (pose)."


def add_arguments(parser) -> None:
    from trtkit.cli import options

    sub = parser.add_subparsers(dest="task", metavar="TASK", required=True)
    det = sub.add_parser(
        "detection",
        help="COCO mAP@[.5:.95], mAP@.5 and AR@100 (pycocotools) on an image folder",
        description="COCO mAP@[.5:.95], mAP@.5 and AR@100 (pycocotools) of a detector (YOLO heads, the DETR "
        "family, EfficientNMS outputs) on an image folder with COCO annotations.",
    )
    det.add_argument("model", help="engine file or ONNX model (an ONNX model is its own reference row)")
    det.add_argument("--images", required=True, metavar="DIR", help="folder of the annotated images")
    det.add_argument("--coco", metavar="JSON", help="COCO annotations of those images")
    det.add_argument("--reference", metavar="ONNX", help="the ONNX model, scored as the reference row")
    det.add_argument("--batch", type=int, default=8, help="images per inference call (default 8)")
    det.add_argument("--conf", type=float, default=0.001, help="score threshold of the numpy decode (0.001)")
    det.add_argument("--iou", type=float, default=0.65, help="NMS IoU threshold of the numpy decode (0.65)")
    det.add_argument("--max-det", type=int, default=100, help="detections kept per image (100)")
    options.add_head_option(det)
    options.add_normalize_option(det)
    det.add_argument(
        "--min-map",
        type=float,
        metavar="POINTS",
        help="exit 1 if any row's mAP@[.5:.95] is below this (in points, 0-100)",
    )
    options.add_json_option(det)
    cls = sub.add_parser(
        "classification",
        help="top-1 / top-5 accuracy on a labelled folder (DIR/<class>/*.jpg)",
        description="Top-1 / top-5 accuracy of a classifier on a folder with one sub-folder per "
        "class (class indices follow the sorted names).",
    )
    cls.add_argument("model", help="engine file or ONNX model")
    cls.add_argument("--images", required=True, metavar="DIR", help="DIR/<class>/*.jpg")
    cls.add_argument("--reference", metavar="ONNX", help="the ONNX model, scored as the reference row")
    _add_preprocess(cls, "stretch, RGB, 0..1")
    cls.add_argument("--batch", type=int, default=32, help="images per inference call (default 32)")
    cls.add_argument("--min-top1", type=float, metavar="POINTS", help="exit 1 if any row's top-1 is below this")
    options.add_json_option(cls)
    _add_keypoint_arguments(sub, options)


def _add_preprocess(parser, default: str) -> None:
    from trtkit.cli import options

    parser.add_argument(
        "--preprocess",
        metavar="SPEC",
        default="",
        help=f"as --calib-preprocess: resize=stretch|letterbox,color=RGB|BGR,scale=X,mean=a/b/c,std=a/b/c "
        f"or normalize=imagenet (default: {default})",
    )
    options.add_normalize_option(parser)


def _preprocess(args, **defaults):
    """The ``Preprocess`` of ``--preprocess`` (over ``defaults``), its mean/std replaced by ``--normalize``'s."""
    from calibrators.preprocess import Preprocess, parse_normalize, parse_preprocess

    spec = parse_preprocess(args.preprocess, field="preprocess")
    return Preprocess(**(defaults | spec | parse_normalize(args.normalize)))


def _add_keypoint_arguments(sub, options) -> None:
    kp = sub.add_parser(
        "keypoints",
        help="keypoint deviation of a pose model from its reference, in pixels of the frame",
        description="How far a pose model's keypoints (heatmaps, decoded below the cell, or a YOLOv8-pose head) are "
        "from the reference's on real images or video frames: max, mean and p99 in frame pixels, over all keypoints "
        "and over those the reference is confident of.",
    )
    kp.add_argument("model", help="engine file or ONNX model")
    source = kp.add_mutually_exclusive_group(required=True)
    source.add_argument("--images", metavar="DIR", help="a folder of images")
    source.add_argument("--video", metavar="FILE", help="a video file (frames decoded by PyAV)")
    kp.add_argument("--reference", required=True, metavar="MODEL", help="the ONNX model or an FP32 engine")
    kp.add_argument(
        "--frames",
        type=options.positive_int,
        metavar="N",
        help="compare on N frames (or images) spread evenly from the first to the last (default: every image; "
        "100 frames of a video, or all it has)",
    )
    kp.add_argument(
        "--min-confidence",
        type=float,
        default=0.5,
        metavar="P",
        help="a keypoint is confident where the reference's confidence is at least P (default 0.5): for heatmaps "
        "the share of the heatmap's mass near its peak, for YOLOv8-pose the keypoint's visibility",
    )
    kp.add_argument(
        "--peak-cell", action="store_true", help="read heatmaps at the peak cell, without the sub-pixel refinement"
    )
    _add_preprocess(kp, "letterbox, RGB, 0..1; Lightning Pose models: resize=stretch,normalize=imagenet")
    kp.add_argument("--batch", type=int, default=8, help="frames per inference call (default 8)")
    kp.add_argument("--max-px", type=float, metavar="PX", help="exit 1 if a confident keypoint deviates more")
    options.add_json_option(kp)


def run(args, console) -> int:
    if args.task == "classification":
        return run_classification(args, console)
    if args.task == "keypoints":
        return run_keypoints(args, console)
    return run_detection(args, console)


def run_detection(args, console, runner_options: dict | None = None) -> int:
    """Evaluate and render; ``runner_options`` go to TrtRunner (tests pass fakes)."""
    from calibrators.preprocess import parse_normalize
    from trtkit.errors import InputError
    from trtkit.eval.detection import DecodeSettings, below_minimum, evaluate_detection

    if not args.coco:
        raise InputError("eval detection needs the annotations: --coco val.json.")
    _check_task(args, "detect")
    decode = DecodeSettings(args.conf, args.iou, args.max_det)
    with console.status("evaluating") as status:
        result = evaluate_detection(
            args.model,
            args.images,
            args.coco,
            reference=args.reference,
            batch=args.batch,
            decode=decode,
            runner_options=runner_options,
            on_progress=lambda text: status.update(f"evaluating {text}"),
            head=args.head,
            normalize=parse_normalize(args.normalize),
        )
    failing = below_minimum(result, args.min_map)
    failure = failing and f"mAP@[.5:.95] below {args.min_map} for {', '.join(failing)}"
    return _report(args, console, detection_table(result), result, failure, min_map=args.min_map)


def detection_table(result):
    from trtkit.cli import render

    base = result.rows[-1].metrics.map if result.rows[-1].name == "onnx" else None
    rows = []
    for r in result.rows:
        m = r.metrics
        delta = None if base is None or r.name == "onnx" else round(m.map - base, 3)
        rows.append((r.name, _short(r.model), m.map, m.map50, m.map75, m.ar100, delta, m.detections))
    title = f"detection: {result.images} images (COCO metrics in points)"
    return render.table(
        title, ["row", "model", "mAP@[.5:.95]", "mAP@.5", "mAP@.75", "AR@100", "Δ vs onnx", "detections"], rows
    )


def run_classification(args, console, runner_options: dict | None = None) -> int:
    from trtkit.cli import render
    from trtkit.eval.classification import evaluate_classification

    with console.status("evaluating"):
        result = evaluate_classification(
            args.model,
            args.images,
            reference=args.reference,
            batch=args.batch,
            preprocess=_preprocess(args),
            runner_options=runner_options,
        )
    failing = [r.name for r in result.rows if args.min_top1 is not None and r.top1 < args.min_top1]
    table = render.table(
        f"classification: {result.images} images, {len(result.classes)} classes (accuracy in points)",
        ["row", "model", "top-1", "top-5", "top-1 agreement"],
        [(r.name, _short(r.model), r.top1, r.top5, r.agreement) for r in result.rows],
    )
    failure = failing and f"top-1 below {args.min_top1} for {', '.join(failing)}"
    return _report(args, console, table, result, failure, min_top1=args.min_top1)


def run_keypoints(args, console, runner_options: dict | None = None) -> int:
    from trtkit.cli import render
    from trtkit.eval.keypoints import evaluate_keypoints

    _check_task(args, "pose")
    preprocess = _preprocess(args, resize="letterbox")
    with console.status("comparing keypoints"):
        result = evaluate_keypoints(
            args.model,
            args.reference,
            images=args.images,
            video=args.video,
            frames=args.frames,
            preprocess=preprocess,
            min_confidence=args.min_confidence,
            refine=not args.peak_cell,
            batch=args.batch,
            runner_options=runner_options,
        )
    worst = result.confident.max_px
    failing = args.max_px is not None and (worst is None or worst > args.max_px)
    rows = [
        (name, d.keypoints, d.max_px, d.mean_px, d.p99_px)
        for name, d in (("all", result.all), (f"confidence >= {args.min_confidence}", result.confident))
    ]
    title = f"keypoints vs {_short(args.reference)}: {result.images} frames, {result.layout}, {result.decoding}"
    table = render.table(title + " (frame pixels)", ["keypoints", "n", "max px", "mean px", "p99 px"], rows)
    reason = f"max deviation {worst} px above {args.max_px}" if worst is not None else "no confident keypoint"
    return _report(args, console, table, result, failing and reason, max_allowed_px=args.max_px)


def _check_task(args, task: str) -> None:
    """Refuse a model (or reference) whose ultralytics metadata names another task (a pose head reads as boxes)."""
    import os

    from trtkit.detection.names import check_task, model_metadata

    for model in (args.model, args.reference):
        if model and os.path.isfile(model):
            check_task(
                model_metadata(model), task, {"detect": "eval detection", "pose": "eval keypoints"}, f"'{model}'"
            )


def _short(description: str) -> str:
    """A model's file name (and backend) for a table cell; the JSON keeps the whole path."""
    import os

    return os.path.basename(description)


def _report(args, console, table, result, failure, **limits) -> int:
    """Print ``table``, the skipped files and ``failure`` (unless the JSON goes to stdout), write ``--json``; the
    exit code: 1 on a failure."""
    from trtkit.cli import render
    from trtkit.eval.detection import skipped_summary

    if args.json != "-":
        console.print(table)
        if skipped := skipped_summary(result.skipped):
            console.print(f"[yellow]{skipped}[/yellow]", markup=True, highlight=False)
        if failure:
            console.print(f"[red]FAIL: {failure}[/red]", markup=True, highlight=False)
    if args.json:
        render.write_json(args.json, dict(result.to_json(), **limits, passed=not failure))
    return 1 if failure else 0
