#!/usr/bin/env python3
"""Quick start: ONNX → FP16 engine with a dynamic batch → run with CUDA graphs → check against the ONNX model.

    python samples/quickstart/run.py [--model model.onnx --input-name images] [--workdir out/]

Without --model it uses trtkit's built-in sample CNN. Needs TensorRT and an NVIDIA GPU; elsewhere it says what is
missing and exits 1.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="ONNX model with one image input (default: the built-in sample CNN)")
    p.add_argument("--input-name", default="images")
    p.add_argument("--size", type=int, default=64, help="input height/width for the built-in model")
    p.add_argument("--workdir", default="quickstart-out")
    p.add_argument("--tactic-sources", help="e.g. EDGE_MASK_CONVOLUTIONS,JIT_CONVOLUTIONS")
    args = p.parse_args(argv)

    import numpy as np
    import onnx

    from trtkit import BuildConfig, TrtkitError, TrtRunner, build, parse_shapes
    from trtkit.demo import missing_prerequisite
    from trtkit.sample_model import make_sample_cnn

    missing = missing_prerequisite()
    if missing:
        print(f"quickstart needs {missing}", file=sys.stderr)
        return 1
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    model_path = Path(args.model) if args.model else work / "sample_cnn.onnx"
    if not args.model:
        onnx.save(make_sample_cnn(), str(model_path))
    size = f"3x{args.size}x{args.size}"
    config = BuildConfig(
        precision="fp16",
        profiles=[parse_shapes(f"{args.input_name}:1x{size},8x{size},32x{size}")],
        timing_cache=str(work / "timing.cache"),
        tactic_sources=tuple(args.tactic_sources.split(",")) if args.tactic_sources else None,
    )
    try:
        result = build(model_path, config, output=work / "model.engine")
        print(f"built {work / 'model.engine'} ({len(result.engine)} bytes) in {result.manifest.build_seconds} s")
        x = np.random.default_rng(0).standard_normal((8, 3, args.size, args.size)).astype(np.float32)
        with TrtRunner(work / "model.engine") as runner:
            outputs = runner.infer({args.input_name: x})
        for name, value in outputs.items():
            print(f"{name}: shape {value.shape}, mean {value.mean():.4f}")
    except TrtkitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
