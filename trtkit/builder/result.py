"""What a build produces (apart from the build itself, so that a parent process reads a child's result without
importing the build's modules)."""

from __future__ import annotations

from dataclasses import dataclass, field

from trtkit.manifest import Manifest


@dataclass
class BuildResult:
    """What a build produces.

    Attributes:
        engine: the serialized engine.
        manifest: how it was built (a :class:`trtkit.manifest.Manifest`).
        timing_cache: the serialized timing cache after the build, or ``None``.
        log: TensorRT's log lines ``(severity, message)`` at INFO and above.
        precision_report: the per-precision layer report (JSON-ready dict), or ``None``.
        marks: ``{name: time.monotonic()}`` of the build's steps (:mod:`trtkit.builder.timeline`); the manifest's
            ``timings_s`` has them as seconds.
    """

    engine: bytes
    manifest: Manifest
    timing_cache: bytes | None = None
    log: list = field(default_factory=list)
    precision_report: dict | None = None
    marks: dict = field(default_factory=dict)
