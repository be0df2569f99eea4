"""``trtkit run``: run an engine on given .npy/.npz inputs (or random ones within the profile) and show its outputs."""

from __future__ import annotations

import io
import time
import zipfile
from pathlib import Path

import numpy as np

from trtkit.cli.options import (
    RUN_SHAPES_HELP,
    add_cuda_graph_option,
    add_ignore_manifest_option,
    add_json_option,
    add_plugin_option,
    add_profile_index_option,
    add_shape_options,
    load_plugin_libs,
    positive_int,
)
from trtkit.cli.pipeline import add_pipeline_arguments, run_pipeline, wants_pipeline

HELP = "Run an engine on .npy/.npz or random inputs, or stream a video or image folder through it."


def add_arguments(parser) -> None:
    parser.add_argument("engine", help="engine file built by `trtkit build`")
    parser.add_argument(
        "--input",
        "-i",
        action="append",
        default=[],
        metavar="NAME=FILE.npy | FILE.npz",
        help="input data: NAME=FILE.npy for one input, or an .npz holding inputs by name "
        "(repeatable); inputs not given are random within the profile",
    )
    add_shape_options(parser, RUN_SHAPES_HELP)
    add_profile_index_option(parser)
    add_cuda_graph_option(parser)
    parser.add_argument(
        "--iterations", type=positive_int, default=1, metavar="N", help="run N times (shows latency; default 1)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed for random inputs")
    parser.add_argument("--save-outputs", metavar="FILE.npz", help="save the outputs to an .npz file")
    add_ignore_manifest_option(parser)
    add_plugin_option(parser)
    add_json_option(parser)
    add_pipeline_arguments(parser)


def run(args, console) -> int:
    load_plugin_libs(args)
    if wants_pipeline(args):
        return run_pipeline(args, console)
    from trtkit.bench.measure import make_feed
    from trtkit.cli.bench import bench_shapes
    from trtkit.cli.options import check_files
    from trtkit.runtime import TrtRunner

    check_files(
        args,
        {"save_outputs": args.save_outputs},
        {"engine": args.engine, **{f"input {spec}": spec.partition("=")[2] or spec for spec in args.input}},
    )
    given = load_inputs(args.input)
    with TrtRunner(
        args.engine, profile=args.profile_index, cuda_graph=args.cuda_graph, allow_mismatch=args.ignore_manifest
    ) as runner:
        shapes = {n: s for n, s in (bench_shapes(args.shapes) or {}).items() if n not in given}
        # inputs given as files override random ones; unknown names reach infer(), which names the right ones
        feed = {**make_feed(runner, shapes, seed=args.seed), **given}
        times, outputs = [], {}
        for _ in range(args.iterations):
            t0 = time.perf_counter()
            outputs = runner.infer(feed)
            times.append((time.perf_counter() - t0) * 1e3)
    report = make_report(args.engine, feed, outputs, times)
    render(report, console)
    if args.save_outputs:
        from trtkit._atomic import write_bytes_atomic

        buf = io.BytesIO()
        np.savez(buf, **outputs)
        write_bytes_atomic(Path(args.save_outputs), buf.getvalue())
    if args.json:
        from trtkit.cli.render import write_json

        write_json(args.json, report)
    return 0


def load_inputs(specs: list) -> dict:
    """Arrays from ``NAME=FILE.npy`` and ``FILE.npz`` specs.

    Raises:
        InputError: a file is missing or unreadable, or a spec is malformed.
    """
    from trtkit.errors import InputError

    feed = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep:
            name, path = None, spec
        try:
            data = np.load(path, allow_pickle=False)
        except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:  # numpy's errors for damaged files
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            if "allow_pickle" in why or "pickled" in why:  # numpy's advice would run code from the file
                why = "it is not a .npy or .npz file of numeric arrays"
            elif Path(path).is_dir():
                why = "it is a folder; give a .npy or .npz file"
            raise InputError(f"Cannot read input file '{path}': {why}") from exc
        if isinstance(data, np.ndarray):
            if name is None:
                raise InputError(f"'{spec}': give the input name for an .npy file, e.g. images={path}")
            feed[name] = data
        else:
            feed.update({k: data[k] for k in data.files})
    return feed


def make_report(engine, feed: dict, outputs: dict, times: list) -> dict:
    def describe(array) -> dict:
        a = np.asarray(array)
        stats = {}
        if a.size and a.dtype.kind in "fiub":
            f = a.astype(np.float64)
            stats = {"min": float(f.min()), "max": float(f.max()), "mean": float(f.mean()), "std": float(f.std())}
        return {"shape": list(a.shape), "dtype": str(a.dtype), **stats}

    return {
        "engine": str(engine),
        "inputs": {n: describe(a) for n, a in feed.items()},
        "outputs": {n: describe(a) for n, a in outputs.items()},
        "latency_ms": {"calls": len(times), "first": times[0], "median": float(np.median(times)), "min": min(times)},
    }


def render(report: dict, console) -> None:
    from trtkit.cli.render import shape_str, table

    rows = [
        (n, "in", shape_str(d["shape"]), d["dtype"], d.get("min"), d.get("max"), d.get("mean"), d.get("std"))
        for n, d in report["inputs"].items()
    ]
    rows += [
        (n, "out", shape_str(d["shape"]), d["dtype"], d.get("min"), d.get("max"), d.get("mean"), d.get("std"))
        for n, d in report["outputs"].items()
    ]
    console.print(
        table(f"trtkit run {report['engine']}", ["tensor", "", "shape", "dtype", "min", "max", "mean", "std"], rows)
    )
    lat = report["latency_ms"]
    console.print(
        f"{lat['calls']} call(s): first {lat['first']:.3f} ms, median {lat['median']:.3f} ms, min {lat['min']:.3f} ms"
    )
