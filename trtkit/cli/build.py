"""``trtkit build``: ONNX model → engine file + manifest (+ timing cache)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from trtkit.builder import timeline
from trtkit.cli import check_render, options, render
from trtkit.manifest import BuildInfo, Manifest

HELP = "Build a TensorRT engine from an ONNX model (profiles, precision, timing cache, manifest)."


def add_arguments(parser) -> None:
    parser.add_argument("model", help="ONNX model")
    parser.add_argument(
        "-o", "--output", help="engine file to write (default: MODEL with .PRECISION.engine, e.g. m.fp16.engine)"
    )
    options.add_build_options(parser, batch=True)
    options.add_plugin_option(parser)
    add_nms_options(parser)
    options.add_prepare_options(parser)
    options.add_json_option(parser)


def default_output(model: str, precision: str) -> Path:
    """``m.onnx`` -> ``m.fp16.engine``: builds of one model in two precisions do not overwrite each other."""
    return Path(model).with_suffix(f".{precision}.engine")


def run(args, console) -> int:
    from trtkit.builder.api import build, input_files, output_files
    from trtkit.errors import ModelError

    config = options.config_from_args(args)
    if args.add_nms:
        from trtkit.detection.nms_plugin import NmsOptions

        given = {"score_threshold": args.nms_score, "iou_threshold": args.nms_iou, "max_detections": args.nms_max_det}
        nms = NmsOptions(**{name: value for name, value in given.items() if value is not None})
        config = dataclasses.replace(config, add_nms=nms)
    else:
        options.refuse_unused(args, "--add-nms (the NMS plugin)", ("--nms-score", "--nms-iou", "--nms-max-det"))
    output = Path(args.output) if args.output else default_output(args.model, config.precision)
    options.check_files(
        args, output_files(config, args.output if args.output is not None else output), input_files(args.model, config)
    )
    with BuildProgress(console, Path(args.model).name) as progress:
        try:
            result = build(
                args.model,
                config,
                output=output,
                isolate=args.isolate,
                on_progress=progress.update,
                on_log=progress.log if args.verbose else None,
                log_severity="INFO" if args.verbose else "WARNING",
            )
        except ModelError as exc:
            if getattr(exc, "report", None) is not None and not exc.report.ok:
                progress.stop()
                console.print(check_render.render_check(exc.report))
            raise
    console.print(summary_table(result.manifest, output, prepare_notes(result.manifest, config)))
    timings = timeline.relative({**result.marks, "exit": timeline.now()})
    if args.verbose:
        console.print(timings_table(timings))
    if args.json:
        render.write_json(args.json, dict(result.manifest.to_json(), engine_file=str(output), timings_s=timings))
    return 0


def add_nms_options(parser) -> None:
    g = parser.add_argument_group("detection post-processing")
    g.add_argument(
        "--add-nms",
        action="store_true",
        help="append TensorRT's EfficientNMS_TRT plugin to a YOLOv8-style head (N, 4 + classes, anchors): "
        "the engine returns num_dets, boxes, scores, classes",
    )
    g.add_argument("--nms-score", type=float, metavar="X", help="--add-nms score threshold, 0 <= X < 1 (0.25)")
    g.add_argument("--nms-iou", type=float, metavar="X", help="--add-nms IoU threshold, 0 < X <= 1 (0.45)")
    g.add_argument("--nms-max-det", type=int, metavar="N", help="--add-nms detections per image (100)")


def prepare_notes(manifest: Manifest, config) -> dict:
    """Build summary lines for what ``prepare`` did: folding, the other rewrites, the saved model."""
    rewrites = (manifest.prepare or {}).get("rewrites", [])
    fold = [r for r in rewrites if r["rewrite"] == "fold-constants"]
    notes = {}
    if config.fold_constants:
        notes["constant folding"] = fold[0]["what"] if fold else "nothing to fold"
    if config.sanitize:
        notes["rewrites"] = _rewrites_line([r for r in rewrites if r["rewrite"] != "fold-constants"])
    nms = [r for r in rewrites if r["rewrite"] == "add-nms"]
    if nms:
        notes["NMS"] = nms[0]["what"]
    pixels = [r for r in rewrites if r["rewrite"] == "uint8-nhwc-input"]
    if pixels:
        notes["image input"] = f"{pixels[0]['where']} {pixels[0]['what']}"
    if config.save_prepared and any(r["status"] == "applied" for r in rewrites):
        notes["sanitized model"] = config.save_prepared
    return notes


class BuildProgress:
    """Build progress for the terminal: on a TTY a rich line with phase, elapsed time, layers and ETA; otherwise one
    plain line per phase (CI logs show progress too)."""

    def __init__(self, console, name: str):
        self._console, self._name = console, name
        self._live = console.is_terminal
        self._progress: Any = None  # rich's Progress on a terminal
        self._task: Any = None  # its TaskID
        self._last_phase: str | None = None

    def __enter__(self):
        if self._live:
            from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[detail]}"),
                TimeElapsedColumn(),
                console=self._console,
                transient=True,
            )
            self._progress.__enter__()
            self._task = self._progress.add_task(f"{self._name}: starting", total=None, detail="")
        return self

    def __exit__(self, *exc):
        return self._progress.__exit__(*exc) if self._progress is not None else False

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()

    def update(self, event) -> None:
        """A :class:`~trtkit.builder.progress.ProgressEvent` from the build."""
        if self._progress is None:
            if event.phase != self._last_phase:
                self._console.print(f"{self._name}: {event.line()}", highlight=False)
            self._last_phase = event.phase
            return
        detail = ""
        if event.layers_done is not None:
            detail = f"{event.layers_done}/{event.layers_total or '?'} layers, {event.cached} cached"
            if event.eta_s is not None:
                detail += f", ETA {event.eta_s:.0f} s"
        self._progress.update(
            self._task,
            description=f"{self._name}: {event.phase}",
            detail=detail,
            total=event.layers_total,
            completed=event.layers_done or 0,
        )

    def log(self, severity: str, message: str) -> None:
        self._console.print(f"[dim][TRT {severity}] {message}[/dim]", markup=True, highlight=False)


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
        *([("timing cache", "{path} ({status})".format(**manifest.timing_cache))] if manifest.timing_cache else []),
        *sorted((notes or {}).items()),
    ]
    return render.table("build", ["", "value"], rows)


def timings_table(timings: dict):
    """The build's steps in time order: seconds from the process start, and since the step before."""
    rows, previous = [], 0.0
    for step, at in sorted(timings.items(), key=lambda item: item[1]):
        rows.append((step, f"{at:.3f}", f"+{at - previous:.3f}"))
        previous = at
    return render.table("build timeline (s from the process start)", ["step", "at", "after previous"], rows)


def _rewrites_line(rewrites: list) -> str:
    shown = [
        f"{r['rewrite']} at {r['where']}: {r['what']}" + ("" if r["status"] == "applied" else f" [{r['status']}]")
        for r in rewrites
    ]
    return (
        "; ".join(shown[:8]) + (f"; and {len(shown) - 8} more (see the manifest)" if len(shown) > 8 else "")
        or "none needed"
    )


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
        dims = "; ".join(
            f"{n} {render.shape_str(s['min'])}..{render.shape_str(s['max'])} (opt {render.shape_str(s['opt'])})"
            for n, s in p.items()
        )
        parts.append(f"#{i}: {dims}")
    return " | ".join(parts)
