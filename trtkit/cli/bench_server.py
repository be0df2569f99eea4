"""``trtkit bench --server URL --model NAME``: load on a running Triton server (see :mod:`trtkit.bench.serving`)."""

from __future__ import annotations


def add_server_options(parser) -> None:
    g = parser.add_argument_group("load on a Triton server (instead of an engine)")
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
    g.add_argument(
        "--streaming",
        action="store_true",
        help="with --grpc: every request over one bidirectional stream (Triton's ModelStreamInfer, served on a "
        "front-end thread apart from unary calls) instead of a call each",
    )
    g.add_argument(
        "--client",
        default="tritonclient",
        metavar="NAME",
        help="with --grpc: tritonclient (default): tritonclient's asyncio client; wire: the request encoded once and "
        "written straight onto HTTP/2 connections, answers checked without tritonclient (a fraction of its CPU per "
        "request: the server, not the client, sets the pace)",
    )
    g.add_argument(
        "--connections",
        type=int,
        default=1,
        metavar="N",
        help="with --client wire: HTTP/2 connections per client process (default 1)",
    )
    g.add_argument(
        "--requests",
        type=int,
        default=100_000,
        metavar="N",
        help="at most N requests per level (with --duration-s, whichever comes first; default 100000)",
    )
    g.add_argument("--batch", type=int, default=1, metavar="B", help="rows per request (default 1)")
    g.add_argument(
        "--procs",
        type=int,
        default=1,
        metavar="N",
        help="client processes each level's requests are spread over, started together (default 1; one Python "
        "process is often the limit at high request rates: the table says when the busiest was near a core)",
    )
    g.add_argument(
        "--shared-memory",
        default="none",
        metavar="KIND",
        help="none (default): inputs in every request; system: inputs written once into system shared memory, "
        "requests carry only its name (a server on this host, started with trtkit serve --shared-memory); cuda: "
        "the same in device memory of --cuda-device, shared by CUDA IPC (a GPU on the server's host)",
    )
    g.add_argument(
        "--cuda-device",
        type=int,
        default=0,
        metavar="N",
        help="with --shared-memory cuda: the GPU holding the inputs (default 0)",
    )


def run_server_load(args, console) -> int:
    from trtkit.bench.serving import LoadSettings, load_test, render
    from trtkit.cli.render import write_json
    from trtkit.errors import UsageError

    if not args.server or not args.server_model:
        raise UsageError("give an engine or ONNX model to benchmark, or --server URL --model NAME for a Triton server")
    try:
        levels = tuple(int(c) for c in args.concurrency.split(",") if c.strip())
    except ValueError:
        raise UsageError(f"--concurrency {args.concurrency!r}: give numbers separated by commas, e.g. 1,8,64") from None
    settings = LoadSettings(
        concurrency=levels,
        duration_s=args.duration_s,
        max_requests=args.requests,
        warmup_s=args.warmup_ms / 1000,
        batch=args.batch,
        grpc=args.grpc,
        streaming=args.streaming,
        shared_memory=args.shared_memory,
        cuda_device=args.cuda_device,
        procs=args.procs,
        client=args.client,
        connections=args.connections,
    )
    results = load_test(args.server, args.server_model, settings)
    protocol = ("gRPC stream" if args.streaming else "gRPC") if args.grpc else "HTTP"
    if args.client == "wire":
        protocol += f", wire client, {args.connections} connection(s) a process"
    render(
        results,
        console,
        title=f"trtkit bench {args.server_model} on {args.server} ({protocol}, batch {args.batch})",
        # the wire client's calls cost a fraction of tritonclient's CPU (docs/performance.md, Serving)
        more_procs="--procs N"
        if args.client == "wire" or not args.grpc or args.streaming
        else "--procs N, or send with trtkit's wire client: --client wire",
    )
    if args.json:
        write_json(
            args.json,
            {
                "server": args.server,
                "model": args.server_model,
                "protocol": protocol,
                "batch": args.batch,
                "shared_memory": args.shared_memory,
                "procs": args.procs,
                "client": args.client,
                "connections": args.connections,
                "concurrency": {str(r.concurrency): r.to_json() for r in results},
            },
        )
    return 1 if any(r.failed for r in results) else 0
