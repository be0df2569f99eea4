"""Rendering for the CLI: rich consoles and tables, kept apart from the logic that produces the data."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

PLAIN_WIDTH = 160  # the console's width when writing to a file or pipe


def make_console(*, stderr: bool = False, file=None, width: int | None = None):
    """A rich Console; respects ``NO_COLOR`` and plain output when not a terminal, where tables are not wrapped at
    80 columns (``COLUMNS`` still sets the width)."""
    from rich.console import Console

    stream = file or (sys.stderr if stderr else sys.stdout)
    if width is None and "COLUMNS" not in os.environ and not getattr(stream, "isatty", lambda: False)():
        width = PLAIN_WIDTH
    return Console(
        file=file,
        stderr=stderr and file is None,
        width=width,
        no_color=bool(os.environ.get("NO_COLOR")),
        highlight=False,
    )


def table(title: str, columns: list, rows: list):
    """A rich Table; columns holding only numbers are right-aligned, the others left-aligned."""
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for i, col in enumerate(columns):
        numeric = bool(rows) and all(isinstance(r[i], (int, float)) or r[i] is None for r in rows)
        t.add_column(col, justify="right" if numeric else "left", overflow="fold")
    for row in rows:
        t.add_row(*[_cell(v) for v in row])
    return t


def _cell(value):
    """The cell's text, never read as rich markup (a message quoting ``[min=1, max=1]`` keeps its brackets)."""
    from rich.text import Text

    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return Text(str(value))


def shape_str(shape) -> str:
    return "x".join(str(d) for d in shape) if shape is not None else "-"


def fmt_bytes(n) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024
    return str(n)


def write_json(path, data) -> None:
    """Write ``data`` as JSON to ``path`` (``-`` for stdout), atomically for files."""
    from trtkit._atomic import write_text_atomic

    text = json.dumps(data, indent=2, sort_keys=True, default=_json_default) + "\n"
    if str(path) == "-":
        sys.stdout.write(text)
    else:
        write_text_atomic(Path(path), text)


def _json_default(value):
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "to_json"):
        return value.to_json()
    return str(value)
