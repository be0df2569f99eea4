#!/usr/bin/env python3
"""The reference pages of the documentation site, generated from the code so they cannot drift from it.

- the command line: one page per ``trtkit`` command, from the argparse parsers that ``trtkit.cli.main`` builds
  (usage, description, every option with its help, nested commands such as ``trtkit eval detection``);
- the Python API: one page per public package, a mkdocstrings ``:::`` block for each name the package exports
  (``trtkit``'s lazy exports included), so a name added or removed in the code appears or vanishes here.

``scripts/mkdocs_hooks.py`` calls :func:`cli_pages` and :func:`api_pages` while ``mkdocs build`` runs. To look at the
Markdown itself: ``python scripts/docs_reference.py OUT_DIR``.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WIDTH = 100  # usage lines are wrapped at this width whatever the terminal

# public packages documented on the API pages, in the order of the navigation: (module, title, one line)
API_PACKAGES = (
    ("trtkit", "trtkit", "Build, run and prepare: the names most programs need."),
    ("trtkit.errors", "Errors", "The exceptions every trtkit call raises."),
    ("trtkit.runtime", "Runtime", "Engines in, outputs out: runners, pools, device arrays."),
    ("trtkit.builder", "Builder", "ONNX in, engine out: settings, profiles, preparation, caches."),
    ("trtkit.parity", "Parity", "An engine's outputs against its ONNX model."),
    ("trtkit.bench", "Bench", "Latency and throughput of an engine."),
    ("trtkit.detection", "Detection", "Letterbox, decode, NMS and drawing for detectors."),
    ("trtkit.pipeline", "Pipeline", "Streaming video files and image folders through an engine."),
    ("trtkit.eval", "Eval", "Accuracy: COCO mAP, top-1/top-5, keypoint deviation."),
    ("trtkit.compare", "Compare", "Precisions and batch sizes of one model side by side."),
    ("trtkit.serve", "Serve", "Engines on Triton Inference Server."),
)


# ---------------------------------------------------------------------------------------------------- command line


def _formatter(prog: str) -> argparse.HelpFormatter:
    return argparse.HelpFormatter(prog, width=WIDTH)


def subcommands(parser: argparse.ArgumentParser) -> list:
    """``[(name, help, parser)]`` of a parser's subcommands, in the order they were added."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            return [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return []


def escape(text: str) -> str:
    """Help text as Markdown: code spans kept, characters Markdown would read as markup escaped elsewhere."""
    parts = re.split(r"(`[^`]*`)", text)
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(part)
        else:
            part = part.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            out.append(re.sub(r"([\\*_\[\]|])", r"\\\1", part))
    return "".join(out)


def _options(parser: argparse.ArgumentParser, level: int) -> list:
    """Markdown for every option group of one parser: a heading of ``level`` and a definition list per group."""
    formatter = _formatter(parser.prog)
    lines = []
    for group in parser._action_groups:
        actions = [
            a
            for a in group._group_actions
            if a.help != argparse.SUPPRESS and not isinstance(a, argparse._SubParsersAction)
        ]
        if not actions:
            continue
        lines += ["#" * level + f" {group.title.capitalize()}", ""]
        if group.description:
            lines += [escape(group.description), ""]
        for action in actions:
            invocation = formatter._format_action_invocation(action)
            help_text = formatter._expand_help(action) if action.help else ""
            lines += [f"`{invocation}`", f":   {escape(' '.join(help_text.split()))}", ""]
    return lines


def command_page(parser: argparse.ArgumentParser, level: int = 1) -> list:
    """One command's reference: usage, description, options, then each subcommand the same way."""
    parser.formatter_class = _formatter
    lines = ["#" * level + f" {parser.prog}", ""]
    if parser.description:
        lines += [escape(parser.description), ""]
    lines += ["```text", parser.format_usage().strip(), "```", ""]
    lines += _options(parser, level + 1)
    for _name, _help, sub in subcommands(parser):
        lines += command_page(sub, level + 1)
    return lines


def _exit_codes() -> list:
    """The exit-code rule from ``trtkit.cli.main``'s docstring (its paragraphs after the first line)."""
    from trtkit.cli import main

    paragraphs = (main.__doc__ or "").split("\n\n")[1:]
    text = " ".join(" ".join(p.split()) for p in paragraphs)
    return [re.sub(r":class:`~?([\w.]+)`", lambda m: f"`{m.group(1).rsplit('.', 1)[-1]}`", text), ""]


def cli_pages() -> dict:
    """``{path under docs/: Markdown}``: ``reference/cli/index.md`` and one page per ``trtkit`` command."""
    from trtkit.cli import main

    top = main.make_parser()
    top.formatter_class = _formatter
    index = ["# Command line", "", escape(top.description or ""), "", "```text", top.format_usage().strip(), "```", ""]
    index += _options(top, 2)
    index += ["## Exit codes", ""] + _exit_codes()
    index += ["## Commands", ""]
    pages = {}
    for name in main.COMMANDS:
        parser = dict((n, p) for n, _h, p in subcommands(main.make_parser(name)))[name]
        pages[f"reference/cli/{name}.md"] = "\n".join(command_page(parser)).rstrip() + "\n"
        index.append(f"- [`trtkit {name}`]({name}.md): {escape(main.SUMMARIES[name])}")
    return {"reference/cli/index.md": "\n".join(index) + "\n", **pages}


# ---------------------------------------------------------------------------------------------------- Python API


def public_names(package: str) -> dict:
    """``{name: defining module}`` of what ``package`` exports: ``__all__`` (or its lazy ``_EXPORTS``).

    A name an export table lists but its module lacks (an alias of another name) is left out.
    """
    module = importlib.import_module(package)
    lazy = getattr(module, "_EXPORTS", {})
    found = {}
    for name in getattr(module, "__all__", list(lazy)):
        if name.startswith("_"):
            continue
        source = importlib.import_module(lazy[name]) if name in lazy else module
        if hasattr(source, name):
            value = getattr(source, name)
            found[name] = getattr(value, "__module__", None) or source.__name__
    return found


def api_pages() -> dict:
    """``{path under docs/: Markdown}``: ``reference/api/index.md`` and one page per public package."""
    index = ["# Python API", "", "Generated from the docstrings of each package's public names.", ""]
    pages, seen = {}, set()
    for package, title, line in API_PACKAGES:
        slug = package.replace(".", "-")
        body = [f"# {title}", "", f"`{package}`: {line}", ""]
        for name, module in public_names(package).items():
            if f"{module}.{name}" in seen:  # documented once, on the first page that exports it
                body += [f"- `{name}`: see [`{module}.{name}`][{module}.{name}]", ""]
                continue
            seen.add(f"{module}.{name}")
            body += [f"::: {module}.{name}", ""]
        pages[f"reference/api/{slug}.md"] = "\n".join(body)
        index.append(f"- [{title}]({slug}.md): {line}")
    return {"reference/api/index.md": "\n".join(index) + "\n", **pages}


def write(pages: dict, out: Path) -> None:
    for path, text in pages.items():
        target = out / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Write the generated reference pages to a folder, to read them.")
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    write({**cli_pages(), **api_pages()}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
