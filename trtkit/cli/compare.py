"""``trtkit compare``: one ONNX model in several precisions and batch sizes, side by side in one table."""

from __future__ import annotations

import contextlib
import shlex
import time

from trtkit.cli import options

HELP = (
    "Compare precisions and batch sizes of one ONNX model: latency, images/s, memory and accuracy in one table "
    "(JSON, Markdown, a plot)."
)
TASKS = ("classification", "detection", "keypoints")
# evaluation options (all None when not given) and the tasks each applies to
_EVAL_OPTIONS: dict[str, tuple] = {flag: TASKS for flag in ("--images", "--eval-batch", "--max-drop")}
_EVAL_OPTIONS.update(
    {"--preprocess": ("classification",), **dict.fromkeys(("--coco", "--conf", "--iou", "--max-det"), ("detection",))}
)


def add_arguments(parser) -> None:
    parser.add_argument("model", help="the ONNX model")
    g = parser.add_argument_group("what to compare")
    g.add_argument(
        "--precisions",
        type=lambda text: tuple(p.strip().lower() for p in text.split(",") if p.strip()),
        default=("fp32", "fp16", "int8"),
        metavar="LIST",
        help="precisions to build, comma-separated: fp32, fp16, bf16, int8 (default fp32,fp16,int8); one this GPU or "
        "TensorRT lacks is a row saying why",
    )
    g.add_argument(
        "--batches",
        type=options.batch_sizes,
        default=(1, 4, 8),
        metavar="LIST",
        help="batch sizes to measure, e.g. 1,4,8 or 1-8 (default 1,4,8); the engine's profile runs from 1 to the "
        "largest, its opt",
    )
    g.add_argument("--baseline", metavar="PRECISION", help="the precision speed-ups are over (default fp32)")
    g.add_argument(
        "--static-per-batch",
        action="store_true",
        help="also build one engine per batch size beside the dynamic-profile engine (what one profile costs)",
    )
    m = parser.add_argument_group("measurement (each engine, batch size and mode, in every round)")
    m.add_argument("--rounds", type=int, default=3, metavar="N", help="rounds, the first engine rotating (default 3)")
    m.add_argument("--warmup-ms", type=float, default=100.0, metavar="MS", help="warm-up time (default 100)")
    m.add_argument("--duration-s", type=float, default=1.0, metavar="S", help="measuring time (default 1)")
    m.add_argument("--iterations", type=int, metavar="N", help="measure exactly N queries instead")
    e = parser.add_argument_group("accuracy (as trtkit eval; the ONNX model is the reference row)")
    e.add_argument("--eval", choices=TASKS, help="score every engine: top-1, COCO mAP or keypoint deviation")
    e.add_argument("--images", metavar="DIR", help="the labelled images (classification: DIR/<class>/*.jpg)")
    e.add_argument("--coco", metavar="JSON", help="--eval detection: the COCO annotations of --images")
    e.add_argument("--preprocess", metavar="SPEC", help="--eval classification: as --calib-preprocess")
    e.add_argument("--eval-batch", type=int, metavar="N", help="images per inference call (default 8)")
    e.add_argument("--conf", type=float, help="--eval detection: score threshold of the decode (0.001)")
    e.add_argument("--iou", type=float, help="--eval detection: NMS IoU threshold of the decode (0.65)")
    e.add_argument("--max-det", type=int, help="--eval detection: detections kept per image (100)")
    e.add_argument(
        "--max-drop",
        type=float,
        metavar="X",
        help="mark a row more than X points of mAP@[.5:.95] or top-1 below the ONNX model, or more than X pixels "
        "of keypoint deviation from it (default 1)",
    )
    options.add_build_options(parser, shapes=False, precision_flags=False)
    c = parser.add_argument_group("engines")
    options.add_cache_dir_option(c)
    options.add_plugin_option(c)
    options.add_json_option(parser)
    parser.add_argument("--markdown", metavar="PATH", help="also write the table as Markdown")
    parser.add_argument("--plot", metavar="PATH", help="also draw it as a PNG (needs matplotlib: trtkit[plot])")


def run(args, console) -> int:
    from dataclasses import replace
    from pathlib import Path

    from trtkit._atomic import write_text_atomic
    from trtkit.cli.render import write_json
    from trtkit.compare import CompareSettings, compare, render, save_plot, to_markdown
    from trtkit.compare.report import check_plot
    from trtkit.errors import UsageError

    if Path(args.model).suffix.lower() != ".onnx":
        raise UsageError(f"compare builds its engines from an ONNX model; '{args.model}' is not a .onnx file")
    evaluation = _eval_settings(args)
    if args.plot:
        check_plot()
    options.check_files(args, {"markdown": args.markdown, "plot": args.plot}, {"model": args.model})
    # the precision that allows the most options stands for all of them while the options are read
    args.precision = next((p for p in ("int8", "fp16") if p in args.precisions), "fp32")
    config = options.config_from_args(args)
    settings = CompareSettings(
        precisions=args.precisions,
        batches=args.batches,
        build=replace(config, precision="fp32", calibration=None),
        calibration=config.calibration,
        baseline=args.baseline,
        static_per_batch=args.static_per_batch,
        rounds=args.rounds,
        warmup_ms=args.warmup_ms,
        duration_s=args.duration_s,
        iterations=args.iterations,
        eval=evaluation,
        cache_dir=args.cache_dir,
        isolate=args.isolate,
    )
    options.load_plugin_libs(args)
    with _progress(console) as on_progress:
        result = compare(args.model, settings, on_progress=on_progress)
    if args.json != "-":
        render(result, console)
        built = sum(1 for e in result.engines if e["engine"] and not e["cached"])
        cached = sum(1 for e in result.engines if e["cached"])
        console.print(f"engines: {built} built, {cached} from the cache", highlight=False)
    if args.json:  # when and how the table was made travel with it
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        stamp = {"date": now, "command": shlex.join(["trtkit", *args.argv])}
        write_json(args.json, {**result.to_json(), **stamp})
    if args.markdown:
        write_text_atomic(Path(args.markdown), to_markdown(result))
    if args.plot:
        save_plot(result, args.plot)
    return 0


def _eval_settings(args):
    """The evaluation asked for; options that would do nothing without it (or for another task) are refused."""
    from trtkit.compare import EvalSettings

    if args.eval is None:
        options.refuse_unused(args, "--eval", list(_EVAL_OPTIONS))
        return None
    for tasks in set(_EVAL_OPTIONS.values()) - {TASKS}:
        if args.eval not in tasks:
            options.refuse_unused(
                args, f"--eval {' or '.join(tasks)}", [f for f, t in _EVAL_OPTIONS.items() if t == tasks]
            )
    decode = preprocess = None
    if args.eval == "detection":
        from trtkit.eval.detection import DecodeSettings

        given = {"conf_threshold": args.conf, "iou_threshold": args.iou, "max_detections": args.max_det}
        decode = DecodeSettings(**{k: v for k, v in given.items() if v is not None})
    if args.eval == "classification":
        from calibrators.preprocess import Preprocess, parse_preprocess

        preprocess = Preprocess(**parse_preprocess(args.preprocess or "", field="preprocess"))
    given = {"batch": args.eval_batch, "max_drop": args.max_drop}
    return EvalSettings(
        args.eval, args.images, args.coco, preprocess, decode, **{k: v for k, v in given.items() if v is not None}
    )


@contextlib.contextmanager
def _progress(console):
    """One rich progress view over the job: a bar per stage (build, measure, eval), the step in its description."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    tasks: dict = {}
    with Progress(*columns, TimeRemainingColumn(), console=console) as view:

        def update(step) -> None:
            if step.stage not in tasks:
                tasks[step.stage] = view.add_task(step.stage, total=step.total)
            text = f"{step.stage}: {step.text}" if step.text else step.stage
            view.update(tasks[step.stage], completed=step.done, total=step.total, description=text)

        yield update
