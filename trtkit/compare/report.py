"""A :class:`~trtkit.compare.result.CompareResult` as a rich table, Markdown, or a PNG (matplotlib)."""

from __future__ import annotations

import io
from pathlib import Path

from trtkit.errors import DependencyError

METRIC_NAMES = {"map": "mAP@[.5:.95]", "top1": "top-1", "max_px": "max px"}
COLUMNS = (
    "precision,engine,batch,mode,mean ± std ms,median ms,p99 ms,GPU ms/image,images/s,speed-up,engine MB,device MB"
).split(",")
LOW = "↓"  # after a score far below the ONNX model's


def table(result) -> tuple[list, list]:
    """``(column names, rows of cell strings)``: every available row, then the ONNX model's scores."""
    metric = (result.reference or {}).get("metric")
    columns = COLUMNS + ([METRIC_NAMES[metric], "Δ vs onnx"] if metric else [])
    rows = []
    for r in (r for r in result.rows if r.available):
        lat, gpu = r.latency, r.compute
        cells = [
            r.precision,
            r.profile,
            str(r.batch),
            r.mode,
            f"{lat.mean:.3f} ± {lat.stdev:.3f}",
            f"{lat.median:.3f}",
            f"{lat.p99:.3f}",
            f"{gpu.mean / r.batch:.4f}",
            f"{r.images_per_s:,.1f}",
            "-" if r.speedup is None else f"{r.speedup:.2f}×",
            f"{r.engine_mb:.1f}",
            f"{r.device_memory_mb:.1f}",
        ]
        if metric:
            acc = r.accuracy or {}
            score = acc.get(metric)
            cells += [
                "-" if score is None else f"{score:.2f}" + (f" {LOW}" if acc.get("below_reference") else ""),
                "-" if acc.get("delta") is None else f"{acc['delta']:+.2f}",
            ]
        rows.append(cells)
    if metric:
        score = result.reference["accuracy"]
        rows.append(
            ["onnx", result.reference["model"]]
            + ["-"] * (len(COLUMNS) - 2)
            + ["-" if score is None else f"{score[metric]:.2f}", "-"]
        )
    return columns, rows


def notes(result) -> list[str]:
    """What the table leaves out: the precisions not available and why, and the sign of a low score."""
    lines = [f"{r.precision}: not available: {r.reason}" for r in result.rows if not r.available]
    ref = result.reference
    if ref and any((r.accuracy or {}).get("below_reference") for r in result.rows):
        what = "pixels from" if ref["metric"] == "max_px" else "points below"
        lines.append(f"{LOW}: more than {ref['max_drop']:g} {what} the ONNX model's")
    return lines


def caption(result) -> str:
    env = result.environment
    return (
        f"{Path(result.model).name} on {env.get('gpu') or 'an unknown GPU'}, TensorRT {env.get('tensorrt')}; "
        f"latency: H2D + compute + D2H of a query on the GPU (CUDA events) over {len(result.rounds)} rounds; "
        f"speed-up: images/s over {result.baseline} (dynamic profile) at the same batch size and mode"
    )


def render(result, console) -> None:
    """Print the table, its caption and notes on a rich ``console``."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    columns, rows = table(result)
    t = Table(title=caption(result), box=box.SIMPLE_HEAD, title_justify="left")
    for i, name in enumerate(columns):
        t.add_column(name, justify="left" if i < 2 or i == 3 else "right", overflow="fold")
    for cells in rows:
        t.add_row(*(Text(c, style="red" if LOW in c else "") for c in cells))
    console.print(t)
    for line in notes(result):
        console.print(Text(line, style="yellow"))


def to_markdown(result) -> str:
    """The table as GitHub-flavoured Markdown, its caption above and notes below."""
    columns, rows = table(result)
    lines = [caption(result), "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |" for cells in rows]
    extra = notes(result)
    return "\n".join(lines + ([""] + [f"- {n}" for n in extra] if extra else [])) + "\n"


def check_plot() -> None:
    """Raise :class:`DependencyError` with the install line when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise DependencyError("Plotting needs matplotlib: pip install 'trtkit[plot]'") from exc


def save_plot(result, path) -> None:
    """A PNG: latency against batch size per precision (CUDA graph, dynamic profile) and, when scored, accuracy
    against images/s at the largest batch size.

    Raises:
        DependencyError: matplotlib is missing.
    """
    from trtkit._atomic import write_bytes_atomic

    check_plot()
    from matplotlib.figure import Figure

    rows = [r for r in result.rows if r.available and r.profile == "dynamic" and r.mode == "graph"]
    metric = (result.reference or {}).get("metric")
    figure = Figure(figsize=(11 if metric else 6, 4.5), layout="constrained")
    axes = figure.subplots(1, 2 if metric else 1, squeeze=False)[0]
    for precision in dict.fromkeys(r.precision for r in rows):
        mine = [r for r in rows if r.precision == precision]
        axes[0].plot([r.batch for r in mine], [r.latency.mean for r in mine], marker="o", label=precision)
    axes[0].set(xlabel="batch size", ylabel="latency, ms (CUDA graph)", title="Latency against batch size")
    axes[0].legend()
    if metric:
        largest = [r for r in rows if r.batch == max(x.batch for x in rows) and r.accuracy]
        for r in largest:
            axes[1].scatter(r.images_per_s, r.accuracy[metric])
            axes[1].annotate(r.precision, (r.images_per_s, r.accuracy[metric]))
        if result.reference["accuracy"]:
            axes[1].axhline(result.reference["accuracy"][metric], linestyle="--", color="grey", label="onnx")
            axes[1].legend()
        batch = largest[0].batch if largest else "-"
        axes[1].set(xlabel=f"images/s at batch {batch}", ylabel=METRIC_NAMES[metric], title="Accuracy against speed")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=120)
    write_bytes_atomic(Path(path), buffer.getvalue())
