"""``trtkit demo``: the main job on the built-in sample CNN — build FP32 and FP16, run, compare, show a table."""

from __future__ import annotations

import tempfile
from pathlib import Path

from trtkit.cli import options, render

HELP = "Build a built-in sample CNN in FP32 and FP16, run it and compare with the ONNX model."


def add_arguments(parser) -> None:
    parser.add_argument("--batch", type=int, default=8, help="batch size to run (profile 1..32; default 8)")
    parser.add_argument("--iterations", type=int, default=200, help="timed runs per engine (default 200)")
    parser.add_argument(
        "--tactic-sources",
        metavar="NAMES",
        help="tactic sources to enable, e.g. EDGE_MASK_CONVOLUTIONS,JIT_CONVOLUTIONS",
    )
    parser.add_argument("--output-dir", metavar="DIR", help="keep the model and engines here (default: a temp dir)")
    parser.add_argument(
        "--require-gpu",
        action="store_true",
        help="fail (exit 1) where TensorRT or a GPU is missing, instead of running the CPU part only",
    )
    options.add_json_option(parser)


def run(args, console) -> int:
    from trtkit.demo import DemoSettings, missing_prerequisite, run_demo

    _check_arguments(args)
    missing = missing_prerequisite()
    if missing:
        if args.require_gpu:
            from trtkit.errors import DependencyError

            raise DependencyError(f"trtkit demo needs {missing}")
        return _cpu_only(args, console, missing)
    tactics = tuple(s.strip() for s in args.tactic_sources.split(",")) if args.tactic_sources else None
    settings = DemoSettings(batch=args.batch, iterations=args.iterations, tactic_sources=tactics)
    with tempfile.TemporaryDirectory(prefix="trtkit-demo-") as tmp:
        workdir = Path(args.output_dir or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        with console.status("building and running the sample CNN ...") as status:
            rows = run_demo(workdir, settings, on_step=lambda text: status.update(text))
    columns = ["precision", "build s", "engine", "median ms", "p99 ms", "err / max|ref|", "layers", "verdict"]
    console.print(
        render.table(
            f"trtkit demo: sample CNN, batch {settings.batch}",
            columns,
            [
                [
                    r["precision"],
                    r["build_s"],
                    render.fmt_bytes(r["engine_size"]),
                    r["median_ms"],
                    r["p99_ms"],
                    r["rel_err"],
                    _layers(r["layers_by_precision"]),
                    r["verdict"],
                ]
                for r in rows
            ],
        )
    )
    console.print(
        "median/p99: end-to-end TrtRunner.infer with CUDA graphs, numpy in and out; layers: what the "
        "engine inspector reports each layer runs in (TensorRT keeps FP32 where it is as fast)"
    )
    if args.json:
        render.write_json(args.json, rows)
    return 0 if all(r["verdict"] == "PASS" for r in rows) else 1


def _layers(counts: dict | None) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted((counts or {}).items())) or "-"


def _check_arguments(args) -> None:
    """Bad options are named before anything is built or written."""
    from trtkit._atomic import check_folder
    from trtkit.demo import MAX_BATCH
    from trtkit.errors import UsageError

    if not 1 <= args.batch <= MAX_BATCH:
        raise UsageError(f"--batch {args.batch} is outside the sample model's profile: give 1 to {MAX_BATCH}")
    if args.iterations < 1:
        raise UsageError(f"--iterations {args.iterations}: give at least 1")
    if args.output_dir is not None and not args.output_dir:
        raise UsageError("--output-dir is empty; give a folder (it is created if missing)")
    if args.output_dir:
        check_folder(args.output_dir, field="output_dir")
    options.check_files(args, {}, {})


def _cpu_only(args, console, missing: str) -> int:
    """No TensorRT or GPU here: run the part of the demo a CPU can do, and say plainly what was skipped."""
    from trtkit.demo import DemoSettings, run_cpu_demo

    settings = DemoSettings(batch=args.batch)
    with tempfile.TemporaryDirectory(prefix="trtkit-demo-") as tmp:
        workdir = Path(args.output_dir or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        with console.status("running the sample CNN on the CPU ...") as status:
            rows = run_cpu_demo(workdir, settings, on_step=lambda text: status.update(text))
    console.print(
        render.table(
            f"trtkit demo (CPU only): sample CNN, batch {settings.batch}",
            ["step", "what", "err / max|ref|", "verdict"],
            [[r["step"], r["what"], "-" if r["rel_err"] is None else r["rel_err"], r["verdict"]] for r in rows],
        )
    )
    console.print(
        f"Skipped: building and running TensorRT engines — this machine lacks {missing}. On a machine "
        "with an NVIDIA GPU and TensorRT, `trtkit demo` builds FP32 and FP16 engines, runs them and "
        "compares them with the ONNX model (`--require-gpu` makes a missing GPU an error)."
    )
    if args.json:
        render.write_json(args.json, {"cpu_only": True, "skipped": missing, "rows": rows})
    return 0 if all(r["verdict"] != "FAIL" for r in rows) else 1
