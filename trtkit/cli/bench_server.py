"""``trtkit bench --server URL --model NAME``: load on a running Triton server, sent by NVIDIA's perf_analyzer (see
:mod:`trtkit.bench.serving`)."""

from __future__ import annotations

import argparse

# options of both kinds of benchmark
SHARED = ("duration_s", "iterations", "json")


def add_server_options(parser) -> None:
    g = parser.add_argument_group("load on a Triton server (instead of an engine), sent by perf_analyzer")
    g.add_argument(
        "--server", metavar="URL", help="a Triton server, e.g. localhost:8000 (HTTP) or localhost:8001 with --grpc"
    )
    g.add_argument("--model", dest="server_model", metavar="NAME", help="the model to load it with")
    g.add_argument(
        "--concurrency",
        default="1,8,64",
        metavar="LIST",
        help="requests in flight, one level after another (default 1,8,64)",
    )
    g.add_argument("--grpc", action="store_true", help="use gRPC (default HTTP)")
    g.add_argument("--streaming", action="store_true", help="with --grpc: every request over one bidirectional stream")
    g.add_argument(
        "--shared-memory",
        default="none",
        metavar="KIND",
        help="none (default): inputs and outputs in every request; system: in system shared memory (a server on "
        "this host, started with trtkit serve --shared-memory); cuda: in device memory shared by CUDA IPC",
    )
    g.add_argument("--batch", type=int, default=1, metavar="B", help="rows per request (default 1)")


def given_options(args, add, keep=()) -> list:
    """The flags of the options ``add`` makes that ``args`` gives a value other than their default, ``keep`` aside."""
    parser = argparse.ArgumentParser(add_help=False)
    add(parser)
    defaults = vars(parser.parse_known_args([])[0])
    flags: list = []
    for action in parser._actions:
        value = getattr(args, action.dest, defaults.get(action.dest))
        if not action.option_strings or action.dest in keep or value == defaults.get(action.dest):
            continue
        if action.const is not None and value != action.const:  # one of several flags that set the same value
            continue
        negative = isinstance(action, argparse.BooleanOptionalAction) and not value
        flag = action.option_strings[-1 if negative else 0]
        if flag not in flags:
            flags.append(flag)
    return flags


def check_server_options(args, add_engine_options) -> None:
    """Refuse what would do nothing: engine options with ``--server``, server options without it.

    Raises:
        UsageError: naming the options and the fix.
    """
    from trtkit.errors import UsageError

    if not args.server:
        given = given_options(args, add_server_options)
        if given or args.model is None:
            raise UsageError(
                f"{', '.join(given) or 'nothing to benchmark'}: give an engine or ONNX model to benchmark, or "
                "--server URL --model NAME for a Triton server"
            )
        return
    if args.model is not None or not args.server_model:
        raise UsageError(
            f"--server {args.server}: give the served model as --model NAME"
            + (
                f", not an engine ({args.model}): a server's load and an engine's benchmark are apart"
                if args.model
                else ""
            )
        )
    given = given_options(args, add_engine_options, keep=SHARED + tuple(vars(_server_defaults())))
    if given:
        raise UsageError(f"{', '.join(given)}: options of an engine's benchmark, not of --server; leave them out")


def _server_defaults():
    parser = argparse.ArgumentParser(add_help=False)
    add_server_options(parser)
    return parser.parse_args([])


def run_server_load(args, console) -> int:
    from trtkit.bench.serving import LoadSettings, address, find_perf_analyzer, load_test, perf_analyzer_version, render
    from trtkit.cli.options import check_files
    from trtkit.cli.render import write_json
    from trtkit.errors import UsageError

    try:
        levels = tuple(int(c) for c in args.concurrency.split(",") if c.strip())
    except ValueError:
        raise UsageError(f"--concurrency {args.concurrency!r}: give numbers separated by commas, e.g. 1,8,64") from None
    settings = LoadSettings(
        concurrency=levels,
        batch=args.batch,
        grpc=args.grpc,
        streaming=args.streaming,
        shared_memory=args.shared_memory,
        duration_s=args.duration_s,
        iterations=args.iterations,
    )
    settings.check()
    address(args.server, args.grpc)
    check_files(args, {}, {})
    binary = find_perf_analyzer()
    with console.status(f"perf_analyzer on {args.server_model} at concurrency {args.concurrency}"):
        results = load_test(args.server, args.server_model, settings, binary=binary)
    protocol = ("gRPC stream" if args.streaming else "gRPC") if args.grpc else "HTTP"
    title = f"trtkit bench {args.server_model} on {args.server} ({protocol}, batch {args.batch}, perf_analyzer)"
    render(results, console, title=title)
    if args.json:
        write_json(
            args.json,
            {
                "server": args.server,
                "model": args.server_model,
                "protocol": protocol,
                "batch": args.batch,
                "shared_memory": args.shared_memory,
                "window_s": None if args.iterations else args.duration_s,
                "iterations": args.iterations,
                "perf_analyzer": {"binary": binary, "version": perf_analyzer_version(binary)},
                "concurrency": {str(r.concurrency): r.to_json() for r in results},
            },
        )
    return 1 if any(r.error for r in results) else 0
