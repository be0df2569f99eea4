"""Statistics of timings, as pure functions (tested on synthetic timings, no GPU).

Percentiles interpolate linearly between the two nearest ranks (numpy's default), so they match what numpy reports.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

# Above this coefficient of variation the machine is too noisy for the numbers to be trusted (trtexec's threshold).
COV_LIMIT = 0.025
# Enqueue (host) time above this fraction of GPU compute time means the GPU waits for Python: launch-bound.
LAUNCH_BOUND_RATIO = 0.8


@dataclass(frozen=True)
class Summary:
    """Summary of a list of timings in milliseconds."""

    count: int
    min: float
    mean: float
    median: float
    p90: float
    p95: float
    p99: float
    max: float
    stdev: float
    cov: float

    def to_json(self) -> dict:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def percentile(sorted_values, q: float) -> float:
    """The ``q``-th percentile (0-100) of already sorted values, interpolating linearly between ranks.

    Raises:
        ValueError: no values, or ``q`` outside 0..100.
    """
    if not sorted_values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is outside 0..100")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(values_ms) -> Summary:
    """Min, mean, median, p90/p95/p99, max, standard deviation and coefficient of variation of ``values_ms``.

    Raises:
        ValueError: ``values_ms`` is empty.
    """
    values = sorted(float(v) for v in values_ms)
    if not values:
        raise ValueError("no timings to summarize")
    n = len(values)
    mean = sum(values) / n
    stdev = math.sqrt(sum((v - mean) ** 2 for v in values) / n)
    return Summary(
        n,
        values[0],
        mean,
        percentile(values, 50),
        percentile(values, 90),
        percentile(values, 95),
        percentile(values, 99),
        values[-1],
        stdev,
        stdev / mean if mean > 0 else 0.0,
    )


def throughput(count: int, wall_s: float, batch: int) -> tuple[float, float]:
    """``(queries per second, items per second)`` for ``count`` queries of ``batch`` items in ``wall_s`` seconds."""
    if wall_s <= 0:
        return 0.0, 0.0
    qps = count / wall_s
    return qps, qps * batch


def warnings_for(latency: Summary, enqueue: Summary | None, compute: Summary | None, *, cuda_graph: bool) -> list[str]:
    """Warnings about how trustworthy and how well used the measurement is.

    Returns:
        Sentences: a noisy machine (coefficient of variation of the GPU compute time, as trtexec checks, or of the
        latency when there is no compute time, above 2.5%), and a launch-bound run (median enqueue time above 0.8x
        the median GPU compute time; suggests CUDA graphs when they were off).
    """
    out = []
    what, noisy = ("GPU compute time", compute) if compute is not None else ("Latency", latency)
    if noisy.cov > COV_LIMIT:
        out.append(
            f"{what} is unstable (coefficient of variation {noisy.cov:.1%} > {COV_LIMIT:.1%}): the "
            f"machine is noisy (other processes, clocks, thermals); the numbers may not be repeatable"
        )
    if enqueue is not None and compute is not None and enqueue.median > LAUNCH_BOUND_RATIO * compute.median:
        fix = "replay it from a CUDA graph" if not cuda_graph else "use larger batches or several streams"
        out.append(
            f"Launch-bound: enqueue takes {enqueue.median:.3f} ms on the host, more than "
            f"{LAUNCH_BOUND_RATIO}x the GPU compute time ({compute.median:.3f} ms); {fix}"
        )
    return out
