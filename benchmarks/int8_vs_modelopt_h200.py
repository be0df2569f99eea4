#!/usr/bin/env python3
"""trtkit's own INT8 Q/DQ against NVIDIA ModelOpt's ONNX PTQ on the sample detector, both built by trtkit (issue 39).

1. Data as ``benchmarks/detection_h200.py`` makes it (``scripts/make_detection_data.py``, seed 0: val, the first
   ``--calib`` train images). The calibration images are letterboxed as at inference by trtkit's own calibration
   preprocessing (``calibrators.preprocess``) and saved once as one float32 array, ``calib/calib.npy`` under
   ``--work``: both quantizers read that file, so they see the same tensors.
2. ModelOpt: ``modelopt.onnx.quantization.quantize(quantize_mode="int8", calibration_data={input: array},
   calibration_method=M)`` for each ``--methods`` (entropy, ModelOpt's default for INT8, and max), in a child process
   of ``--modelopt-python`` with ``--modelopt-path`` as its only ``PYTHONPATH`` (ModelOpt needs a newer Python and
   ONNX than trtkit's may be); its Q/DQ models are kept under ``--work`` and reused by a later call on the same data.
3. trtkit builds ModelOpt's Q/DQ models (an explicitly quantized model: INT8 + FP16 flags, no calibration) and its
   own (``--int8 --int8-mode qdq`` calibrated on the same array, trtkit's default algorithm and placement; its Q/DQ
   model saved) and FP16 for reference: one profile, batch 1..8 (opt 8), the same tactic sources and timing cache.
4. Each engine is scored on val with pycocotools through ``trtkit.eval``'s decode (as the detection table) and timed
   with ``trtkit.bench`` at batch 8 through a CUDA graph in ``--rounds`` interleaved rounds (the engine that goes first
   rotates), images/s the median of the rounds.
5. ``placement``: where each Q/DQ model puts Q/DQ (which node inputs get a DequantizeLinear), in both, only in
   trtkit's, only in ModelOpt's.

    python3 benchmarks/int8_vs_modelopt_h200.py --out "$OUT" --cache "$CACHE" \
        --modelopt-python /opt/torch/.venv/bin/python3 --modelopt-path /tmp/site-modelopt

``--fake`` runs it on trtkit's fake TensorRT and CUDA (CPU; a small ``--model``, few images, and a stand-in
ModelOpt on ``--modelopt-path``). Writes ``<out>/int8-vs-modelopt-h200.json`` and
``benchmarks/results/int8-vs-modelopt-h200.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import detection_h200 as det  # noqa: E402 - after the path set-up (numpy only: the ModelOpt child imports it too)

NAME = "int8-vs-modelopt-h200.json"
METHODS = ("entropy", "max")
MAX_BATCH = 8
MAP_TOLERANCE = 0.5  # points: trtkit's mAP at least ModelOpt's less this


# --- ModelOpt, in its own Python (standard library, numpy and ModelOpt only) ----------------------------------------


def modelopt_child(argv: list) -> int:
    """``modelopt-quantize MODEL CALIB_NPY INPUT METHOD HIGH_PRECISION EPS OUT``: one ModelOpt INT8 PTQ; prints one
    JSON line (seconds, versions)."""
    model, calib, input_name, method, high, eps, out = argv
    from importlib.metadata import PackageNotFoundError, version

    import numpy as np
    from modelopt.onnx.quantization import quantize

    def installed(name: str):
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    data = np.load(calib)
    t0 = time.perf_counter()
    quantize(
        onnx_path=model,
        quantize_mode="int8",
        calibration_data={input_name: data},
        calibration_method=method,
        calibration_eps=eps.split(","),
        high_precision_dtype=high,
        output_path=out,
    )
    seconds = round(time.perf_counter() - t0, 2)
    versions = {name: installed(name) for name in ("nvidia-modelopt", "onnxruntime", "onnx")}
    print(json.dumps({"seconds": seconds, "samples": int(data.shape[0]), "python": sys.version.split()[0], **versions}))
    return 0


def child_env(path: str | None) -> dict:
    """The parent's environment with ``PYTHONPATH`` set to ``path`` alone (the parent's own entries belong to another
    Python)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if path:
        env["PYTHONPATH"] = path
    return env


def run_modelopt(args, method: str, calib: Path, input_name: str, out: Path) -> dict:
    """ModelOpt's Q/DQ model of ``--model`` at ``out`` (kept from an earlier call when its stamp matches)."""
    stamp = out.with_suffix(".json")
    wanted = {
        "model": str(args.model),
        "calib": str(calib),
        "calib_bytes": calib.stat().st_size,
        "method": method,
        "high_precision": args.modelopt_high_precision,
    }
    if out.exists() and stamp.exists() and json.loads(stamp.read_text()).get("wanted") == wanted:
        return {**json.loads(stamp.read_text())["done"], "reused": True}
    # ModelOpt writes its shape-inferred model back to onnx_path: it gets a copy
    copy = out.parent / f"{out.stem}.input.onnx"
    shutil.copyfile(args.model, copy)
    command = [
        args.modelopt_python,
        str(Path(__file__).resolve()),
        "modelopt-quantize",
        str(copy),
        str(calib),
        input_name,
        method,
        args.modelopt_high_precision,
        args.modelopt_eps,
        str(out),
    ]
    proc = subprocess.run(
        command, capture_output=True, text=True, env=child_env(args.modelopt_path), timeout=args.modelopt_timeout
    )
    (out.parent / f"{out.stem}.log").write_text(proc.stdout + proc.stderr)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not out.exists() or not lines:
        raise RuntimeError(f"ModelOpt {method} exited {proc.returncode}: {(proc.stderr or proc.stdout)[-1500:]}")
    done = json.loads(lines[-1])
    stamp.write_text(json.dumps({"wanted": wanted, "done": done}, indent=2) + "\n")
    return done


# --- calibration data ------------------------------------------------------------------------------------------------


def calibration_array(model: Path, train: Path, count: int, path: Path) -> dict:
    """The first ``count`` train images, letterboxed by trtkit's calibration preprocessing, as one ``(N, C, H, W)``
    float32 array at ``path`` (made once); what it holds."""
    import numpy as np

    if not path.exists() or np.load(path, mmap_mode="r").shape[0] != count:
        import onnx

        from calibrators.preprocess import Preprocess
        from calibrators.sources import open_source

        source = open_source(
            str(train), onnx.load(str(model), load_external_data=False), Preprocess(resize="letterbox")
        )
        array = np.concatenate([next(iter(feed.values())) for _, feed in zip(range(count), source)])
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, array)
    array = np.load(path, mmap_mode="r")
    return {
        "path": str(path),
        "shape": list(array.shape),
        "dtype": str(array.dtype),
        "preprocess": "calibrators.preprocess.Preprocess(resize='letterbox'): RGB, 0..1, pad 114, NCHW",
        "images": f"the first {count} of {train} in sorted order",
    }


# --- where Q/DQ go --------------------------------------------------------------------------------------------------


def qdq_inputs(model) -> dict:
    """``{"node:input_index": {"op", "kind", "tensor"}}`` for every node input fed by a DequantizeLinear (through Cast
    nodes): ``kind`` is ``weight`` where the quantized tensor is an initializer or a Constant's output, else
    ``activation``; ``tensor`` is the tensor quantized (upstream of its QuantizeLinear and Casts)."""
    graph = model.graph
    producer = {out: node for node in graph.node for out in node.output}
    consumers: dict = {}
    for node in graph.node:
        for index, name in enumerate(node.input):
            consumers.setdefault(name, []).append((node, index))
    constants = {t.name for t in graph.initializer} | {
        o for n in graph.node if n.op_type == "Constant" for o in n.output
    }

    def source(name: str) -> str:
        node = producer.get(name)
        while node is not None and node.op_type in ("QuantizeLinear", "DequantizeLinear", "Cast"):
            name = node.input[0]
            node = producer.get(name)
        return name

    found = {}
    for dq in (n for n in graph.node if n.op_type == "DequantizeLinear"):
        tensor = source(dq.output[0])
        todo = list(consumers.get(dq.output[0], []))
        while todo:
            node, index = todo.pop()
            if node.op_type == "Cast":
                todo += consumers.get(node.output[0], [])
            elif node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
                kind = "weight" if tensor in constants else "activation"
                found[f"{node.name}:{index}"] = {"op": node.op_type, "kind": kind, "tensor": tensor}
    return found


def placement_diff(trtkit_model, modelopt_model) -> dict:
    """Which node inputs each Q/DQ model quantizes: counts by op and kind, and the inputs only one of them quantizes."""
    ours, theirs = qdq_inputs(trtkit_model), qdq_inputs(modelopt_model)

    def counts(slots: dict, keys) -> dict:
        out: dict = {}
        for key in keys:
            label = f"{slots[key]['op']} {slots[key]['kind']}"
            out[label] = out.get(label, 0) + 1
        return dict(sorted(out.items()))

    only_ours, only_theirs = sorted(set(ours) - set(theirs)), sorted(set(theirs) - set(ours))
    return {
        "trtkit": counts(ours, ours),
        "modelopt": counts(theirs, theirs),
        "both": counts(ours, set(ours) & set(theirs)),
        "only_trtkit": {key: ours[key] for key in only_ours},
        "only_modelopt": {key: theirs[key] for key in only_theirs},
        "what": "node inputs fed by a DequantizeLinear (through Casts), keyed NODE:INPUT_INDEX; op and kind "
        "(weight or activation) of each; tensor: the tensor quantized",
    }


# --- builds, scores, timings ----------------------------------------------------------------------------------------


def profile(size: int) -> str:
    shape = f"3x{size}x{size}"
    return f"images:1x{shape},{MAX_BATCH}x{shape},{MAX_BATCH}x{shape}"


def build(run, key: str, model: Path, args, options: dict) -> Path:
    from trtkit.builder.api import build as trtkit_build
    from trtkit.builder.config import BuildConfig
    from trtkit.builder.profiles import parse_shapes

    config = BuildConfig(
        profiles=[parse_shapes(profile(det.SIZE))],
        tactic_sources=tuple(args.tactics.split(",")),
        optimization_level=args.opt_level,
        timing_cache=str(args.cache / "detector-anchor-timing.cache"),
        workspace_bytes=4 << 30,
        **options,
    )
    out = args.work / "engines" / f"detector.{key}.engine"
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    result = trtkit_build(str(model), config, output=out, isolate=False)
    report = result.manifest.precision_report or {}
    run.result["rows"].setdefault(key, {}).update(
        model=str(model),
        build_s=round(time.perf_counter() - t0, 2),
        engine_mb=round(len(result.engine) / 1e6, 3),
        layers_by_precision=report.get("layers_by_precision"),
        precision_notes=result.manifest.build.precision_plan.notes,
    )
    det.log(f"built {key}: {run.result['rows'][key]['engine_mb']} MB; layers {report.get('layers_by_precision')}")
    return out


def score(run, key: str, engine: Path, val) -> None:
    metrics = det.score(det.engine_outputs(engine, val), val)
    run.result["rows"][key].update(map=metrics["map"], map50=metrics["map50"], ar100=metrics["ar100"])
    det.log(f"{key}: map {metrics['map']} map50 {metrics['map50']}")


def time_rounds(run, engines: dict, rounds: int, seconds: float) -> None:
    """Every engine at batch 8 through a CUDA graph once per round, the first engine rotating; each row's images/s
    and GPU compute ms are the medians over the rounds."""
    keys = list(engines)
    runs: dict = {key: [] for key in keys}
    order = []
    for index in range(rounds):
        turn = keys[index % len(keys) :] + keys[: index % len(keys)]
        order.append(turn)
        for key in turn:
            result = det.bench(engines[key], MAX_BATCH, True, seconds, e2e=False)
            runs[key].append((result.items_per_s, result.compute.median))
    for key, values in runs.items():
        run.result["rows"][key].update(
            images_per_s=round(statistics.median(v[0] for v in values), 1),
            b8_graph_ms=round(statistics.median(v[1] for v in values), 4),
            images_per_s_rounds=[round(v[0], 1) for v in values],
        )
        det.log(f"timed {key}: {run.result['rows'][key]['images_per_s']} images/s at batch {MAX_BATCH}")
    run.result["timing_order"] = order


# --- results --------------------------------------------------------------------------------------------------------


def targets_of(rows: dict) -> dict:
    """trtkit's row against each ModelOpt row: images/s ratio (met at >= 1) and mAP delta (met at >= -0.5 pt)."""
    ours, out = rows.get("trtkit", {}), {}
    for key, row in rows.items():
        if not key.startswith("modelopt_"):
            continue
        target: dict = {}
        if ours.get("images_per_s") and row.get("images_per_s"):
            ratio = ours["images_per_s"] / row["images_per_s"]
            target.update(images_per_s_ratio=round(ratio, 3), speed_met=ratio >= 1.0)
        if ours.get("map") is not None and row.get("map") is not None:
            delta = ours["map"] - row["map"]
            target.update(map_delta=round(delta, 3), map_met=delta >= -MAP_TOLERANCE)
        if {"speed_met", "map_met"} <= set(target):
            target["met"] = target["speed_met"] and target["map_met"]
        out[key] = target
    return out


def save(run, args) -> None:
    rows = run.result["rows"]
    primary = f"modelopt_{args.methods.split(',')[0]}"
    run.result.update(
        trtkit=rows.get("trtkit", {}), modelopt=rows.get(primary, {}), modelopt_row=primary, targets=targets_of(rows)
    )
    from timing import write_results

    write_results(run.result, (args.out, args.results), NAME)


def parse_args(argv):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    det.add_run_arguments(parser, 540)
    parser.add_argument(
        "--methods",
        default=",".join(METHODS),
        help="ModelOpt calibration methods, the first is the 'modelopt' row (entropy,max)",
    )
    parser.add_argument("--modelopt-python", default=sys.executable, help="the Python that runs ModelOpt")
    parser.add_argument("--modelopt-path", help="PYTHONPATH of that Python (where ModelOpt's wheels are installed)")
    parser.add_argument(
        "--modelopt-high-precision",
        default="fp16",
        choices=("fp16", "fp32"),
        help="ModelOpt's high_precision_dtype: the unquantized layers' type (its default fp16)",
    )
    parser.add_argument("--modelopt-eps", default="cpu", help="ModelOpt's calibration_eps, comma-separated (cpu)")
    parser.add_argument("--modelopt-timeout", type=float, default=900, help="seconds for one ModelOpt run")
    parser.add_argument("--tactics", default=",".join(det.TACTICS), help="tactic sources of every build")
    parser.add_argument("--opt-level", type=int, default=None, help="builder optimization level (TensorRT's)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds (3)")
    parser.add_argument("--fp16", action=argparse.BooleanOptionalAction, default=True, help="an FP16 row (on)")
    parser.add_argument("--fake", action="store_true", help="dry run on trtkit's fake TensorRT and CUDA (CPU)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from qdq_placement_h200 import install_fakes
    from timing import run_stamp

    if args.fake:
        install_fakes()
    det.SIZE = det.input_size(args.model)
    det.EVAL_BATCH = MAX_BATCH  # the profile's largest batch
    run = det.new_run(args.budget)
    run.result.update(
        run=run_stamp(),
        model=str(args.model),
        profile=profile(det.SIZE),
        fake=args.fake,
        tactic_sources=args.tactics.split(","),
        optimization_level=args.opt_level,
        rounds=args.rounds,
        bench_seconds=args.bench_seconds,
        calib_images=args.calib,
        modelopt_quantize={},
        modelopt_high_precision=args.modelopt_high_precision,
    )
    data, work = args.work / "data", args.work
    for folder in (args.cache, data):
        folder.mkdir(parents=True, exist_ok=True)

    def environment():
        from trtkit.bench.report import environment as env

        return env()

    run.result["environment"] = run.guard("environment", environment)
    run.guard("data", lambda: det.ensure_data(data, args.val_images, args.calib, os.cpu_count() or 1))
    calib = work / "calib" / "calib.npy"
    run.result["calibration"] = run.guard(
        "calibration", lambda: calibration_array(args.model, data / "train", args.calib, calib)
    )
    val = run.guard("val_letterbox", lambda: det.ValSet(data, limit=args.val_images))
    if val is None or run.result["calibration"] is None:
        save(run, args)
        return 1
    import onnx

    input_name = onnx.load(str(args.model), load_external_data=False).graph.input[0].name
    models = {}
    for method in args.methods.split(","):
        out = work / "modelopt" / f"detector.modelopt.{method}.{args.modelopt_high_precision}.onnx"
        out.parent.mkdir(parents=True, exist_ok=True)
        done = run.guard(
            f"modelopt_{method}/quantize", lambda m=method, o=out: run_modelopt(args, m, calib, input_name, o), cost=30
        )
        if done is not None:
            run.result["modelopt_quantize"][method] = done
            models[f"modelopt_{method}"] = out
            det.log(f"ModelOpt {method}: {done}")
    save(run, args)
    from trtkit.builder.config import CalibrationSettings

    qdq_onnx = work / "engines" / "detector.trtkit-qdq.onnx"
    calibration = CalibrationSettings(source=str(calib.parent), cache_path=str(args.cache / "detector.anchor.calib"))
    plans = {
        "trtkit": (
            args.model,
            {"precision": "int8", "int8_mode": "qdq", "calibration": calibration, "save_qdq_onnx": str(qdq_onnx)},
        )
    }
    plans.update({key: (path, {"precision": "int8"}) for key, path in models.items()})
    if args.fp16:
        plans["fp16"] = (args.model, {"precision": "fp16", "precision_constraints": "prefer"})
    engines = {}
    for key, (model, options) in plans.items():
        # the FP16 row (reference only) is built when time is left for the timing rounds after it
        cost = 120 if key == "fp16" else 30
        engine = run.guard(f"{key}/build", lambda k=key, m=model, o=options: build(run, k, m, args, o), cost=cost)
        if engine is not None:
            engines[key] = engine
            run.guard(f"{key}/score", lambda k=key, e=engine: score(run, k, e, val), cost=5)
        save(run, args)
    run.guard("timing", lambda: time_rounds(run, engines, args.rounds, args.bench_seconds), cost=10)
    if qdq_onnx.exists():
        run.result["placement"] = {
            key: run.guard(
                f"{key}/placement", lambda p=path: placement_diff(onnx.load(str(qdq_onnx)), onnx.load(str(p)))
            )
            for key, path in models.items()
        }
    run.result["seconds"] = round(time.perf_counter() - det.STARTED, 1)
    save(run, args)
    det.log(f"targets: {json.dumps(run.result['targets'])}")
    det.log(f"errors: {json.dumps(run.result['errors'])}" if run.result["errors"] else "no errors")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["modelopt-quantize"]:
        sys.exit(modelopt_child(sys.argv[2:]))
    sys.exit(main())
