"""``trtkit bench``: trtexec-style numbers from Python (latency percentiles, throughput, H2D/compute/D2H, enqueue)."""

from __future__ import annotations

from pathlib import Path

from trtkit.cli import options
from trtkit.cli.options import add_build_options, add_json_option, config_from_args

HELP = "Measure an engine: latency percentiles, throughput, H2D/compute/D2H, CUDA graphs."


def add_arguments(parser) -> None:
    parser.add_argument(
        "model",
        nargs="?",
        help="engine file, or an ONNX model (.onnx: built first with the build "
        "options, and cached by ONNX sha256 + build settings)",
    )
    add_build_options(
        parser,
        shapes_help="for an ONNX model, the profile to build: NAME:MIN,OPT,MAX for each input, inputs separated by a "
        "space or ';' (NAME:MIN,MAX sets OPT to MAX); the shape benchmarked is each input's OPT (NAME:SHAPE for one "
        "shape)",
    )
    g = parser.add_argument_group("benchmark")
    options.add_cuda_graph_option(g)
    g.add_argument(
        "--no-data-transfers", dest="data_transfers", action="store_false", help="leave out the H2D and D2H copies"
    )
    g.add_argument(
        "--streams",
        type=int,
        default=1,
        metavar="N",
        help="run N execution contexts, each on its own stream (throughput)",
    )
    g.add_argument("--warmup-ms", type=float, default=200.0, metavar="MS", help="warm-up time (default 200)")
    g.add_argument(
        "--duration-s",
        type=float,
        default=3.0,
        metavar="S",
        help="measuring time (default 3); with --server, each of perf_analyzer's measurement windows",
    )
    g.add_argument(
        "--iterations",
        type=int,
        metavar="N",
        help="measure exactly N queries instead; with --server, each level over N requests instead of windows",
    )
    options.add_profile_index_option(g)
    g.add_argument("--no-e2e", dest="e2e", action="store_false", help="skip the end-to-end TrtRunner.infer latency")
    g.add_argument(
        "--layers",
        action="store_true",
        help="per-layer GPU time (TensorRT's profiler, without a CUDA graph) with each layer's precision, tactic "
        "and formats; reformats and FP32/TF32 layers flagged",
    )
    g.add_argument(
        "--top", type=options.positive_int, default=15, metavar="N", help="with --layers, the N slowest layers (15)"
    )
    g.add_argument(
        "--runs", type=options.positive_int, default=50, metavar="N", help="with --layers, runs averaged over (50)"
    )
    options.add_cache_dir_option(g)
    options.add_ignore_manifest_option(g)
    options.add_plugin_option(g)
    from trtkit.cli.bench_server import add_server_options

    add_server_options(parser)
    add_json_option(parser)


def run(args, console) -> int:
    from trtkit.cli.bench_server import check_server_options

    check_server_options(args, add_arguments)
    if args.server:
        from trtkit.cli.bench_server import run_server_load

        return run_server_load(args, console)
    from trtkit.bench import BenchSettings, benchmark
    from trtkit.bench.measure import check_settings
    from trtkit.bench.report import environment, render, to_json
    from trtkit.cli.render import write_json

    settings = BenchSettings(
        shapes=bench_shapes(args.shapes),
        profile=args.profile_index,
        cuda_graph=args.cuda_graph,
        data_transfers=args.data_transfers,
        streams=args.streams,
        warmup_ms=args.warmup_ms,
        duration_s=args.duration_s,
        iterations=args.iterations,
        e2e=args.e2e,
    )
    check_settings(settings)  # before a possibly long build
    if Path(args.model).suffix.lower() != ".onnx" and options.changed_build_options(args):
        from trtkit.errors import UsageError

        raise UsageError(
            f"{', '.join(options.changed_build_options(args))}: build options apply when bench is "
            "given an ONNX model; this is an engine, already built"
        )
    from trtkit.cli.options import check_files

    check_files(args, {}, {"model": args.model})
    unused = [
        flag
        for flag, dest, default in (("--top", "top", 15), ("--runs", "runs", 50))
        if not args.layers and getattr(args, dest) != default
    ]
    if unused:
        from trtkit.errors import UsageError

        raise UsageError(f"{' and '.join(unused)} apply with --layers (the per-layer profile)")
    if args.layers and args.streams != 1:
        from trtkit.errors import UsageError

        raise UsageError("--layers profiles one execution context without a CUDA graph; leave out --streams")
    engine = engine_for(args, console)
    options.load_plugin_libs(args)  # an ONNX model's build loaded them in the build worker; the engine runs here
    if args.layers:
        return _run_layers(args, console, engine, settings)
    result = benchmark(_engine_arg(engine, args), settings)
    render(result, console, title=f"trtkit bench {engine.name}")
    if args.json:
        write_json(args.json, {**to_json(result, engine=str(engine)), "environment": environment()})
    return 0


def _run_layers(args, console, engine: Path, settings) -> int:
    from trtkit.bench.layers import profile_layers
    from trtkit.bench.report import environment, render_layers
    from trtkit.cli.render import write_json

    profile = profile_layers(_engine_arg(engine, args), settings.shapes, runs=args.runs, profile=settings.profile)
    render_layers(profile, console, top=args.top, title=f"trtkit bench --layers {engine.name}")
    if args.json:
        write_json(args.json, {**profile.to_json(), "engine": str(engine), "environment": environment()})
    return 0


def _engine_arg(engine: Path, args):
    if args.ignore_manifest:
        from trtkit.runtime.engine import check_engine_manifest, read_engine_bytes

        check_engine_manifest(engine, allow_mismatch=True)
        return read_engine_bytes(engine)
    return engine


def bench_shapes(specs: list) -> dict | None:
    """The shapes to run: each input's opt shape in the first ``--shapes`` (one shape per input is min=opt=max)."""
    if not specs:
        return None
    from trtkit.builder.profiles import parse_shapes

    return {name: shape.opt for name, shape in parse_shapes(specs[0]).shapes.items()}


def engine_for(args, console, trt=None) -> Path:
    """The engine file to run: ``args.model`` itself, or the cached engine built from that ONNX model."""
    model = Path(args.model)
    if model.suffix.lower() != ".onnx":
        return model
    from trtkit.builder.cache import cached_build
    from trtkit.errors import ModelError

    if not model.is_file():
        raise ModelError(f"ONNX model '{model}' does not exist")
    console.print(f"preparing {model}")
    path, hit = cached_build(str(model), config_from_args(args), folder=args.cache_dir, trt=trt, isolate=args.isolate)
    console.print(f"{'using cached' if hit else 'built and cached'} engine {path}")
    return path
