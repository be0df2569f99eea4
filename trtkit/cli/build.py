"""``trtkit build``: ONNX model → engine file + manifest (+ timing cache)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trtkit.cli import check_render, options, render
from trtkit.manifest import BuildInfo, Manifest

HELP = "Build a TensorRT engine from an ONNX model (profiles, precision, timing cache, manifest)."


def add_arguments(parser) -> None:
    parser.add_argument("model", help="ONNX model")
    parser.add_argument("-o", "--output", help="engine file to write (default: MODEL with .engine)")
    options.add_build_options(parser)
    add_nms_options(parser)
    check_render.add_preflight_options(parser)
    options.add_json_option(parser)


def default_output(model: str) -> Path:
    return Path(model).with_suffix(".engine")


def run(args, console) -> int:
    from trtkit.builder.api import build

    config = options.config_from_args(args)
    output = Path(args.output) if args.output else default_output(args.model)
    with BuildProgress(console, Path(args.model).name) as progress:
        progress.phase("pre-flight (constant folding, op check)")
        model, notes = check_render.prepare_for_build(args, console)
        model = with_nms(model, args, notes)
        result = build(model, config, output=output, isolate=args.isolate,
                       on_phase=progress.phase, on_log=progress.log if args.verbose else None,
                       log_severity="INFO" if args.verbose else "WARNING")
    console.print(summary_table(result.manifest, output, notes))
    if args.json:
        render.write_json(args.json, dict(result.manifest.to_json(), engine_file=str(output)))
    return 0


def add_nms_options(parser) -> None:
    g = parser.add_argument_group("detection post-processing")
    g.add_argument("--add-nms", action="store_true",
                   help="append TensorRT's EfficientNMS_TRT plugin to a YOLOv8-style head (N, 4 + classes, anchors): "
                        "the engine returns num_dets, boxes, scores, classes")
    g.add_argument("--nms-score", type=float, default=0.25, metavar="X", help="--add-nms score threshold (0.25)")
    g.add_argument("--nms-iou", type=float, default=0.45, metavar="X", help="--add-nms IoU threshold (0.45)")
    g.add_argument("--nms-max-det", type=int, default=100, metavar="N", help="--add-nms detections per image (100)")


def with_nms(model, args, notes: dict):
    """``model`` with the EfficientNMS plugin appended when ``--add-nms`` asks for it."""
    if not getattr(args, "add_nms", False):
        return model
    from trtkit.detection.nms_plugin import NmsOptions, add_nms

    options = NmsOptions(args.nms_score, args.nms_iou, args.nms_max_det)
    notes["NMS"] = (f"EfficientNMS_TRT appended (score > {options.score_threshold}, IoU {options.iou_threshold}, "
                    f"{options.max_detections} per image)")
    return add_nms(model, options)


class BuildProgress:
    """A rich spinner with elapsed time and the current build phase."""

    def __init__(self, console, name: str):
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self._progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                                  console=console, transient=True)
        self._name = name
        self._task: Any = None  # rich's TaskID once the progress bar is shown

    def __enter__(self):
        self._progress.__enter__()
        self._task = self._progress.add_task(f"{self._name}: starting")
        return self

    def __exit__(self, *exc):
        return self._progress.__exit__(*exc)

    def phase(self, name: str) -> None:
        self._progress.update(self._task, description=f"{self._name}: {name}")

    def log(self, severity: str, message: str) -> None:
        self._progress.console.print(f"[dim][TRT {severity}] {message}[/dim]", markup=True, highlight=False)


def summary_table(manifest: Manifest, output: Path, notes: dict | None = None):
    build = manifest.build or BuildInfo()
    rows = [
        ("engine", str(output)),
        ("size", render.fmt_bytes(manifest.engine_bytes)),
        ("build time", f"{manifest.build_seconds or 0:.1f} s"),
        ("precision", _precision_line(build, manifest.precision_report)),
        ("profiles", _profiles_line(build.profiles)),
        ("tactic sources", ", ".join(build.settings.get("tactic_sources") or ["TensorRT default"])),
        ("TensorRT", manifest.environment.tensorrt),
        ("GPU", manifest.environment.gpu),
        *sorted((notes or {}).items()),
    ]
    return render.table("build", ["", "value"], rows)


def _precision_line(build: BuildInfo, report: dict | None) -> str:
    notes = build.precision_plan.notes
    text = build.precision or "fp32"
    if notes:
        text += f" ({'; '.join(notes)})"
    if report and report.get("layers_by_precision"):
        counts = ", ".join(f"{k} {v}" for k, v in sorted(report["layers_by_precision"].items()))
        text += f"; layers: {counts}"
    return text


def _profiles_line(profiles: list) -> str:
    if not profiles:
        return "static shapes"
    parts = []
    for i, p in enumerate(profiles):
        dims = "; ".join(f"{n} {render.shape_str(s['min'])}..{render.shape_str(s['max'])} "
                         f"(opt {render.shape_str(s['opt'])})" for n, s in p.items())
        parts.append(f"#{i}: {dims}")
    return " | ".join(parts)
