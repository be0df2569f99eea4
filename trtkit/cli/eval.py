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
    det.add_argument("--coco", metavar="JSON", help="COCO annotations of those images (for --metric coco)")
    det.add_argument(
        "--metric",
        choices=("coco", "keypoint-px"),
        default="coco",
        help="coco (default): mAP via pycocotools; keypoint-px: for pose models, how far the engine's "
        "keypoints (heatmap peaks or YOLOv8-pose keypoints) are from --reference's, in pixels",
    )
    det.add_argument("--max-px", type=float, metavar="PX", help="--metric keypoint-px: exit 1 above this deviation")
    det.add_argument("--reference", metavar="ONNX", help="the ONNX model, scored as the reference row")
    det.add_argument("--batch", type=int, default=8, help="images per inference call (default 8)")
    det.add_argument("--conf", type=float, default=0.001, help="score threshold of the numpy decode (0.001)")
    det.add_argument("--iou", type=float, default=0.65, help="NMS IoU threshold of the numpy decode (0.65)")
    det.add_argument("--max-det", type=int, default=100, help="detections kept per image (100)")
    options.add_head_option(det)
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
    cls.add_argument(
        "--preprocess",
        metavar="SPEC",
        default="",
        help="as --calib-preprocess: resize=stretch|letterbox,color=RGB|BGR,scale=X,mean=a/b/c,"
        "std=a/b/c (default: stretch, RGB, 0..1)",
    )
    cls.add_argument("--batch", type=int, default=32, help="images per inference call (default 32)")
    cls.add_argument("--min-top1", type=float, metavar="POINTS", help="exit 1 if any row's top-1 is below this")
    options.add_json_option(cls)


def run(args, console) -> int:
    if args.task == "classification":
        return run_classification(args, console)
    if args.metric == "keypoint-px":
        return run_keypoints(args, console)
    return run_detection(args, console)


def run_detection(args, console, runner_options: dict | None = None) -> int:
    """Evaluate and render; ``runner_options`` go to TrtRunner (tests pass fakes)."""
    from trtkit.cli import render
    from trtkit.errors import InputError
    from trtkit.eval.detection import DecodeSettings, below_minimum, evaluate_detection, skipped_summary

    if not args.coco:
        raise InputError("--metric coco needs the annotations: --coco val.json.")
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
        )
    failing = below_minimum(result, args.min_map)
    if args.json != "-":
        console.print(detection_table(result))
        _notes(
            console,
            skipped_summary(result.skipped),
            failing and f"mAP@[.5:.95] below {args.min_map} for {', '.join(failing)}",
        )
    if args.json:
        render.write_json(args.json, dict(result.to_json(), min_map=args.min_map, passed=not failing))
    return 1 if failing else 0


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
    from calibrators.preprocess import Preprocess, parse_preprocess
    from trtkit.cli import render
    from trtkit.eval.classification import evaluate_classification
    from trtkit.eval.detection import skipped_summary

    with console.status("evaluating"):
        result = evaluate_classification(
            args.model,
            args.images,
            reference=args.reference,
            batch=args.batch,
            preprocess=Preprocess(**parse_preprocess(args.preprocess, field="preprocess")),
            runner_options=runner_options,
        )
    failing = [r.name for r in result.rows if args.min_top1 is not None and r.top1 < args.min_top1]
    if args.json != "-":
        rows = [(r.name, _short(r.model), r.top1, r.top5, r.agreement) for r in result.rows]
        console.print(
            render.table(
                f"classification: {result.images} images, {len(result.classes)} classes (accuracy in points)",
                ["row", "model", "top-1", "top-5", "top-1 agreement"],
                rows,
            )
        )
        _notes(
            console,
            skipped_summary(result.skipped),
            failing and f"top-1 below {args.min_top1} for {', '.join(failing)}",
        )
    if args.json:
        render.write_json(args.json, dict(result.to_json(), min_top1=args.min_top1, passed=not failing))
    return 1 if failing else 0


def run_keypoints(args, console, runner_options: dict | None = None) -> int:
    from trtkit.cli import render
    from trtkit.eval.keypoints import evaluate_keypoints

    with console.status("comparing keypoints"):
        result = evaluate_keypoints(
            args.model, args.images, args.reference, batch=args.batch, runner_options=runner_options
        )
    failing = args.max_px is not None and result.max_px > args.max_px
    if args.json != "-":
        console.print(
            render.table(
                f"keypoints vs {args.reference} ({result.layout}, input pixels)",
                ["images", "keypoints", "max px", "mean px", "p99 px"],
                [(result.images, result.keypoints, result.max_px, result.mean_px, result.p99_px)],
            )
        )
        _notes(console, None, failing and f"max deviation {result.max_px} px above {args.max_px}")
    if args.json:
        render.write_json(
            args.json, dict(result.to_json(), metric="keypoint-px", max_allowed_px=args.max_px, passed=not failing)
        )
    return 1 if failing else 0


def _short(description: str) -> str:
    """A model's file name (and backend) for a table cell; the JSON keeps the whole path."""
    import os

    return os.path.basename(description)


def _notes(console, skipped: str | None, failure) -> None:
    if skipped:
        console.print(f"[yellow]{skipped}[/yellow]", markup=True, highlight=False)
    if failure:
        console.print(f"[red]FAIL: {failure}[/red]", markup=True, highlight=False)
