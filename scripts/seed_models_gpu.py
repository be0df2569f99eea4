"""The seed systems' own models through trtkit on the GPU host: build, parity against onnxruntime, and a stream.

For each ONNX model exported by ``scripts/export_seed_models.py`` (ultralytics' YOLO family, RT-DETR, RF-DETR, a
Lightning Pose heatmap model, YOLOv8-pose), as a user would run them:

- ``trtkit build MODEL --batch 1,2,4`` (a dynamic batch axis) or as exported, at ``--opt-level`` and per precision
  of ``--precisions`` (INT8 calibrates on ``--calib``);
- ``trtkit parity MODEL ENGINE`` on the FP32 engine (onnxruntime as the reference);
- ``trtkit run ENGINE --video VIDEO --post detection|pose`` on the FP32 engine, writing an annotated video.

Each step is its own command (a crash is a result, not the end of the run); at most ``--jobs`` models at once. The
results file is rewritten after each model and a model already in it is skipped, so the run resumes over calls.
Results: ``{"models": {name: {"build": {"fp32": "pass", ...}, "parity_fp32": "pass", "stream": "pass",
"log": {...}}}}`` (``benchmarks/results/detectors-h200.json`` and ``pose-h200.json`` take these rows).

On the GPU host:  python3 scripts/seed_models_gpu.py --models DIR --video V.mp4 --out results.json
Anywhere:         python3 scripts/seed_models_gpu.py ... --dry-run   (prints the commands)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# name -> (post, extra trtkit run options, normalization): RF-DETR and Lightning Pose read ImageNet-normalized RGB,
# RT-DETR (transformers' image processor) and the YOLO family RGB scaled to [0, 1]
MODELS = {
    "yolov8n": ("detection", [], "none"),
    "yolov5nu": ("detection", [], "none"),
    "yolo11n": ("detection", [], "none"),
    "rtdetr": ("detection", ["--head", "detr-sigmoid"], "none"),
    "rfdetr-nano": ("detection", ["--head", "detr-sigmoid"], "imagenet"),
    "yolov8n-pose": ("pose", ["--skeleton", "coco17"], "none"),
    "lp-heatmap": ("pose", [], "imagenet"),
    "lp-heatmap-fp16": ("pose", [], "imagenet"),
}
PRECISION_FLAGS = {"fp32": [], "fp16": ["--fp16"], "int8": ["--int8"]}


def dynamic_batch(model: Path) -> bool:
    import onnx

    graph = onnx.load(str(model), load_external_data=False).graph
    inits = {i.name for i in graph.initializer}
    first = next(i for i in graph.input if i.name not in inits)
    dim = first.type.tensor_type.shape.dim[0]
    return not dim.HasField("dim_value")


def commands(name: str, model: Path, work: Path, args) -> list[tuple[str, list[str]]]:
    post, extra, normalize = MODELS.get(name, ("detection", [], "none"))
    extra = [*extra, "--normalize", normalize] if normalize != "none" else extra
    batch = ["--batch", "1,2,4"] if not args.dry_run and dynamic_batch(model) else []
    base = ["--opt-level", str(args.opt_level), *(["--tactic-sources", args.tactics] if args.tactics else [])]
    steps = []
    for p in args.precisions.split(","):
        calib = ["--calib", args.calib, "--calib-max-samples", "128"] if p == "int8" else []
        calib += ["--calib-preprocess", f"normalize={normalize}"] if calib and normalize != "none" else []
        steps.append(
            (
                f"build_{p}",
                ["build", str(model), *PRECISION_FLAGS[p], *batch, *base, *calib, "-o", str(work / f"{p}.engine")],
            )
        )
    fp32 = str(work / "fp32.engine")
    steps.append(("parity_fp32", ["parity", str(model), fp32, "--json", str(work / "parity.json")]))
    steps.append(
        (
            "stream",
            [
                "run",
                fp32,
                "--video",
                args.video,
                "--post",
                post,
                *extra,
                "--out",
                str(work / "out.mp4"),
                "--results",
                str(work / "results.jsonl"),
                "--no-live",
                "--json",
                str(work / "run.json"),
            ],
        )
    )
    return steps


def run_model(name: str, model: Path, args) -> dict:
    work = Path(args.work_dir) / name
    work.mkdir(parents=True, exist_ok=True)
    row: dict = {"build": {}, "log": {}, "seconds": {}}
    for step, cmd in commands(name, model, work, args):
        full = ["trtkit", *cmd]
        if args.dry_run:
            print(" ".join(full))
            verdict = "dry-run"
        elif not step.startswith("build") and row["build"].get("fp32") != "pass":
            verdict = "skipped: no FP32 engine"
        else:
            t0 = time.perf_counter()
            try:
                done = subprocess.run(full, capture_output=True, text=True, timeout=args.step_timeout_s)
                verdict = "pass" if done.returncode == 0 else f"fail (exit {done.returncode})"
                tail = (done.stdout + done.stderr).strip().splitlines()[-6:]
            except subprocess.TimeoutExpired:
                verdict, tail = f"timeout ({args.step_timeout_s} s)", []
            row["seconds"][step] = round(time.perf_counter() - t0, 1)
            row["log"][step] = tail
        if step.startswith("build_"):
            row["build"][step[6:]] = verdict
        else:
            row[step] = verdict
    return row


def save(path: Path, results: dict) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(results, f, indent=1)
    os.replace(tmp, path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", required=True, help="folder of exported <name>.onnx files")
    ap.add_argument("--only", default="", help="comma-separated model names (default: every known one present)")
    ap.add_argument("--video", required=True, help="the video streamed through each FP32 engine")
    ap.add_argument("--calib", default="", help="calibration images for --precisions int8")
    ap.add_argument("--precisions", default="fp32", help="comma-separated: fp32 (always first), fp16, int8")
    ap.add_argument("--opt-level", type=int, default=1)
    ap.add_argument("--tactics", default="", help="--tactic-sources of every build")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--step-timeout-s", type=int, default=300)
    ap.add_argument("--work-dir", default=str(Path(tempfile.gettempdir()) / "seed-models"))
    ap.add_argument("--out", required=True, help="results JSON (read first: models in it are skipped)")
    ap.add_argument("--redo", default="", help="comma-separated model names to run again")
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    out = Path(args.out)
    results = json.loads(out.read_text()) if out.exists() else {"models": {}}
    if not args.dry_run:  # where and how: the GPU, TensorRT, this run's start and arguments
        from trtkit.bench.report import environment

        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        results.setdefault("calls", []).append({"started": started, "argv": list(argv or sys.argv[1:])})
        results["environment"] = environment()
    wanted = [n for n in (args.only.split(",") if args.only else MODELS) if n]
    redo = set(args.redo.split(","))
    todo = [
        n
        for n in wanted
        if (Path(args.models) / f"{n}.onnx").exists() and (n in redo or n not in results["models"] or args.dry_run)
    ]
    print(f"models: {todo} (missing: {[n for n in wanted if not (Path(args.models) / f'{n}.onnx').exists()]})")

    def one(name):
        row = run_model(name, Path(args.models) / f"{name}.onnx", args)
        if not args.dry_run:
            results["models"][name] = row
            save(out, results)
        print(name, json.dumps({k: v for k, v in row.items() if k != "log"}), flush=True)

    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(one, todo))
    return 0


if __name__ == "__main__":
    sys.exit(main())
