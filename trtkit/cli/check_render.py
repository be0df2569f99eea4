"""Rendering of the op check (``trtkit inspect MODEL --check``, and ``trtkit build`` when parsing fails)."""

from __future__ import annotations

_STATUS_STYLE = {
    "supported": "[green]supported[/green]",
    "unsupported": "[red]unsupported[/red]",
    "failed": "[red]failed to import[/red]",
    "crashed": "[bold red]crashed the parser[/bold red]",
    "unknown": "[yellow]not checked[/yellow]",
}
_MAX_NODES_SHOWN = 5


def render_check(report):
    """A rich renderable: the op table, then unsupported nodes, parser errors, crash and notes.

    Args:
        report: a :class:`~trtkit.builder.opcheck.CheckReport`.
    """
    from rich.console import Group
    from rich.text import Text

    parts = [_op_table(report)]
    parts += [Text.from_markup(line) for line in _detail_lines(report)]
    return Group(*parts)


def _op_table(report):
    from rich.table import Table

    trt = f"TensorRT {report.trt_version}" if report.queried else "TensorRT not asked"
    table = Table(title=f"{report.model}: ops vs. {trt}", title_justify="left")
    versions = sorted({v for known in report.listed.values() for v in known}, key=_version_key)
    columns = [("op", "left"), ("domain", "left"), ("opset", "right"), ("count", "right"), ("status", "left")]
    columns += [(f"listed {v}", "left") for v in versions] if not report.queried else []
    for name, justify in columns + [("nodes", "left"), ("note", "left")]:
        table.add_column(name, justify=justify, overflow="fold")
    for row in report.rows:
        listed = [_LISTED[report.listed.get(row.op_type, {}).get(v)] for v in versions] if not report.queried else []
        table.add_row(
            row.op_type,
            row.domain,
            str(row.opset) if row.opset is not None else "-",
            str(row.count),
            _STATUS_STYLE.get(row.status, row.status),
            *listed,
            _names(row.nodes),
            row.note,
        )
    return table


_LISTED = {True: "yes", False: "[red]no[/red]", None: "[yellow]not listed[/yellow]"}


def _version_key(version: str) -> tuple:
    return tuple(int(p) for p in version.split(".") if p.isdigit())


def _detail_lines(report) -> list:
    lines = []
    if report.crash:
        lines.append(f"[bold red]crash:[/bold red] {_escape(report.crash)}")
    if report.unsupported_nodes:
        lines.append(f"[red]{len(report.unsupported_nodes)} node(s) the parser cannot import:[/red]")
        for node in report.unsupported_nodes[:20]:
            lines.append(f"  #{node.index} {_escape(node.name)} ({node.op_type}): {_escape(node.reason)}")
        if len(report.unsupported_nodes) > 20:
            lines.append(f"  ... and {len(report.unsupported_nodes) - 20} more")
    for i, names in enumerate(report.unsupported_subgraphs):
        lines.append(f"unsupported subgraph {i + 1} ({len(names)} nodes): {_escape(_names(names))}")
    for error in report.errors:
        lines.append(f"parser: {_escape(error)}")
    for note in report.notes:
        lines.append(f"[yellow]note:[/yellow] {_escape(note)}")
    lines.append(_verdict(report))
    return lines


def _verdict(report) -> str:
    if report.ok and report.queried:
        return "[green]every op is supported by this TensorRT's parser[/green]"
    if report.ok:
        return "[yellow]the 'listed' columns are onnx-tensorrt's published operator lists, not this machine's parser"
    return (
        "[red]this TensorRT cannot parse the model as is[/red]: try --fold-constants, re-exporting at a lower "
        "opset, or a newer TensorRT"
    )


def _names(names) -> str:
    shown = ", ".join(names[:_MAX_NODES_SHOWN])
    more = len(names) - _MAX_NODES_SHOWN
    return shown + (f" (+{more} more)" if more > 0 else "")


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(str(text))


def failure_message(report) -> str:
    """One paragraph (no markup) for the error raised when ``trtkit build`` stops after a failed check."""
    return report.failure_message()
