"""``trtkit serve``: engines on a real Triton Inference Server, dynamic batching, HTTP and gRPC."""

from __future__ import annotations

import signal

from trtkit.cli import options, render

HELP = "Serve engines on a real Triton Inference Server, dynamic batching, HTTP and gRPC."


def add_arguments(parser) -> None:
    parser.add_argument("engines", nargs="+", metavar="ENGINE", help="engine files, one Triton model each")
    g = parser.add_argument_group("serving")
    g.add_argument(
        "--instances",
        type=int,
        default=1,
        metavar="N",
        help="model instances per GPU, each its own runner and stream (default 1)",
    )
    g.add_argument(
        "--max-batch",
        type=int,
        metavar="B",
        help="largest batch the dynamic batcher forms (default: the profile's largest)",
    )
    g.add_argument("--gpus", default="0", metavar="LIST", help="GPUs that get instances, e.g. 0,1 (default 0)")
    g.add_argument("--host", default="127.0.0.1", help="address every endpoint binds (default 127.0.0.1)")
    g.add_argument("--http-port", type=int, default=8000, metavar="PORT", help="HTTP port (default 8000)")
    g.add_argument("--grpc-port", type=int, default=8001, metavar="PORT", help="gRPC port (default 8001)")
    g.add_argument(
        "--metrics-port", type=int, default=8002, metavar="PORT", help="Prometheus metrics port (default 8002)"
    )
    g.add_argument("--strict", action="store_true", help="stop if any engine cannot be loaded")
    options.add_cuda_graph_option(g)
    g.add_argument(
        "--exit-timeout-s",
        type=int,
        default=30,
        metavar="S",
        help="on SIGTERM, how long to wait for requests in flight (default 30)",
    )
    g.add_argument("--log-file", metavar="PATH", help="keep Triton's own log there")
    g.add_argument(
        "--shared-memory",
        action="store_true",
        help="let clients send inputs through system shared memory (trtkit bench --shared-memory system; clients on "
        "this host; keep --host on loopback)",
    )
    g.add_argument(
        "--backend",
        choices=("python", "tensorrt"),
        default="python",
        help="where the engines run: python (default: a TrtRunner in each instance of Triton's Python backend) or "
        "tensorrt (Triton's own TensorRT backend, no Python in the request path; needs --triton-backends)",
    )
    g.add_argument(
        "--triton-backends",
        metavar="DIR",
        help="with --backend tensorrt: the folder holding tensorrt/libtriton_tensorrt.so, Triton's TensorRT backend "
        "for the pytriton wheel's Triton and this TensorRT (scripts/build_triton_trt_backend.sh builds it)",
    )
    options.add_triton_model_options(g, serving=True)
    g.add_argument(
        "--grpc-allocation-pool",
        type=int,
        metavar="N",
        help="gRPC request states Triton keeps for reuse (its --grpc-infer-allocation-pool-size; default Triton's, 8): "
        "requests in flight beyond N each make and free their own",
    )
    options.add_json_option(parser)


def run(args, console) -> int:
    from trtkit.cli.export import parse_gpus
    from trtkit.serve import Server, ServeSettings

    settings = ServeSettings(
        instances=args.instances,
        max_batch=args.max_batch,
        max_queue_delay_us=args.max_queue_delay_us,
        gpus=parse_gpus(args.gpus),
        host=args.host,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        strict=args.strict,
        cuda_graph=args.cuda_graph,
        exit_timeout_s=args.exit_timeout_s,
        log_file=args.log_file,
        shared_memory=args.shared_memory,
        backend=args.backend,
        triton_backends=args.triton_backends,
        graph_batches=args.graph_batches,
        tensorrt_options=tuple(n for n in args.tensorrt_options.split(",") if n.strip()),  # checked by the settings
        grpc_allocation_pool=args.grpc_allocation_pool,
        preferred_batch_sizes=args.preferred_batch,
    )
    with Server(args.engines, settings) as server:
        # the handlers first: a caller that stops the server as soon as the JSON says it is ready gets a drain
        saved = {sig: signal.signal(sig, lambda *_: server.request_stop()) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            _show(server, console)
            if args.json:
                render.write_json(args.json, status(server))
            asked = server.wait()
        finally:
            for sig, handler in saved.items():
                signal.signal(sig, handler)
        reason = None if asked else server.exit_reason()
        console.print(
            "stopping: finishing requests in flight" if asked else f"Triton exited{f': {reason}' if reason else ''}"
        )
    console.print("stopped")
    return 0 if asked else 1


def status(server) -> dict:
    """What a client needs: endpoints, models with their limits, engines not served, load and ready times."""
    return {
        "urls": server.urls(),
        "load_s": server.load_s,
        "ready_s": server.ready_s,
        "models": [
            {
                "name": m.name,
                "engine": m.engine,
                "max_batch": m.max_batch,
                "preferred_batch_sizes": list(m.preferred_batch_sizes),
                "instances": list(m.devices),
                "inputs": {t.name: [str(t.dtype), list(t.dims)] for t in m.spec.inputs},
                "outputs": {t.name: [str(t.dtype), list(t.dims)] for t in m.spec.outputs},
            }
            for m in server.models
        ],
        "failed": [{"engine": f.engine, "reason": f.reason} for f in server.failures],
    }


def _show(server, console) -> None:
    rows = [
        (
            m.name,
            m.max_batch or "unbatched",
            ",".join(map(str, m.preferred_batch_sizes)) or "-",
            ",".join(f"gpu{d}" for d in m.devices),
            m.engine,
        )
        for m in server.models
    ]
    console.print(render.table("trtkit serve", ["model", "max batch", "preferred", "instances", "engine"], rows))
    for failure in server.failures:
        console.print(f"[bold red]not served[/] {failure.engine}: {failure.reason}")
    urls = server.urls()
    console.print(
        f"ready in {server.ready_s:.2f} s after loading ({server.load_s:.2f} s): HTTP {urls['http']}, "
        f"gRPC {urls['grpc']}, metrics {urls['metrics']}; SIGTERM or Ctrl-C to stop"
    )
