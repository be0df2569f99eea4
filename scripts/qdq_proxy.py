#!/usr/bin/env python3
"""INT8 Q/DQ recipes for the sample detector compared on a CPU: each Q/DQ model scored on val in ONNX Runtime.

ONNX Runtime (graph optimizations off) runs QuantizeLinear/DequantizeLinear as written: every quantized tensor is
rounded to its INT8 grid and back, which is what TensorRT's INT8 kernels compute up to accumulation order and the
FP16 it may pick for the layers left unquantized. So the mAP of the Q/DQ model in ONNX Runtime is a proxy for the
mAP of its TensorRT engine, and recipes (calibration algorithm, samples, placement) can be chosen without a GPU.

1. The calibration images (the first ``--calib`` of ``DATA/train``, letterboxed as at inference) run through the FP32
   model in ONNX Runtime (:func:`calibrators.cpu_statistics.collect_histograms_cpu`); every tensor any candidate
   placement quantizes is histogrammed once, and one histogram set serves every algorithm.
2. Each candidate ``placement:algorithm`` gets its amax (:func:`calibrators.algorithms.compute_amaxes`) and its Q/DQ
   model (:func:`trtkit.quant.qdq.insert_qdq`), scored on the first ``--val`` val images with the detection
   benchmark's own scoring (pycocotools through ``trtkit.eval``).

    python scripts/make_detection_data.py DATA --train 512 --val 2000
    python scripts/qdq_proxy.py --data DATA --json proxy.json fp32 default:entropy heads:entropy default:mse

A candidate is ``fp32`` or ``PLACEMENT:ALGORITHM``; ``--placements`` lists the placements. Results are appended to
``--json`` as they come (a run cut short keeps the rows it finished).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

MODEL = ROOT / "samples" / "detection" / "model" / "detector.onnx"
CALIB_BATCH = 8


def placements() -> dict:
    """Named placements: trtkit's default and variations of it (``QdqOptions`` settings)."""
    from dataclasses import replace

    from trtkit.quant.qdq import QdqOptions

    base = QdqOptions()  # trtkit's default placement
    return {
        "default": base,
        "heads": replace(base, keep_output_layers=False),
        "concat": replace(base, keep_concat_outputs=True),
        "depth2": replace(base, output_depth=2),
        "depth3": replace(base, output_depth=3),
        "all": replace(base, residual_through_activation=True, concat_shared_scale=True),
        "all_add": replace(base, residual_through_activation=True, concat_shared_scale=True, quantize_add_inputs=True),
    }


def parse_candidate(text: str) -> tuple[str, str]:
    """``placement:algorithm`` → ``(placement, algorithm)``."""
    placement, _, algorithm = text.partition(":")
    return placement, algorithm or "entropy"


def calibration_feeds(model, train: Path, samples: int):
    from calibrators.preprocess import Preprocess
    from calibrators.sources import batches, open_source

    source = open_source(str(train), model, Preprocess(resize="letterbox"))
    return batches(source, CALIB_BATCH, samples)


def histograms(model, plans: dict, train: Path, samples: int):
    from calibrators.cpu_statistics import collect_histograms_cpu

    tensors = list(dict.fromkeys(t for plan in plans.values() for t in plan.activations))
    t0 = time.perf_counter()
    hists, seen = collect_histograms_cpu(model, tensors, calibration_feeds(model, train, samples))
    print(f"histograms of {len(tensors)} tensors over {seen} samples in {time.perf_counter() - t0:.1f} s", flush=True)
    return hists


def scorer(model, val):
    """``ModelProto -> metrics`` on the val subset, the detection benchmark's decode and scoring."""
    import numpy as np
    from detection_h200 import score

    from trtkit.parity.reference import OnnxReference

    def run(candidate) -> dict:
        reference = OnnxReference(candidate, backend="onnxruntime")
        outputs = [(start, reference({"images": batch})) for start, batch in val.batches()]
        return score([(s, {k: np.asarray(v) for k, v in o.items()}) for s, o in outputs], val)

    return run


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("candidates", nargs="*", help="fp32 or PLACEMENT:ALGORITHM (e.g. default:mse)")
    parser.add_argument("--data", type=Path, help="make_detection_data.py's output (train/, val/, val.json)")
    parser.add_argument("--model", type=Path, default=MODEL)
    parser.add_argument("--calib", type=int, default=512, help="calibration images (the first of train/)")
    parser.add_argument("--val", type=int, default=2000, help="val images scored (the first, in file order)")
    parser.add_argument("--json", type=Path, help="append each result to this JSON file")
    parser.add_argument("--placements", action="store_true", help="list the placements and what each quantizes")
    args = parser.parse_args(argv)
    import onnx
    from detection_h200 import ValSet

    from calibrators.algorithms import compute_amaxes
    from trtkit.quant.qdq import insert_qdq, plan_qdq

    model = onnx.load(str(args.model))
    named = placements()
    wanted = {parse_candidate(c)[0] for c in args.candidates if c != "fp32"}
    plans = {name: plan_qdq(model, named[name]) for name in (named if args.placements else wanted)}
    if args.placements:
        for name, plan in plans.items():
            print(f"{name}: {plan.summary()}; kept: " + "; ".join(f"{k} ({v})" for k, v in plan.skipped.items()))
        return 0
    val = ValSet(args.data, limit=args.val)
    score = scorer(model, val)
    hists = histograms(model, plans, args.data / "train", args.calib) if plans else None
    results = json.loads(args.json.read_text()) if args.json and args.json.exists() else []
    for text in args.candidates:
        t0 = time.perf_counter()
        row: dict = {"candidate": text, "val_images": len(val.ids), "calib": args.calib}
        if text == "fp32":
            metrics = score(model)
        else:
            placement, algorithm = parse_candidate(text)
            plan = plans[placement]
            amax = compute_amaxes({t: hists[t] for t in plan.activations}, algorithm)
            qdq, _ = insert_qdq(model, amax, plan, strict=True)
            metrics = score(qdq)
            row["plan"] = plan.summary()
        row.update(map=metrics["map"], map50=metrics["map50"], seconds=round(time.perf_counter() - t0, 1))
        print(json.dumps(row), flush=True)
        results.append(row)
        if args.json:
            args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
