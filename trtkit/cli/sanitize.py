"""``trtkit sanitize``: show and save what ``trtkit.prepare`` does to a model (no TensorRT needed)."""

from __future__ import annotations

from pathlib import Path

from trtkit.cli import options, render

HELP = "Apply trtkit's compatibility rewrites and constant folding to an ONNX model, list them and save the result."


def add_arguments(parser) -> None:
    parser.add_argument("model", help="ONNX model")
    parser.add_argument("-o", "--output", required=True, help="where to write the prepared model (not MODEL)")
    parser.add_argument(
        "--no-fold-constants", dest="fold_constants", action="store_false", help="apply the rewrites only"
    )
    parser.add_argument(
        "--tensorrt",
        choices=("installed", "8.6"),
        default="8.6",
        help="parser to prepare for: TensorRT 8.6's documented limits (default, suits every "
        "version) or the installed TensorRT",
    )
    options.add_json_option(parser)


def run(args, console) -> int:
    from trtkit.builder.prepare import prepare
    from trtkit.builder.sanitize import saved_files
    from trtkit.model import model_files

    options.check_files(args, {"output": saved_files(args.output)}, model_files(args.model))
    trt = None
    if args.tensorrt == "installed":
        from trtkit._lazy import tensorrt

        trt = tensorrt()
    with console.status(f"preparing {Path(args.model).name}") as status:
        prepared = prepare(args.model, fold_constants=args.fold_constants, trt=trt, on_progress=status.update)
        saved = prepared.save(args.output)
    console.print(rewrite_table(prepared))
    label = prepared.target.label if prepared.target is not None else "the assumed parser"
    console.print(f"{len(prepared.applied)} rewrite(s) applied for {label}; saved {saved}")
    if prepared.hazards:  # the build refuses these: say so now, with the same words
        rows = [(h.node, h.op_type, h.what, h.advice) for h in prepared.hazards]
        console.print(render.table("what a build refuses", ["node", "op", "what", "what to change"], rows))
        count = len(prepared.hazards)
        console.print(f"{count} node(s) that {label} cannot take as they are: a build refuses the model")
    if args.json:
        render.write_json(args.json, dict(prepared.to_json(), output=str(saved)))
    return 0


def rewrite_table(prepared):
    """A rich table: one row per rewrite (what, where, why, status)."""
    rows = [(r.rewrite, r.where, r.what, r.why, r.status) for r in prepared.rewrites]
    if not rows:
        rows = [("-", "-", "nothing to change", "-", "-")]
    return render.table(f"{prepared.loaded.name}: rewrites", ["rewrite", "where", "what", "why", "status"], rows)
