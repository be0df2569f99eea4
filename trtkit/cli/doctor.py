"""``trtkit doctor``: is TensorRT usable here, and if not, what to do."""

from __future__ import annotations

import sys

from trtkit.cli import options, render

HELP = "Check TensorRT, cuda-python, the CUDA driver and the GPU, with fixes."


def add_arguments(parser) -> None:
    options.add_json_option(parser)


def run(args, console) -> int:
    from trtkit.doctor import run_checks

    options.check_files(args, {}, {})
    checks = run_checks()
    rows = [(c.name, "ok" if c.ok else "FAIL", c.detail, c.fix) for c in checks]
    console.print(render.table("trtkit doctor", ["check", "status", "detail", "fix"], rows))
    if args.json:
        render.write_json(args.json, [c.__dict__ for c in checks])
    failed = [c.name for c in checks if not c.ok]
    if failed:  # a verdict, like parity's FAIL: the report is written, the exit code says it
        sys.stderr.write(
            f"doctor: {len(failed)} of {len(checks)} checks failed ({', '.join(failed)}); the "
            "table's 'fix' column says what to run for each\n"
        )
        return 1
    return 0
