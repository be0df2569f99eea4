"""``trtkit parity MODEL.onnx ENGINE``: the engine's outputs against the ONNX model's, a verdict per output.

Exit code 0 when every output of every trial is within tolerance, 1 otherwise (and for unusable inputs).
"""

from __future__ import annotations

from trtkit.cli import options, render

HELP = "Compare an engine's outputs against its ONNX model, with verdicts."

REFERENCES = ("onnx-reference", "onnxruntime")
PRECISION_CHOICES = ("fp32", "tf32", "fp16", "bf16", "int8")


def add_arguments(parser) -> None:
    parser.add_argument("model", help="the ONNX model the engine was built from")
    parser.add_argument("engine", help="the engine file (its manifest beside it gives the precision)")
    g = parser.add_argument_group("inputs")
    g.add_argument(
        "--shapes",
        action="append",
        default=[],
        metavar="SPEC",
        help="input shapes for random inputs: NAME:SHAPE for each input, inputs separated by a space or ';', e.g. "
        "'images:8x3x224x224' (a NAME:MIN,OPT,MAX spec uses OPT); default: the profile's opt shapes",
    )
    options.add_profile_index_option(g)
    g.add_argument(
        "--inputs",
        metavar="PATH",
        help="inputs instead of random ones: .npz (name -> array), .npy (single input), "
        "polygraphy --save-inputs .json, a folder of .npz/.npy files (one feed each), or an image "
        "folder (single-input models; RGB, 0..1, NCHW, batched to the shape's batch)",
    )
    g.add_argument(
        "--trials",
        type=options.positive_int,
        metavar="N",
        help="random input sets to run (default 1), or the most feeds taken from --inputs (default all)",
    )
    g.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    g.add_argument(
        "--value-range",
        type=_value_range,
        metavar="LOW,HIGH",
        help="range of random float inputs (default -1,1), e.g. 0,255 for a model taking raw pixels",
    )
    options.add_ignore_manifest_option(g)
    options.add_cuda_graph_option(g)
    g.add_argument(
        "--reference",
        choices=REFERENCES,
        help="how to run the ONNX model: onnxruntime (the default where it is installed: `pip install "
        "'trtkit[eval]'`) or onnx's ReferenceEvaluator (the default without it; pure numpy, slow on big models)",
    )
    t = parser.add_argument_group("tolerances (defaults depend on the precision)")
    t.add_argument(
        "--precision",
        choices=PRECISION_CHOICES,
        help="judge as this precision (default: the engine's manifest, else tf32)",
    )
    t.add_argument(
        "--metric-threshold",
        action="append",
        type=_threshold,
        metavar="[OUTPUT:]X",
        help="allowed max|engine - onnx| / max|onnx| (defaults: fp32 1e-4, tf32 2e-3, fp16 1e-2, "
        "bf16 5e-2, int8 1e-1); OUTPUT:X for one output, repeatable, e.g. boxes:5e-2",
    )
    t.add_argument("--atol", type=float, help="element-wise check: fail elements beyond both atol and rtol*|ref|")
    t.add_argument("--rtol", type=float, help="element-wise check (see --atol); Polygraphy's verdict is shown too")
    t.add_argument("--min-cosine", type=float, metavar="X", help="require cosine similarity >= X (int8: 0.99)")
    t.add_argument(
        "--min-top1", type=float, metavar="X", help="require top-1 agreement >= X for classifier-like (N, C) outputs"
    )
    t.add_argument(
        "--no-polygraphy",
        dest="polygraphy",
        action="store_false",
        help="skip Polygraphy's cross-check of the element-wise verdict",
    )
    parser.add_argument(
        "--localize",
        action="store_true",
        help="also build a debug engine (same settings, from the manifest) with every intermediate "
        "tensor as an output, and name the first tensor that diverges",
    )
    parser.add_argument(
        "--save-arrays", metavar="NPZ", help="write every trial's inputs, engine outputs and ONNX outputs to this .npz"
    )
    options.add_json_option(parser)


def _threshold(text: str) -> tuple[str, float]:
    """``1e-2`` → ("", 0.01); ``boxes:5e-2`` → ("boxes", 0.05)."""
    import argparse

    name, _, value = text.rpartition(":")
    try:
        return name, float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number or OUTPUT:NUMBER (e.g. 1e-2, boxes:5e-2)") from None


def metric_threshold_from_args(args):
    """None, one number, or {output: number} ("" for the rest) from the ``--metric-threshold`` values."""
    pairs = args.metric_threshold or []
    if not pairs:
        return None
    if len(pairs) == 1 and pairs[0][0] == "":
        return pairs[0][1]
    return dict(pairs)


def _value_range(text: str) -> tuple[float, float]:
    import argparse

    try:
        low, high = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not LOW,HIGH (e.g. 0,255)") from None
    if not low < high:
        raise argparse.ArgumentTypeError(f"LOW must be below HIGH, got {text}")
    return low, high


def shapes_from_args(args) -> dict | None:
    """{input: shape} from ``--shapes``: the opt shape of each input's spec (a single shape is its own opt).

    Raises:
        ProfileError: malformed text, or ``--shapes`` given more than once.
    """
    from trtkit.builder.profiles import parse_shapes
    from trtkit.errors import ProfileError

    if not args.shapes:
        return None
    if len(args.shapes) > 1:
        raise ProfileError("parity runs one set of shapes: give --shapes once, e.g. --shapes images:8x3x224x224")
    return {name: shape.opt for name, shape in parse_shapes(args.shapes[0]).shapes.items()}


def run(args, console, *, engine=None, runner_options: dict | None = None, build_options: dict | None = None) -> int:
    """Run the comparison (and, with ``--localize``, the per-tensor search) and render it.

    ``engine`` (a callable) replaces ``args.engine``; ``runner_options`` are added to TrtRunner's arguments and
    ``build_options`` to the debug build's: for tests and scripts (fake TensorRT and CUDA on a CPU).
    """
    from trtkit.parity.api import compare_engine_to_onnx

    _check_order(args.model, args.engine)
    options.check_files(
        args, {"save_arrays": args.save_arrays}, {"model": args.model, "engine": args.engine, "inputs": args.inputs}
    )
    shared = _compare_options(args, runner_options)
    with _progress(console) as on_trial:
        report = compare_engine_to_onnx(
            args.model,
            engine if engine is not None else args.engine,
            precision=args.precision,
            polygraphy_check=args.polygraphy,
            save_arrays=args.save_arrays,
            on_trial=on_trial,
            **shared,
        )
    data = report.to_dict()
    if args.json != "-":
        render_report(console, report)
    if args.localize:
        located = _localize(args, console, report.precision, shared, build_options or {})
        data["localize"] = located.to_dict()
        if args.json != "-":
            render_localize(console, located)
            if not report.passed and located.first_failure is None:
                console.print(
                    "[yellow]The debug engine, rebuilt from this ONNX model, matches it: the engine under "
                    "test was probably built from another model or with other settings.[/yellow]",
                    markup=True,
                    highlight=False,
                )
    if args.json:
        render.write_json(args.json, data)
    return 0 if report.passed else 1


def _check_order(model: str, engine: str) -> None:
    """The ONNX model comes first: an engine there and an .onnx file second is the two swapped (a usage error)."""
    from pathlib import Path

    from trtkit.errors import UsageError

    if Path(engine).suffix.lower() == ".onnx" and Path(model).suffix.lower() != ".onnx":
        raise UsageError(
            f"parity takes the ONNX model first, then the engine: `trtkit parity {engine} {model}` "
            f"('{model}' is not an .onnx file, '{engine}' is)"
        )


def _compare_options(args, runner_options: dict | None) -> dict:
    """The options shared by the comparison and the debug engine's comparison."""
    return dict(
        inputs=args.inputs,
        shapes=shapes_from_args(args),
        profile_index=args.profile_index,
        atol=args.atol,
        rtol=args.rtol,
        metric_threshold=metric_threshold_from_args(args),
        min_cosine=args.min_cosine,
        min_top1=args.min_top1,
        trials=args.trials,
        seed=args.seed,
        value_range=args.value_range,
        reference=args.reference,
        runner_options={
            "allow_mismatch": args.ignore_manifest,
            "cuda_graph": args.cuda_graph,
            **(runner_options or {}),
        },
    )


def _localize(args, console, precision: str, options: dict, build_options: dict):
    """Rebuild the engine with every intermediate tensor marked as an output, with the engine's own settings."""
    from trtkit.errors import EngineError
    from trtkit.manifest import manifest_path, read_manifest
    from trtkit.parity.localize import config_from_manifest, engine_builder, localize_divergence

    manifest = read_manifest(args.engine)
    if manifest is None:
        raise EngineError(
            f"--localize rebuilds the engine with the settings in its manifest "
            f"'{manifest_path(args.engine)}', which does not exist; "
            f"build the engine with `trtkit build`."
        )
    build_engine = engine_builder(config_from_manifest(manifest), **build_options)
    with console.status("localize: building a debug engine with every intermediate tensor marked as an output"):
        return localize_divergence(args.model, build_engine, precision=precision, **options)


class _progress:
    """A transient spinner naming the trial being run (the reference evaluator can take seconds per trial)."""

    def __init__(self, console):
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console, transient=True
        )
        self._task = None

    def __enter__(self):
        self._progress.__enter__()
        self._task = self._progress.add_task("parity: loading")
        return self.update

    def __exit__(self, *exc):
        return self._progress.__exit__(*exc)

    def update(self, trial: int, total: int) -> None:
        self._progress.update(self._task, description=f"parity: trial {trial + 1} of {total}")


def render_report(console, report) -> None:
    """Print the header, the per-output table, failure reasons, notes and the verdict line."""
    console.print(_header(report))
    console.print(report_table(report))
    worst = report.worst()
    for result in worst:
        for reason in result.reasons:
            console.print(f"[red]- {reason}[/red]", markup=True, highlight=False)
    others = sum(1 for r in report.results if not r.passed) - sum(1 for r in worst if not r.passed)
    if others:
        console.print(
            f"[red]- and {others} more failing output(s) in other trials (all in --json)[/red]",
            markup=True,
            highlight=False,
        )
    polygraphy = [
        f"'{r.name}' {'pass' if r.polygraphy_passed else 'fail'}" for r in worst if r.polygraphy_passed is not None
    ]
    if polygraphy:
        tol = report.tolerance
        console.print(
            f"Polygraphy's verdict (CompareFunc.simple, atol {tol.atol or 0}, rtol {tol.rtol or 0}): "
            f"{', '.join(polygraphy)}",
            highlight=False,
        )
    for note in report.notes:
        console.print(f"[dim]note: {note}[/dim]", markup=True, highlight=False)
    style = "bold green" if report.passed else "bold red"
    console.print(f"[{style}]{report.verdict()}[/{style}]", markup=True, highlight=False)


def _header(report) -> str:
    shapes = ", ".join(f"{n} {render.shape_str(s)}" for n, s in report.shapes.items())
    source = "random inputs (seed {})".format(report.seed) if report.input_source == "random" else report.input_source
    tol = report.tolerance
    from trtkit.parity.compare import fmt

    return (
        f"{report.engine} vs {report.model}: {report.trials} trial(s) of {source}, shapes {shapes}, reference "
        f"{report.reference_backend}\ntolerance {tol.source}: ratio = max|err| / max|ref| <= "
        f"{fmt(tol.max_error_ratio)}" + "".join(f"; '{n}' <= {fmt(v)}" for n, v in tol.per_output)
    )


COLUMNS = [
    "output",
    "shape",
    "max|err|",
    "max|ref|",
    "ratio",
    "mean err",
    "rel p99",
    "cosine",
    "top1",
    "worst",
    "verdict",
]


def report_table(report):
    """A rich table: one row per output, its worst trial (plus the element-wise columns when that check is on)."""
    from trtkit.parity.compare import fmt

    elementwise = report.tolerance.elementwise
    columns = COLUMNS[:-1] + ([">tol"] if elementwise else []) + COLUMNS[-1:]
    rows = []
    for r in report.worst():
        m = r.metrics
        verdict = "PASS" if r.passed else "FAIL"
        extra = [r.elementwise_failures] if elementwise else []
        if m is None:
            rows.append([r.name, "missing"] + [None] * (len(columns) - 3) + [verdict])
            continue
        top1 = f"{m.top1_agreement:.0%}" if m.top1_agreement is not None else None
        cosine = f"{m.cosine:.6f}" if m.cosine is not None else None
        worst = ",".join(str(i) for i in m.worst_index) if m.worst_index is not None else None
        rows.append(
            [
                r.name,
                render.shape_str(m.shape),
                fmt(m.max_abs_error),
                fmt(m.max_abs_ref),
                fmt(m.error_ratio),
                fmt(m.mean_abs_error),
                fmt(m.rel_error.get("p99")),
                cosine,
                top1,
                worst,
                *extra,
                verdict,
            ]
        )
    return _compact_table("parity (worst trial per output)", columns, rows)


def _compact_table(title: str, columns: list, rows: list):
    """Like render.table, with light borders and unwrapped names so a dozen columns fit 100 characters."""
    from rich import box

    table = render.table(title, columns, rows)
    table.box, table.pad_edge, table.padding = box.SIMPLE_HEAD, False, (0, 1, 0, 0)
    table.columns[0].no_wrap = True
    for column in table.columns:
        column.overflow = "ellipsis" if column is table.columns[0] else "fold"
    return table


LOCALIZE_CONTEXT = 3  # rows shown after the first diverging tensor


def render_localize(console, located) -> None:
    """Per-tensor table up to a few rows past the first divergence, then the one-line verdict."""
    from trtkit.parity.compare import fmt

    first = located.first_failure
    stop = located.tensors.index(first) + 1 + LOCALIZE_CONTEXT if first is not None else len(located.tensors)
    rows = []
    for check in located.tensors[:stop]:
        m = check.result.metrics
        rows.append(
            [
                check.tensor,
                check.op,
                check.node,
                fmt(m.error_ratio) if m else None,
                f"{m.cosine:.6f}" if m is not None and m.cosine is not None else None,
                "PASS" if check.result.passed else "FAIL",
            ]
        )
    console.print(
        _compact_table(
            "localize (debug engine, graph order)", ["tensor", "op", "node", "ratio", "cosine", "verdict"], rows
        )
    )
    hidden = len(located.tensors) - len(rows)
    if hidden:
        console.print(f"[dim]... {hidden} more tensor(s) (all in --json)[/dim]", markup=True, highlight=False)
    style = "bold red" if first is not None else "bold green"
    console.print(f"[{style}]{located.verdict()}[/{style}]", markup=True, highlight=False)
