"""``trtkit`` command line: parse arguments, load the subcommand's module lazily, turn errors into exit codes.

Exit codes, the same for every command: 0 success; 2 a usage error (argparse, or a
:class:`~trtkit.errors.UsageError`: a wrong value or a conflict of options); 1 any other
:class:`~trtkit.errors.TrtkitError` (a file, model, engine or the environment). Errors are one line on stderr. With
``--json -`` stdout carries the JSON alone: tables and progress go to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import sys

# subcommand -> module; each module has HELP, add_arguments(parser) and run(args, console) -> int
COMMANDS = {
    "build": "trtkit.cli.build",
    "run": "trtkit.cli.run",
    "bench": "trtkit.cli.bench",
    "parity": "trtkit.cli.parity",
    "inspect": "trtkit.cli.inspect",
    "sanitize": "trtkit.cli.sanitize",
    "doctor": "trtkit.cli.doctor",
    "demo": "trtkit.cli.demo",
    "eval": "trtkit.cli.eval",
    "compare": "trtkit.cli.compare",
    "export": "trtkit.cli.export",
    "serve": "trtkit.cli.serve",
}

# one-line help shown by `trtkit --help` without importing every subcommand module
SUMMARIES = {
    "build": "Build a TensorRT engine from an ONNX model (profiles, precision, timing cache, manifest).",
    "run": "Run an engine on .npy/.npz or random inputs, or stream a video or image folder through it.",
    "bench": "Measure an engine: latency percentiles, throughput, H2D/compute/D2H, CUDA graphs.",
    "parity": "Compare an engine's outputs against its ONNX model, with verdicts.",
    "inspect": "Show an ONNX model's or engine's inputs, outputs, profiles, layers and precisions.",
    "sanitize": "Apply trtkit's compatibility rewrites and constant folding to an ONNX model, list them and save "
    "the result.",
    "doctor": "Check TensorRT, cuda-python, the CUDA driver and the GPU, with fixes.",
    "demo": "Build a built-in sample CNN in FP32 and FP16, run it and compare with the ONNX model.",
    "eval": "Measure accuracy: COCO mAP for detectors, top-1/top-5 for classifiers, keypoint deviation (pose).",
    "compare": "Compare precisions and batch sizes of one ONNX model: latency, images/s, memory and accuracy in one "
    "table (JSON, Markdown, a plot).",
    "export": "Export an engine to a runtime's own layout: a Triton Inference Server model repository.",
    "serve": "Serve engines on a real Triton Inference Server (pytriton), dynamic batching, HTTP and gRPC.",
}


class _Parser(argparse.ArgumentParser):
    """argparse parser that loads a subcommand's options only when that subcommand is used."""

    def error(self, message):
        """A usage error in two lines (what is wrong, where the options are listed), exit 2."""
        self.exit(2, f"{self.prog}: error: {message}\n(`{self.prog} --help` lists the options)\n")


def make_parser(command: str | None = None) -> argparse.ArgumentParser:
    from trtkit.cli.options import NEGATIVE_VALUE

    parser = _Parser(prog="trtkit", description="ONNX to fast, correct TensorRT engines, run from Python.")
    add_verbose_option(parser, default=False)
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        if name == command:
            module = importlib.import_module(module_name)
            p = sub.add_parser(name, help=module.HELP, description=module.HELP)
            p._negative_number_matcher = NEGATIVE_VALUE  # `--workspace -4G` reaches parse_size, which says why
            module.add_arguments(p)
            nested = [a.choices.values() for a in p._actions if isinstance(a, argparse._SubParsersAction)]
            for each in (p, *(q for choices in nested for q in choices)):  # `export triton`, `eval detection` too
                add_verbose_option(each)
            p.set_defaults(command_module=module)
        else:
            sub.add_parser(name, help=SUMMARIES[name], add_help=False)
    return parser


def add_verbose_option(parser, default=argparse.SUPPRESS) -> None:
    """``-v/--verbose``, before the subcommand or after it (there it leaves the value given before alone)."""
    parser.add_argument(
        "--verbose", "-v", action="store_true", default=default, help="show tracebacks and TensorRT's log"
    )


def _version() -> str:
    from trtkit import __version__

    return f"trtkit {__version__}"


def _command_of(argv: list) -> str | None:
    for arg in argv:
        if arg in COMMANDS:
            return arg
        if not arg.startswith("-"):
            return None
    return None


def main(argv: list | None = None) -> int:
    """Entry point of the ``trtkit`` command; returns the exit code (also used by tests)."""
    from trtkit.cli.render import make_console

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = make_parser(_command_of(argv))
    try:
        args = parser.parse_args(argv)
        args.argv = argv  # the command line as given, for results that record how they were made
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    if not getattr(args, "command_module", None):
        parser.print_help()
        return 0 if args.command is None else 2
    console = make_console(stderr=getattr(args, "json", None) == "-")
    with _cli_logging(args.verbose):
        return _run(args, console)


def _run(args, console) -> int:
    from trtkit.cli.options import flag_message
    from trtkit.errors import TrtkitError, UsageError

    try:
        return int(args.command_module.run(args, console) or 0)
    except TrtkitError as exc:
        if args.verbose:
            console.print_exception()
        _error_line(f"error: {flag_message(exc)}")
        return 2 if isinstance(exc, UsageError) else 1
    except KeyboardInterrupt:
        _error_line("interrupted")
        return 130


def _error_line(text: str) -> None:
    sys.stderr.write(text.rstrip() + "\n")


@contextlib.contextmanager
def _cli_logging(verbose: bool):
    """Show trtkit's log on stderr for the duration of one command, then restore the logger as it was."""
    from rich.logging import RichHandler

    from trtkit.cli.render import make_console

    logger = logging.getLogger("trtkit")
    handler = RichHandler(console=make_console(stderr=True), show_time=False, show_path=False)
    handler.setFormatter(logging.Formatter("%(message)s"))
    saved = (logger.level, logger.propagate)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if verbose else logging.WARNING)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
