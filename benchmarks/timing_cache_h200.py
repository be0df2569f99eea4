"""What the default timing cache saves: a model's second build, and a like model's first build after it.

Each build is ``trtkit build`` as a user runs it, with ``TRTKIT_CACHE_DIR`` pointing at a fresh folder per scenario
(so the first build finds no cache) and every other setting the same:

- ``same_model``: MODEL built twice (``first_s``, ``second_s``), the second reading the cache the first wrote;
- ``same_family``: SIBLING built in a fresh folder (``cold_s``), then again in MODEL's folder, after MODEL
  (``warm_s``);
- each engine measured by ``trtkit bench`` at ``--batch-size``, so the cache's engines can be checked against the
  cold ones (``images_per_s``).

Writes ``benchmarks/results/timing-cache-h200.json``:
``{"same_model": {"first_s", "second_s", "speedup"}, "same_family": {"cold_s", "warm_s", "speedup"}, "engines": ...}``.

On the GPU host: python3 benchmarks/timing_cache_h200.py --model yolov8n.onnx --sibling yolov8s.onnx --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from timing import run_stamp  # noqa: E402


def build(model: str, engine: Path, cache_dir: Path, args) -> float:
    cmd = ["trtkit", "build", model, "--fp16", "--batch", f"1,{args.batch_size},{args.batch_size}", "-o", str(engine)]
    cmd += ["--tactic-sources", args.tactics] if args.tactics else []
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env={**os.environ, "TRTKIT_CACHE_DIR": str(cache_dir)}, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"build of {model} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return round(time.perf_counter() - t0, 2)


def images_per_s(engine: Path, model: str, batch: int) -> float:
    import onnx

    first = onnx.load(model, load_external_data=False).graph.input[0]
    dims = [d.dim_value or 1 for d in first.type.tensor_type.shape.dim]
    spec = f"{first.name}:{'x'.join(map(str, [batch, *dims[1:]]))}"
    out = engine.with_suffix(".bench.json")
    subprocess.run(
        ["trtkit", "bench", str(engine), "--shapes", spec, "--json", str(out)], check=True, capture_output=True
    )
    return json.loads(out.read_text())["throughput"]["items_per_s"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--sibling", required=True, help="a model of the same family (e.g. yolov8s after yolov8n)")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--tactics", default="", help="--tactic-sources of every build")
    ap.add_argument("--out", help="also copy the results JSON here")
    ap.add_argument("--results", default=str(ROOT / "benchmarks" / "results" / "timing-cache-h200.json"))
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="timing-cache-"))
    shared, cold = work / "shared", work / "cold"
    e = {k: work / f"{k}.engine" for k in ("first", "second", "sibling_cold", "sibling_warm")}
    first = build(args.model, e["first"], shared, args)
    second = build(args.model, e["second"], shared, args)
    sibling_cold = build(args.sibling, e["sibling_cold"], cold, args)
    sibling_warm = build(args.sibling, e["sibling_warm"], shared, args)
    speeds = {
        k: images_per_s(p, args.sibling if k.startswith("sibling") else args.model, args.batch_size)
        for k, p in e.items()
    }
    from trtkit.bench.report import environment

    results = {
        **run_stamp(),
        "environment": environment(),
        "models": {"model": Path(args.model).name, "sibling": Path(args.sibling).name, "precision": "fp16"},
        "same_model": {"first_s": first, "second_s": second, "speedup": round(first / second, 2)},
        "same_family": {
            "cold_s": sibling_cold,
            "warm_s": sibling_warm,
            "speedup": round(sibling_cold / sibling_warm, 2),
        },
        "engines": {"batch": args.batch_size, "images_per_s": {k: round(v, 1) for k, v in speeds.items()}},
    }
    text = json.dumps(results, indent=1)
    print(text)
    Path(args.results).write_text(text + "\n")
    if args.out:
        Path(args.out, Path(args.results).name).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
