"""An opset outside the parser's documented range: onnx's version converter, else a failure naming the range."""

from __future__ import annotations

from trtkit.builder.rewrites.base import FAILED, Rewrite, main_opset


def rewrite(proto, target) -> list:
    """Convert the model down to ``target.max_opset`` when it is above it."""
    import onnx
    import onnx.version_converter

    opset = main_opset(proto)
    if target.max_opset is None or opset <= target.max_opset:
        return []
    why = f"{target.label}'s parser documents ai.onnx opsets up to {target.max_opset}; the model uses {opset}"
    try:
        converted = onnx.version_converter.convert_version(proto, target.max_opset)
    except Exception as exc:  # noqa: BLE001 - the converter raises RuntimeError or its own assertion types
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return [
            Rewrite(
                "opset",
                "model",
                f"could not convert opset {opset} to {target.max_opset} with onnx's "
                f"version converter ({first[:200]}); re-export the model at opset {target.max_opset} or "
                "lower, or use a newer TensorRT",
                why,
                FAILED,
            )
        ]
    functions = list(proto.functions)
    proto.CopyFrom(converted)
    if functions and not proto.functions:  # the converter drops model-local functions
        proto.functions.extend(functions)
    return [
        Rewrite(
            "opset", "model", f"converted from opset {opset} to {target.max_opset} with onnx's version converter", why
        )
    ]
