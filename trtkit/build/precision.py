"""Choosing how a requested precision is reached on the installed TensorRT.

Called by :func:`trtkit.build.builder.build_serialized` as ``plan_precision(trt, model, config, caps)``; keep that
signature. (First version: FP32 and the FP16 / BF16 builder flags; the INT8 paths and FP16 cast mode extend it.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trtkit.errors import UnsupportedError


@dataclass
class PrecisionPlan:
    """What the builder must do for the asked precision.

    Attributes:
        model: the (possibly transformed) :class:`trtkit.build.onnx_model.LoadedModel` to parse.
        strongly_typed: create the network strongly typed.
        flags: builder flag names to set (e.g. ``("FP16",)``).
        calibrator: an ``IInt8Calibrator`` to attach, or ``None``.
        notes: what was decided, for the build summary and manifest.
    """

    model: object
    strongly_typed: bool = False
    flags: tuple = ()
    calibrator: object = None
    notes: list = field(default_factory=list)


def plan_precision(trt, model, config, caps) -> PrecisionPlan:
    """Decide flags, network typing and model transforms for ``config.precision`` on this TensorRT."""
    if config.precision == "fp32":
        return PrecisionPlan(model, strongly_typed=config.strongly_typed)
    if config.precision in ("fp16", "bf16"):
        flag = config.precision.upper()
        if flag not in caps.builder_flags:
            raise UnsupportedError(
                f"--{config.precision} as a builder flag is not available in TensorRT "
                f"{'.'.join(map(str, caps.version))}; use --fp16-mode cast (a strongly typed model)"
            )
        return PrecisionPlan(model, flags=(flag,), notes=[f"{flag} builder flag"])
    raise UnsupportedError(f"Precision '{config.precision}' is not supported by this build of trtkit yet")
