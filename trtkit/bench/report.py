"""Turn a :class:`~trtkit.bench.measure.BenchResult` into JSON and a rich table."""

from __future__ import annotations

from dataclasses import asdict

SCHEMA_VERSION = 1
_ROWS = (
    ("latency", "latency (GPU)"),
    ("compute", "GPU compute"),
    ("h2d", "H2D copy"),
    ("d2h", "D2H copy"),
    ("enqueue", "enqueue (host)"),
    ("e2e", "infer() call"),
    ("e2e_copied", "infer(), input copied"),
)
_JSON_KEYS = {
    "latency": "latency_ms",
    "compute": "gpu_compute_ms",
    "h2d": "h2d_ms",
    "d2h": "d2h_ms",
    "enqueue": "enqueue_ms",
    "e2e": "e2e_ms",
    "e2e_copied": "e2e_copied_ms",
}
_COLUMNS = ("min", "mean", "median", "p90", "p95", "p99", "max")


def to_json(result, *, engine: str | None = None) -> dict:
    """A JSON-ready dict: settings, shapes, throughput, and min..max summaries in milliseconds."""
    data = {
        "schema": SCHEMA_VERSION,
        "engine": engine,
        "settings": asdict(result.settings),
        "shapes": result.shapes,
        "batch": result.batch,
        "queries": result.queries,
        "wall_s": round(result.wall_s, 6),
        "throughput": {"qps": round(result.qps, 3), "items_per_s": round(result.items_per_s, 3)},
        "warnings": list(result.warnings),
    }
    for key, _ in _ROWS:
        summary = getattr(result, key)
        data[_JSON_KEYS[key]] = summary.to_json() if summary is not None else None
    return data


def environment(trt=None) -> dict:
    """What the numbers were measured with: TensorRT's version, the GPU's name and compute capability."""
    from trtkit._device import device_info
    from trtkit._lazy import tensorrt

    info = device_info()
    return {
        "tensorrt": getattr(trt or tensorrt(), "__version__", None),
        "gpu": info.get("name"),
        "compute_capability": info.get("compute_capability"),
    }


def render(result, console, *, title: str = "trtkit bench") -> None:
    """Print the summary table, throughput and warnings on a rich ``console``."""
    from rich import box
    from rich.table import Table

    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column("time (ms)", no_wrap=True)
    for col in _COLUMNS:
        table.add_column(col, justify="right")
    for key, label in _ROWS:
        summary = getattr(result, key)
        if summary is not None:
            table.add_row(label, *(_ms(getattr(summary, c)) for c in _COLUMNS))
    console.print(table)
    shapes = ", ".join(f"{n} {tuple(s)}" for n, s in result.shapes.items())
    console.print(
        f"throughput: {result.qps:,.1f} qps, {result.items_per_s:,.1f} items/s "
        f"(batch {result.batch}, {result.queries} queries in {result.wall_s:.2f} s, "
        f"{result.settings.streams} stream(s), CUDA graph {'on' if result.settings.cuda_graph else 'off'})"
    )
    console.print(
        f"shapes: {shapes}; coefficient of variation: GPU compute {result.compute.cov:.2%}, "
        f"latency {result.latency.cov:.2%}"
    )
    console.print(
        "latency: H2D + compute + D2H of one query on the GPU (CUDA events); infer() call: a whole "
        "TrtRunner.infer from Python, numpy in and out, the same arrays every call (page-locked in place); "
        "input copied: the same with pin_reused_inputs=False, as for arrays not passed again"
    )
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")


def _ms(value: float) -> str:
    """Milliseconds with 4 significant digits at most, so the table fits 80 columns."""
    return f"{value:.3f}" if value < 100 else f"{value:.1f}"


def render_layers(profile, console, *, top: int = 15, title: str = "per-layer GPU time") -> None:
    """Print the ``top`` slowest layers of a :class:`~trtkit.bench.layers.LayerProfile` and its summary."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("ms", "share"):
        table.add_column(col, justify="right")
    for col in ("precision", "type", "layer", "tactic"):
        table.add_column(col, overflow="fold")
    for layer in profile.top(top):
        flag = " reformat" if layer.reformat else " high" if layer.high_precision else ""
        precision = (layer.precision or "?") + flag
        style = "yellow" if flag else None
        table.add_row(
            f"{layer.ms:.4f}",
            f"{layer.share:.1%}",
            precision,
            escape(layer.layer_type or "?"),
            escape(layer.name),
            escape(layer.tactic or ""),
            style=style,
        )
    console.print(table)
    s = profile.summary()
    console.print(
        f"{s['layers']} layers, {s['total_ms']:.4f} ms summed per run (mean of {profile.runs} runs without a CUDA "
        f"graph); reformats: {s['reformat_layers']} layer(s), {s['reformat_ms']:.4f} ms; FP32/TF32: "
        f"{s['fp32_tf32_layers']} layer(s), {s['fp32_tf32_ms']:.4f} ms"
    )
    by = ", ".join(f"{k} {v:.4f}" for k, v in sorted(s["ms_by_precision"].items(), key=lambda kv: -kv[1]))
    console.print(f"ms by precision: {by}")
