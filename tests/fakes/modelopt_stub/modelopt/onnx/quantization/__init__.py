"""``quantize``: ModelOpt's call signature, trtkit's placement (every layer) with every activation's range 1.0 (no
calibration). Like ModelOpt it rewrites the input model (shapes inferred). Records its arguments beside the output
(``OUTPUT.args.json``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[6]))


def quantize(onnx_path: str, quantize_mode: str = "int8", calibration_data=None, calibration_method=None,
             output_path: str | None = None, **kwargs) -> None:
    import onnx

    from trtkit.quant.qdq import QdqOptions, insert_qdq, plan_qdq

    model = onnx.load(onnx_path)
    onnx.save(onnx.shape_inference.infer_shapes(model), onnx_path)  # as ModelOpt does: the input model is rewritten
    plan = plan_qdq(model, QdqOptions(keep_output_layers=False, min_weight_elements=0))
    qdq, _ = insert_qdq(model, {name: 1.0 for name in plan.activations}, plan)
    out = output_path or onnx_path.replace(".onnx", ".quant.onnx")
    onnx.save(qdq, out)
    shapes = {name: list(array.shape) for name, array in (calibration_data or {}).items()}
    record = {"quantize_mode": quantize_mode, "calibration_method": calibration_method, "calibration_data": shapes,
              **{k: v for k, v in kwargs.items() if isinstance(v, (str, int, float, list))}}
    Path(out + ".args.json").write_text(json.dumps(record))
