"""``trtkit doctor``: is TensorRT usable here, and if not, what to do."""

from __future__ import annotations

from trtkit.cli import options, render

HELP = "Check TensorRT, cuda-python, the CUDA driver and the GPU, with fixes."


def add_arguments(parser) -> None:
    options.add_json_option(parser)


def run(args, console) -> int:
    from trtkit.doctor import run_checks

    checks = run_checks()
    rows = [(c.name, "ok" if c.ok else "FAIL", c.detail, c.fix) for c in checks]
    console.print(render.table("trtkit doctor", ["check", "status", "detail", "fix"], rows))
    if args.json:
        render.write_json(args.json, [c.__dict__ for c in checks])
    return 0 if all(c.ok for c in checks) else 1
