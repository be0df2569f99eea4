"""The demo's steps as a library function: sample CNN → FP32 and FP16 engines → run → compare with ONNX."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from trtkit._device import device_info
from trtkit.builder.api import build
from trtkit.builder.config import BuildConfig
from trtkit.builder.profiles import parse_shapes
from trtkit.parity.api import compare_engine_to_onnx
from trtkit.quant.fp16 import convert_to_fp16
from trtkit.quant.qdq import plan_qdq
from trtkit.runtime.runner import TrtRunner
from trtkit.sample_model import SAMPLE_INPUT, SAMPLE_SHAPE, make_sample_cnn

MAX_BATCH = 32  # the sample engines' profile is 1..32


@dataclass
class DemoSettings:
    batch: int = 8
    iterations: int = 200
    tactic_sources: tuple | None = None
    precisions: tuple = ("fp32", "fp16")


def missing_prerequisite() -> str | None:
    """What the demo lacks on this machine (TensorRT, cuda-python, a GPU), or ``None``."""
    try:
        import tensorrt  # noqa: F401
    except ImportError:
        return "TensorRT, which is not installed (`pip install tensorrt`; `trtkit doctor` checks the setup)"
    info = device_info()
    if "error" in info:
        return f"an NVIDIA GPU, and none is usable here: {info['error']} (`trtkit doctor` says more)"
    return None


def run_demo(workdir: Path, settings: DemoSettings, on_step: Callable[[str], None] = lambda s: None) -> list:
    """Build and check the sample CNN in each precision; one result row (dict) per precision."""
    import numpy as np
    import onnx

    model_path = workdir / "sample_cnn.onnx"
    onnx.save(make_sample_cnn(), str(model_path))
    rng = np.random.default_rng(0)
    feed = {SAMPLE_INPUT: rng.standard_normal((settings.batch, *SAMPLE_SHAPE)).astype(np.float32)}
    return [_one_precision(p, model_path, workdir, feed, settings, on_step) for p in settings.precisions]


def _one_precision(precision, model_path, workdir, feed, settings, on_step) -> dict:
    dims = "x".join(map(str, SAMPLE_SHAPE))
    # the FP32 row is true FP32 (TF32 off), so it is judged against FP32's tolerance
    config = BuildConfig(
        precision=precision,
        tactic_sources=settings.tactic_sources,
        tf32=False,
        profiles=[parse_shapes(f"{SAMPLE_INPUT}:1x{dims},{settings.batch}x{dims},{MAX_BATCH}x{dims}")],
        timing_cache=str(workdir / "timing.cache"),
    )
    on_step(f"building the {precision.upper()} engine")
    engine_path = workdir / f"sample_cnn.{precision}.engine"
    result = build(model_path, config, output=engine_path)
    on_step(f"running the {precision.upper()} engine and the ONNX model (onnx's reference evaluator)")
    times = _time_engine(engine_path, feed, settings.iterations)
    report = compare_engine_to_onnx(model_path, engine_path, inputs=[feed])
    worst = report.worst()
    return {
        "precision": precision,
        "build_s": round(result.manifest.build_seconds or 0.0, 2),
        "engine_size": len(result.engine),
        "median_ms": round(_percentile(times, 50), 4),
        "p99_ms": round(_percentile(times, 99), 4),
        "max_abs_err": max(
            (r.metrics.max_abs_error for r in worst if r.metrics is not None and r.metrics.max_abs_error is not None),
            default=None,
        ),
        "rel_err": report.max_error_ratio,
        "verdict": "PASS" if report.passed else "FAIL",
        "detail": report.verdict(),
        "layers_by_precision": (result.precision_report or {}).get("layers_by_precision"),
    }


def _time_engine(engine_path: Path, feed: dict, iterations: int) -> list:
    """End-to-end latency (ms) of ``TrtRunner.infer`` with CUDA graphs, numpy in → numpy out."""
    times = []
    with TrtRunner(engine_path, cuda_graph=True) as runner:
        runner.infer(feed)
        for _ in range(iterations):
            start = time.perf_counter()
            runner.infer(feed)
            times.append((time.perf_counter() - start) * 1e3)
    return times


def _percentile(values, q) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(values), q))


def run_cpu_demo(workdir: Path, settings: DemoSettings, on_step: Callable[[str], None] = lambda s: None) -> list:
    """What the demo can do without TensorRT or a GPU, on the sample CNN: the FP32 model and the FP16 model trtkit
    casts, both run by onnx's reference evaluator on the CPU (the FP16 error is measured, not assumed), and the Q/DQ
    placement trtkit would quantize with. One row (dict) per step; no timings (a CPU says nothing of a GPU's)."""
    import numpy as np
    import onnx
    from onnx.reference import ReferenceEvaluator

    model = make_sample_cnn()
    onnx.save(model, str(workdir / "sample_cnn.onnx"))
    rng = np.random.default_rng(0)
    feed = {SAMPLE_INPUT: rng.standard_normal((settings.batch, *SAMPLE_SHAPE)).astype(np.float32)}
    on_step("running the FP32 model on the CPU (onnx's reference evaluator)")
    reference = _first_output(ReferenceEvaluator(model), feed)
    rows: list[dict[str, Any]] = [
        {"step": "fp32 model", "what": f"output {tuple(reference.shape)}", "rel_err": None, "verdict": "reference"}
    ]
    on_step("casting the model to FP16 and running it on the CPU")
    conversion = convert_to_fp16(model)
    onnx.save(conversion.model, str(workdir / "sample_cnn.fp16.onnx"))
    half = _first_output(ReferenceEvaluator(conversion.model), feed).astype(np.float32)
    rel = float(np.abs(half - reference).max() / max(float(np.abs(reference).max()), 1e-12))
    rows.append(
        {
            "step": "fp16 model (cast by trtkit)",
            "what": f"{conversion.casts} Cast(s), {len(conversion.kept_fp32)} node(s) kept FP32",
            "rel_err": round(rel, 6),
            "verdict": "PASS" if rel <= FP16_CPU_TOLERANCE else "FAIL",
        }
    )
    on_step("planning INT8 Q/DQ placement")
    rows.append(
        {"step": "int8 Q/DQ placement", "what": plan_qdq(model).summary(), "rel_err": None, "verdict": "planned"}
    )
    return rows


# err / max|ref| the FP16 model may show against FP32 on the sample CNN (FP16 has 11 significant bits).
FP16_CPU_TOLERANCE = 1e-2


def _first_output(evaluator, feed: dict):
    """The first output of an ONNX reference evaluator's run (a list when no output names are given)."""
    outputs: Any = evaluator.run(None, feed)
    return outputs[0]
