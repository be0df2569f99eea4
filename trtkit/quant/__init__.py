"""ONNX rewrites that change a model's precision: FP16/BF16 conversion (:mod:`.fp16`), Q/DQ placement and insertion
(:mod:`.qdq`), opset upgrade for FP16 Q/DQ scales (:mod:`.opset`). The calibration that gives Q/DQ its ranges is in
:mod:`calibrators` (:mod:`calibrators.explicit`)."""

from trtkit.quant.fp16 import Conversion, convert_float, convert_to_bf16, convert_to_fp16
from trtkit.quant.qdq import QdqOptions, QdqPlan, insert_qdq, plan_qdq

__all__ = [
    "Conversion",
    "convert_float",
    "convert_to_bf16",
    "convert_to_fp16",
    "QdqOptions",
    "QdqPlan",
    "insert_qdq",
    "plan_qdq",
]
