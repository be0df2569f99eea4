"""What :func:`trtkit.compare.compare` found: one row per engine, batch size and timing mode."""

from __future__ import annotations

from dataclasses import dataclass, field

from trtkit.bench.stats import Summary

SCHEMA_VERSION = 1
MB = 1 << 20


@dataclass
class Row:
    """One engine at one batch size in one timing mode; or, with ``reason``, a precision that could not be had.

    Attributes:
        precision: ``fp32``, ``fp16``, ``bf16`` or ``int8``.
        profile: ``dynamic`` (one profile over all batch sizes) or ``static`` (an engine for this batch size alone).
        batch: images per query (``None`` on a row that is not available).
        mode: ``graph`` (replayed from a CUDA graph) or ``plain`` (``execute_async_v3``).
        latency: H2D + compute + D2H of a query on the GPU (CUDA events), over the samples of every round.
        compute: the GPU compute time of a query (CUDA events).
        images_per_s: images per second with queries kept in flight.
        engine_mb: the engine file's size.
        memory: device memory (MB) from the driver's free-memory figures: ``weights`` (loading the engine),
            ``context`` (creating the execution context: activations and I/O buffers), ``graph`` (the first call at
            this batch size, which captures the CUDA graph; 0 in plain mode), and ``activations`` (what TensorRT asks
            for the context, part of ``context``).
        accuracy: the engine's scores (``None`` without evaluation; static engines are not scored).
        speedup: images per second over the baseline precision's dynamic engine at this batch size and mode.
        reason: why this precision is not available.
        engine: the engine file.
    """

    precision: str
    profile: str
    batch: int | None = None
    mode: str | None = None
    latency: Summary | None = None
    compute: Summary | None = None
    images_per_s: float | None = None
    engine_mb: float | None = None
    memory: dict = field(default_factory=dict)
    accuracy: dict | None = None
    speedup: float | None = None
    reason: str | None = None
    engine: str | None = None

    @property
    def available(self) -> bool:
        return self.reason is None

    @property
    def device_memory_mb(self) -> float | None:
        """Weights, context and (in graph mode) the CUDA graph's memory."""
        return sum(self.memory[k] for k in ("weights", "context", "graph")) if self.memory else None

    def to_json(self) -> dict:
        lat, gpu = self.latency, self.compute
        return {
            "precision": self.precision,
            "profile": self.profile,
            "batch": self.batch,
            "mode": self.mode,
            "available": self.available,
            "reason": self.reason,
            "mean_ms": _round(lat and lat.mean),
            "std_ms": _round(lat and lat.stdev),
            "median_ms": _round(lat and lat.median),
            "p99_ms": _round(lat and lat.p99),
            "samples": lat.count if lat else None,
            "gpu_ms": _round(gpu and gpu.mean),
            "gpu_ms_per_image": _round(gpu and self.batch and gpu.mean / self.batch),
            "images_per_s": _round(self.images_per_s, 2),
            "speedup": _round(self.speedup, 3),
            "engine_mb": _round(self.engine_mb, 3),
            "device_memory_mb": _round(self.device_memory_mb, 3),
            "memory_mb": {k: _round(v, 3) for k, v in self.memory.items()},
            "accuracy": self.accuracy,
            "engine": self.engine,
        }


@dataclass
class CompareResult:
    """Every row, the ONNX model's scores (``reference``), the engines measured in each round (in the order they
    went) and the environment."""

    model: str
    environment: dict
    baseline: str
    rows: list[Row]
    reference: dict | None = None
    rounds: list[list[str]] = field(default_factory=list)
    engines: list[dict] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "schema": SCHEMA_VERSION,
            "model": self.model,
            "environment": self.environment,
            "baseline": self.baseline,
            "reference": self.reference,
            "rounds": self.rounds,
            "engines": self.engines,
            "rows": [row.to_json() for row in self.rows],
        }


def _round(value, digits: int = 5):
    return None if value is None else round(float(value), digits)
