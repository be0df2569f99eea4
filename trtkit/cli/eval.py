"""``trtkit eval``: accuracy of an engine or ONNX model on labelled data, the ONNX model as the reference row."""

from __future__ import annotations

HELP = "Measure accuracy: COCO mAP for detectors, top-1/top-5 for classifiers, keypoint deviation for pose models."


def add_arguments(parser) -> None:
    from trtkit.cli import options

    sub = parser.add_subparsers(dest="task", metavar="TASK", required=True)
    det = sub.add_parser("detection", help="COCO mAP@[.5:.95], mAP@.5 and AR@100 (pycocotools) on an image folder",
                         description="COCO mAP@[.5:.95], mAP@.5 and AR@100 (pycocotools) of a YOLO-style detector "
                                     "on an image folder with COCO annotations.")
    det.add_argument("model", help="engine file or ONNX model (an ONNX model is its own reference row)")
    det.add_argument("--images", required=True, metavar="DIR", help="folder of the annotated images")
    det.add_argument("--coco", required=True, metavar="JSON", help="COCO annotations of those images")
    det.add_argument("--reference", metavar="ONNX", help="the ONNX model, scored as the reference row")
    det.add_argument("--batch", type=int, default=8, help="images per inference call (default 8)")
    det.add_argument("--conf", type=float, default=0.001, help="score threshold of the numpy decode (0.001)")
    det.add_argument("--iou", type=float, default=0.65, help="NMS IoU threshold of the numpy decode (0.65)")
    det.add_argument("--max-det", type=int, default=100, help="detections kept per image (100)")
    det.add_argument("--min-map", type=float, metavar="POINTS",
                     help="exit 1 if any row's mAP@[.5:.95] is below this (in points, 0-100)")
    options.add_json_option(det)


def run(args, console) -> int:
    return run_detection(args, console)


def run_detection(args, console, runner_options: dict | None = None) -> int:
    """Evaluate and render; ``runner_options`` go to TrtRunner (tests pass fakes)."""
    from trtkit.cli import render
    from trtkit.eval.detection import DecodeSettings, below_minimum, evaluate_detection, skipped_summary

    decode = DecodeSettings(args.conf, args.iou, args.max_det)
    with console.status("evaluating") as status:
        result = evaluate_detection(args.model, args.images, args.coco, reference=args.reference, batch=args.batch,
                                    decode=decode, runner_options=runner_options,
                                    on_progress=lambda text: status.update(f"evaluating {text}"))
    failing = below_minimum(result, args.min_map)
    if args.json != "-":
        console.print(detection_table(result))
        note = skipped_summary(result.skipped)
        if note:
            console.print(f"[yellow]{note}[/yellow]", markup=True, highlight=False)
        if failing:
            console.print(f"[red]FAIL: mAP@[.5:.95] below {args.min_map} for {', '.join(failing)}[/red]",
                          markup=True, highlight=False)
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
        rows.append((r.name, r.model, m.map, m.map50, m.map75, m.ar100, delta, m.detections))
    title = f"detection: {result.images} images (COCO metrics in points)"
    return render.table(title, ["row", "model", "mAP@[.5:.95]", "mAP@.5", "mAP@.75", "AR@100", "Δ vs onnx",
                                "detections"], rows)
