"""Proof of precision: what share of an engine's layers run in each precision, from the engine inspector.

Called by :func:`trtkit.build.builder.build_serialized` as ``analyze(engine_info_json, requested)``; keep that
signature and ``PrecisionReport.to_json()`` / ``PrecisionReport.check(require)``.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

from trtkit._version_compat import inspector_layers
from trtkit.errors import BuildError

logger = logging.getLogger("trtkit")


@dataclass
class PrecisionReport:
    requested: str
    layers_by_precision: dict = field(default_factory=dict)
    total_layers: int = 0

    def share(self, precision: str) -> float:
        return self.layers_by_precision.get(precision, 0) / self.total_layers if self.total_layers else 0.0

    def to_json(self) -> dict:
        return {"requested": self.requested, "total_layers": self.total_layers,
                "layers_by_precision": dict(self.layers_by_precision)}

    def check(self, require: bool = False) -> list:
        """Warn (or raise with ``require``) when a reduced precision was asked but most layers run in FP32."""
        if self.requested == "fp32" or not self.total_layers:
            return []
        wanted = {"fp16": ("FP16",), "bf16": ("BF16",), "int8": ("INT8", "FP16")}[self.requested]
        reduced = sum(self.layers_by_precision.get(p, 0) for p in wanted)
        if reduced * 2 >= self.total_layers:
            return []
        msg = (f"--{self.requested} was asked but only {reduced} of {self.total_layers} layers run in "
               f"{'/'.join(wanted)} ({self.layers_by_precision})")
        if require:
            raise BuildError(msg + "; --require-precision makes this an error")
        logger.warning(msg)
        return [msg]


def analyze(engine_info_json: str, requested: str) -> PrecisionReport:
    layers = inspector_layers(engine_info_json)
    counts = Counter(layer.precision or "unknown" for layer in layers)
    return PrecisionReport(requested, dict(counts), len(layers))
