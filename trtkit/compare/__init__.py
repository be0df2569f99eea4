"""The table users publish to choose a deployment: one model in several precisions and batch sizes, side by side.

from trtkit.compare import CompareSettings, compare, to_markdown
result = compare("model.onnx", CompareSettings(precisions=("fp32", "fp16"), batches=(1, 8)))
print(to_markdown(result))
"""

from trtkit.compare.job import CompareSettings, EvalSettings, Step, compare
from trtkit.compare.report import render, save_plot, to_markdown
from trtkit.compare.result import CompareResult, Row

__all__ = [
    "CompareResult",
    "CompareSettings",
    "EvalSettings",
    "Row",
    "Step",
    "compare",
    "render",
    "save_plot",
    "to_markdown",
]
