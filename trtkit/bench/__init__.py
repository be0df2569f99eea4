"""Measurement: timers, statistics, reports.

from trtkit.bench import BenchSettings, benchmark
result = benchmark("model.engine", BenchSettings(cuda_graph=True))
"""

from trtkit.bench.layers import LayerProfile, LayerTime, profile_layers
from trtkit.bench.measure import BenchResult, BenchSettings, benchmark
from trtkit.bench.stats import Summary, percentile, summarize

__all__ = [
    "BenchResult",
    "BenchSettings",
    "LayerProfile",
    "LayerTime",
    "Summary",
    "benchmark",
    "percentile",
    "profile_layers",
    "summarize",
]
