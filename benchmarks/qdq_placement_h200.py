#!/usr/bin/env python3
"""INT8 Q/DQ placement variants of the detector against FP16 on one GPU (issue 15: why explicit INT8 was slower).

1. Data as ``benchmarks/detection_h200.py`` makes it (the same seed, val split, calibration images, letterbox).
2. ONE calibration: the first Q/DQ build is the variant that quantizes the most tensors (every placement option on,
   heads quantized); its statistics go to one calibration cache that every later variant reads (each variant's
   tensors are a subset of that one's), so the variants differ by placement only.
3. For FP16 (flag + prefer constraints, as in the detection table) and each variant: build (optimization level
   ``--opt-level``, tactic sources EDGE_MASK_CONVOLUTIONS and JIT_CONVOLUTIONS, one shared timing cache), GPU
   compute at batch 1 and 8 (plain and CUDA graph) and images/s at batch 8 exactly as ``detection_h200.py`` measures
   them, engine MB, build s, layers by precision, the per-layer top 15 at batch 8 (``trtkit.bench.profile_layers``)
   and COCO mAP / mAP50 on val through the same path as the detection table.

Parts past ``--budget`` seconds are skipped and recorded under ``errors``; the JSON is rewritten after every result.

    python3 benchmarks/qdq_placement_h200.py --out "$OUT" --cache "$TRTKIT_GPU_CACHE/det"

``--fake`` runs it on trtkit's fake TensorRT and CUDA (CPU; give a small ``--model`` and few images).
Writes ``<out>/qdq-placement-h200.json`` and ``benchmarks/results/qdq-placement-h200.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import detection_h200 as det  # noqa: E402 - after the path set-up
from timing import write_results  # noqa: E402

NAME = "qdq-placement-h200.json"
# every row spells out the two placement switches (on by default: int8_qdq_add is the default build, residual adds
# with both inputs quantized); int8_qdq is the placement without them
NONE = {"qdq_residual_activations": False, "qdq_concat_shared_scale": False}
ALL = {"qdq_residual_activations": True, "qdq_concat_shared_scale": True}
# row → build settings; the first Q/DQ row calibrates (it quantizes a superset of every other row's tensors)
VARIANTS = {
    "int8_qdq_union_add": {**ALL, "qdq_keep_heads": False},
    "int8_qdq_add": ALL,
    "int8_qdq": NONE,
    "int8_qdq_residual": {**NONE, "qdq_residual_activations": True},
    "int8_qdq_concat": {**NONE, "qdq_concat_shared_scale": True},
}
ROWS = ("fp16", *VARIANTS)
TOP = 15


def log(msg: str) -> None:
    det.log(msg)


def install_fakes() -> None:
    """``import tensorrt`` and cuda-python give trtkit's fakes (the ``--fake`` dry run)."""
    import cuda.bindings

    from tests.fakes.fake_cuda import FakeCudart
    from tests.fakes.fake_trt import make_fake_trt

    rt = FakeCudart()
    sys.modules["cuda.bindings.runtime"] = rt
    cuda.bindings.runtime = rt  # type: ignore[attr-defined]
    sys.modules["tensorrt"] = make_fake_trt("8.6.0")


def calibration(cache: Path, calib_dir: Path):
    from calibrators.settings import DEFAULT_ALGORITHMS
    from trtkit.builder.config import CalibrationSettings

    algorithm = DEFAULT_ALGORITHMS["qdq"]
    path = cache / f"detector.qdq-placement.{algorithm}.calib"
    return CalibrationSettings(source=str(calib_dir), cache_path=str(path), algorithm=algorithm,
                               preprocess={"resize": "letterbox"})


def layer_top(run, key: str, engine: Path, runs: int) -> None:
    from trtkit.bench.layers import profile_layers

    size = det.SIZE
    profile = profile_layers(str(engine), {"images": (8, 3, size, size)}, runs=runs)
    run.result["rows"][key]["layers_b8"] = profile.to_json(top=TOP)
    summary = profile.summary()
    log(f"layers {key}: {summary}")


def measure(run, key: str, engines: Path, args, val, extra: dict | None) -> None:
    engine = run.guard(f"{key}/build", lambda: det.build(run, key, engines, args.cache, args.work / "data" / "train",
                                                          args.opt_level, args.model, extra), cost=30)
    if engine is None:
        return
    row = run.result["rows"][key]
    row["settings"] = {k: v for k, v in (extra or {}).items() if k != "calibration"}
    outputs = run.guard(f"{key}/infer", lambda: det.engine_outputs(engine, val), cost=5)
    if outputs is not None:
        metrics = run.guard(f"{key}/score", lambda: det.score(outputs, val))
        if metrics:
            row.update(map=metrics["map"], map50=metrics["map50"])
            log(f"{key}: map {row['map']} map50 {row['map50']}")
    save(run, args)
    run.guard(f"{key}/bench", lambda: det.time_row(run, key, engine, args.bench_seconds), cost=10)
    run.guard(f"{key}/layers", lambda: layer_top(run, key, engine, args.layer_runs), cost=5)
    save(run, args)


def compare(result: dict) -> dict:
    """Each row's b8 images/s and mAP against FP16's."""
    rows = result["rows"]
    fp16 = rows.get("fp16", {})
    out = {}
    for key, row in rows.items():
        if key == "fp16":
            continue
        speed = row.get("b8_images_per_s")
        out[key] = {
            "b8_images_per_s_vs_fp16": round(speed / fp16["b8_images_per_s"], 3)
            if speed and fp16.get("b8_images_per_s") else None,
            "map_vs_fp16": round(row["map"] - fp16["map"], 3) if "map" in row and "map" in fp16 else None,
        }
    return out


def save(run, args) -> None:
    run.result["vs_fp16"] = compare(run.result)
    write_results(run.result, (args.out, args.results), NAME)


def merge_into(run, earlier: dict, rows: list) -> None:
    """Keep an earlier call's rows and errors except those of ``rows`` (measured again now) and its list of calls."""
    run.result["rows"] = {k: v for k, v in earlier.get("rows", {}).items() if k not in rows}
    run.result["errors"] = {k: v for k, v in earlier.get("errors", {}).items() if k.split("/")[0] not in rows}
    run.result["calls"] = earlier.get("calls") or [{"started": earlier.get("started"), "argv": earlier.get("argv")}]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    det.add_run_arguments(parser, 280)
    parser.add_argument("--layer-runs", type=int, default=50, help="runs averaged for the per-layer profile (50)")
    parser.add_argument("--opt-level", type=int, default=1, help="builder optimization level (1)")
    parser.add_argument("--rows", default=",".join(ROWS), help=f"subset of {','.join(ROWS)}")
    parser.add_argument("--fake", action="store_true", help="dry run on trtkit's fake TensorRT and CUDA (CPU)")
    parser.add_argument("--merge", type=Path, help="results JSON of an earlier call: its rows are kept unless "
                        "measured again (with the same --cache, so the calibration is the same)")
    args = parser.parse_args(argv)
    if args.fake:
        install_fakes()
    det.SIZE = det.input_size(args.model)
    rows = [k for k in ROWS if k in args.rows.split(",")]
    run = det.new_run(args.budget)
    if args.merge:
        merge_into(run, json.loads(args.merge.read_text()), rows)
    data, engines = args.work / "data", args.work / "engines"
    for folder in (args.cache, data, engines):
        folder.mkdir(parents=True, exist_ok=True)
    run.result.update(model=str(args.model), profile=det.profile(), tactic_sources=list(det.TACTICS),
                      calib_images=args.calib, optimization_level=args.opt_level, budget_s=args.budget,
                      started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), fake=args.fake,
                      argv=sys.argv[1:] if argv is None else list(argv), variants=VARIANTS,
                      calibration="one: the first Q/DQ row calibrates, the others read its cache")
    run.result.setdefault("calls", []).append({"started": run.result["started"], "argv": run.result["argv"],
                                               "rows": rows})
    run.guard("environment", lambda: run.result.update(environment=det.environment()))
    run.guard("data", lambda: det.ensure_data(data, args.val_images, args.calib, os.cpu_count() or 1))
    val = run.guard("val_letterbox", lambda: det.ValSet(data))
    if val is None:
        save(run, args)
        return 1
    calib = calibration(args.cache, data / "train")
    for key in rows:
        extra = None if key == "fp16" else {"calibration": calib, **VARIANTS[key]}
        measure(run, key, engines, args, val, extra)
    run.result["seconds"] = round(time.perf_counter() - det.STARTED, 1)
    save(run, args)
    log(f"vs fp16: {json.dumps(run.result['vs_fp16'])}")
    log(f"errors: {json.dumps(run.result['errors'])}" if run.result["errors"] else "no errors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
