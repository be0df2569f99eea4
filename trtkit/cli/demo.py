"""``trtkit demo``: the main job on the built-in sample CNN — build FP32 and FP16, run, compare, show a table."""

from __future__ import annotations

import tempfile
from pathlib import Path

from trtkit.cli import options, render

HELP = "Build a built-in sample CNN in FP32 and FP16, run it and compare with the ONNX model."


def add_arguments(parser) -> None:
    parser.add_argument("--batch", type=int, default=8, help="batch size to run (profile 1..32; default 8)")
    parser.add_argument("--iterations", type=int, default=200, help="timed runs per engine (default 200)")
    parser.add_argument("--tactic-sources", metavar="NAMES",
                        help="tactic sources to enable, e.g. EDGE_MASK_CONVOLUTIONS,JIT_CONVOLUTIONS")
    parser.add_argument("--output-dir", metavar="DIR", help="keep the model and engines here (default: a temp dir)")
    options.add_json_option(parser)


def run(args, console) -> int:
    from trtkit.demo import DemoSettings, missing_prerequisite, run_demo

    missing = missing_prerequisite()
    if missing:
        from trtkit.errors import DependencyError

        raise DependencyError(f"trtkit demo needs {missing}")
    tactics = tuple(s.strip() for s in args.tactic_sources.split(",")) if args.tactic_sources else None
    settings = DemoSettings(batch=args.batch, iterations=args.iterations, tactic_sources=tactics)
    with tempfile.TemporaryDirectory(prefix="trtkit-demo-") as tmp:
        workdir = Path(args.output_dir or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        with console.status("building and running the sample CNN ...") as status:
            rows = run_demo(workdir, settings, on_step=lambda text: status.update(text))
    columns = ["precision", "build s", "engine", "median ms", "p99 ms", "err / max|ref|", "layers", "verdict"]
    console.print(render.table(f"trtkit demo: sample CNN, batch {settings.batch}", columns,
                               [[r["precision"], r["build_s"], render.fmt_bytes(r["engine_size"]), r["median_ms"],
                                 r["p99_ms"], r["rel_err"], _layers(r["layers_by_precision"]), r["verdict"]]
                                for r in rows]))
    console.print("median/p99: end-to-end TrtRunner.infer with CUDA graphs, numpy in and out; layers: what the "
                  "engine inspector reports each layer runs in (TensorRT keeps FP32 where it is as fast)")
    if args.json:
        render.write_json(args.json, rows)
    return 0 if all(r["verdict"] == "PASS" for r in rows) else 1


def _layers(counts: dict | None) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted((counts or {}).items())) or "-"
