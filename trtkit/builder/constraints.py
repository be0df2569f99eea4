"""Precision constraints: make TensorRT run the math layers in the asked precision, not merely allow it.

``BuilderFlag.FP16``/``INT8`` only *allow* a lower precision: TensorRT times each layer and keeps FP32 wherever that is
faster, so a small model built with ``--fp16`` or with an INT8 calibrator may run entirely in FP32/TF32, and trtkit's
precision report says so. ``prefer`` sets the precision of every convolution / matrix multiply layer and
``PREFER_PRECISION_CONSTRAINTS`` (TensorRT follows them where it has an implementation and warns where it has none);
``obey`` sets ``OBEY_PRECISION_CONSTRAINTS`` (the build fails where it has none).

Only for builds where TensorRT picks the precisions (the FP16/BF16 flag, the INT8 calibrator): a strongly typed
network takes its types from the model, and Q/DQ nodes already fix where INT8 runs.
"""

from __future__ import annotations

from trtkit import _version_compat as compat
from trtkit.errors import UnsupportedError

# Layers whose math the precision is about (the rest follow their inputs or are free to reformat).
MATH_LAYERS = frozenset({"CONVOLUTION", "DECONVOLUTION", "FULLY_CONNECTED", "MATRIX_MULTIPLY"})
_DATA_TYPES = {"fp16": "HALF", "bf16": "BF16", "int8": "INT8"}
_FLAGS = {"prefer": "PREFER_PRECISION_CONSTRAINTS", "obey": "OBEY_PRECISION_CONSTRAINTS"}


def check_applicable(mode: str, precision: str, *, strongly_typed: bool, explicit_int8: bool) -> None:
    """Refuse constraints where they mean nothing, saying why and what to use.

    Raises:
        UnsupportedError: fp32 (nothing to constrain), a strongly typed network, or INT8 through Q/DQ nodes.
    """
    if mode == "none":
        return
    if precision not in _DATA_TYPES:
        raise UnsupportedError(
            f"precision_constraints '{mode}' needs an FP16, BF16 or INT8 build (this build is {precision}: there "
            "is no lower precision to ask for)",
            field="precision_constraints",
        )
    if strongly_typed:
        raise UnsupportedError(
            f"precision_constraints '{mode}' applies where TensorRT picks the precisions (FP16 mode 'flag', "
            "INT8 mode 'calibrator'); this network is strongly typed, so its types already come from the model",
            field="precision_constraints",
        )
    if explicit_int8:
        raise UnsupportedError(
            f"precision_constraints '{mode}' does not apply to INT8 mode 'qdq': the Q/DQ nodes already fix "
            "where INT8 runs (use INT8 mode 'calibrator' to constrain layers instead)",
            field="precision_constraints",
        )


def apply(trt, network, bconfig, precision: str, mode: str) -> list:
    """Set the math layers of ``network`` to ``precision`` and the constraint flag of ``mode`` on ``bconfig``.

    Returns:
        The names of the layers constrained (empty for mode ``none``).

    Raises:
        UnsupportedError: this TensorRT lacks the flag or data type.
    """
    if mode == "none":
        return []
    data_type = getattr(trt.DataType, _DATA_TYPES[precision], None)
    if data_type is None:
        raise UnsupportedError(f"TensorRT {compat.version_string(trt)} has no DataType.{_DATA_TYPES[precision]}")
    compat.set_builder_flag(trt, bconfig, _FLAGS[mode])
    names = []
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        if compat.enum_name(layer.type) in MATH_LAYERS:
            layer.precision = data_type
            names.append(layer.name)
    return names
