"""The demo's steps as a library function: sample CNN → FP32 and FP16 engines → run → compare with ONNX."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

# max |engine - reference| / max |reference| allowed per precision
TOLERANCES = {"fp32": 2e-3, "fp16": 2e-2}


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
    from trtkit._device import device_info

    info = device_info()
    if "error" in info:
        return f"an NVIDIA GPU, and none is usable here: {info['error']} (`trtkit doctor` says more)"
    return None


def run_demo(workdir: Path, settings: DemoSettings, on_step: Callable[[str], None] = lambda s: None) -> list:
    """Build and check the sample CNN in each precision; one result row (dict) per precision."""
    import numpy as np
    import onnx

    from trtkit.sample_model import SAMPLE_INPUT, SAMPLE_SHAPE, make_sample_cnn

    model_path = workdir / "sample_cnn.onnx"
    onnx.save(make_sample_cnn(), str(model_path))
    rng = np.random.default_rng(0)
    feed = {SAMPLE_INPUT: rng.standard_normal((settings.batch, *SAMPLE_SHAPE)).astype(np.float32)}
    on_step("running the ONNX model with onnx's reference evaluator")
    reference = _reference_outputs(model_path, feed)
    return [_one_precision(p, model_path, workdir, feed, reference, settings, on_step) for p in settings.precisions]


def _reference_outputs(model_path: Path, feed: dict) -> dict:
    import onnx
    from onnx.reference import ReferenceEvaluator

    model = onnx.load(str(model_path))
    names = [o.name for o in model.graph.output]
    return dict(zip(names, ReferenceEvaluator(model).run(None, feed)))


def _one_precision(precision, model_path, workdir, feed, reference, settings, on_step) -> dict:
    from trtkit.build.api import build
    from trtkit.build.config import BuildConfig
    from trtkit.build.profiles import parse_shapes
    from trtkit.sample_model import SAMPLE_INPUT, SAMPLE_SHAPE

    dims = "x".join(map(str, SAMPLE_SHAPE))
    config = BuildConfig(precision=precision, tactic_sources=settings.tactic_sources,
                         profiles=[parse_shapes(f"{SAMPLE_INPUT}:1x{dims},{settings.batch}x{dims},32x{dims}")],
                         timing_cache=str(workdir / "timing.cache"))
    on_step(f"building the {precision.upper()} engine")
    engine_path = workdir / f"sample_cnn.{precision}.engine"
    result = build(model_path, config, output=engine_path)
    on_step(f"running the {precision.upper()} engine")
    outputs, times = _run_engine(engine_path, feed, settings.iterations)
    err, rel = _error(outputs, reference)
    return {
        "precision": precision,
        "build_s": round(result.manifest["build_seconds"], 2),
        "engine_size": len(result.engine),
        "median_ms": round(_percentile(times, 50), 4),
        "p99_ms": round(_percentile(times, 99), 4),
        "max_abs_err": float(err),
        "rel_err": float(rel),
        "verdict": "PASS" if rel <= TOLERANCES[precision] else "FAIL",
        "layers_by_precision": (result.precision_report or {}).get("layers_by_precision"),
    }


def _run_engine(engine_path: Path, feed: dict, iterations: int):
    from trtkit.runtime.runner import TrtRunner

    times = []
    with TrtRunner(engine_path, cuda_graph=True) as runner:
        outputs = {k: v.copy() for k, v in runner.infer(feed).items()}
        for _ in range(iterations):
            start = time.perf_counter()
            runner.infer(feed)
            times.append((time.perf_counter() - start) * 1e3)
    return outputs, times


def _error(outputs: dict, reference: dict):
    import numpy as np

    worst_abs, worst_rel = 0.0, 0.0
    for name, ref in reference.items():
        diff = float(np.max(np.abs(outputs[name].astype(np.float64) - ref)))
        scale = float(np.max(np.abs(ref))) or 1.0
        worst_abs, worst_rel = max(worst_abs, diff), max(worst_rel, diff / scale)
    return worst_abs, worst_rel


def _percentile(values, q) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(values), q))
