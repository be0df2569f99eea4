"""``trtkit export``: engines out to other runtimes (``trtkit export triton ENGINE --repo DIR``)."""

from __future__ import annotations

from trtkit.cli import options, render

HELP = "Export an engine to a runtime's own layout: a Triton Inference Server model repository."


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="target", metavar="TARGET", required=True)
    p = sub.add_parser(
        "triton",
        help="write REPO/<name>/config.pbtxt and REPO/<name>/1/model.plan for Triton's TensorRT backend",
        description="Write a Triton model repository entry.",
    )
    p.add_argument("engine", help="engine file (its manifest names the TensorRT it was built with)")
    p.add_argument("--repo", required=True, metavar="DIR", help="model repository folder")
    p.add_argument("--name", help="model name (default: the engine file's stem)")
    p.add_argument("--instances", type=int, default=1, metavar="N", help="instances per GPU (default 1)")
    p.add_argument("--gpus", metavar="LIST", help="GPU indices for the instances, e.g. 0,1 (default: all)")
    options.add_cuda_graph_option(p)
    options.add_triton_model_options(p)
    p.add_argument(
        "--triton-version",
        metavar="V",
        help="the Triton you deploy on (25.01 or 2.54.0): warns if its TensorRT is not the engine's",
    )
    p.add_argument("--force", action="store_true", help="write into a repository that exists and is not empty")
    options.add_json_option(p)


def run(args, console) -> int:
    from trtkit.export.triton import write_repository

    result = write_repository(
        args.engine,
        args.repo,
        name=args.name,
        instances=args.instances,
        gpus=parse_gpus(args.gpus),
        max_queue_delay_us=args.max_queue_delay_us,
        cuda_graphs=args.cuda_graph,
        graph_batches=args.graph_batches,
        options=args.tensorrt_options,
        triton_version=args.triton_version,
        force=args.force,
        preferred=args.preferred_batch,
    )
    m = result.model
    rows = [
        (t.name, "input" if t in m.inputs else "output", t.triton_dtype, render.shape_str(t.dims))
        for t in m.inputs + m.outputs
    ]
    console.print(
        render.table(f"{result.folder} (max_batch_size {m.max_batch_size})", ["tensor", "kind", "type", "dims"], rows)
    )
    console.print(f"wrote {result.folder / 'config.pbtxt'} and {result.folder / '1' / 'model.plan'}")
    if args.json:
        render.write_json(
            args.json,
            {
                "folder": str(result.folder),
                "config": result.config,
                "max_batch_size": m.max_batch_size,
                "warnings": result.warnings,
                "tensorrt": m.tensorrt,
            },
        )
    return 0


def parse_gpus(text: str | None) -> tuple:
    """``"0,1"`` -> ``(0, 1)``; ``None`` -> ``()``."""
    from trtkit.errors import TrtkitError

    if not text:
        return ()
    try:
        gpus = tuple(int(g) for g in text.split(",") if g.strip())
    except ValueError:
        raise TrtkitError(f"--gpus {text!r}: give GPU indices separated by commas, e.g. 0,1") from None
    if not gpus or any(g < 0 for g in gpus):
        raise TrtkitError(f"--gpus {text!r}: give GPU indices 0 or above separated by commas, e.g. 0,1")
    return gpus
