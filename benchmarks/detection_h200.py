#!/usr/bin/env python3
"""The detection precision table on one GPU, in one call (issue 15 §4): COCO mAP, engine size, GPU time, build time.

1. Regenerates the shapes data from its seed (``scripts/make_detection_data.py``: all 2 000 val images, the first
   ``--calib`` train images for calibration) unless ``--work`` already holds them.
2. Builds ``samples/detection/model/detector.onnx`` with trtkit (profile 1/8/32 at 320x320, TensorRT's own tactic
   sources, one timing cache under ``--cache``): FP32, FP16, INT8 with TensorRT's entropy calibrator (these two
   with ``--precision-constraints prefer``, so they run in the precision they name), INT8 Q/DQ
   (default placement: heads kept in higher precision) and INT8 Q/DQ with the heads quantized; calibrated on the
   train images, letterboxed as at inference.
3. Scores each on val with pycocotools through ``trtkit.eval`` (the ONNX model, through onnxruntime, is the
   reference row), times it with ``trtkit.bench`` (GPU compute at batch 1 and 8, plain and CUDA graph; images/s at
   batch 8), builds FP32 with ``--add-nms`` and compares its detections with the numpy NMS of the FP32 engine on
   every val image, and times the sample's per-image path at batch 1 against the plain FP16 engine's own
   end-to-end latency: on that engine (float NCHW input, numpy decode: ``sample_latency_plain`` with the numpy
   letterbox, ``sample_latency_plain_gpu_letterbox`` with the GPU one) and on the fast engine built in the same call
   with ``--input-uint8-nhwc --add-nms`` against that engine's own e2e latency (``sample_latency``: the GPU
   letterbox where its kernels load, the JSON says which ran and why; ``sample_latency_cpu_letterbox``: the numpy
   letterbox), with how far their detections agree.

Every measurement is guarded: a failure is recorded under ``errors`` and the rest goes on; parts past ``--budget``
seconds are skipped (recorded). Engines and data stay under ``--work``; only the JSON and the caches go to ``--out``.

    python3 benchmarks/detection_h200.py --out "$OUT" --cache "$OUT/detection-cache"

``--rows`` measures some rows only; with ``--merge`` (the committed JSON) the rows measured replace theirs in it,
everything else (the ONNX reference row, the other rows, NMS and latency figures) is kept, an error an earlier call
left under a row measured now moves to the notes, and the targets are recomputed over the merged table:

    python3 benchmarks/detection_h200.py --out "$OUT" --cache "$OUT/detection-cache" --rows int8_qdq,int8_qdq_heads \
        --merge benchmarks/results/detection-h200.json

Writes ``<out>/detection-h200.json`` and ``benchmarks/results/detection-h200.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "samples" / "detection"))
sys.path.insert(0, str(ROOT / "benchmarks"))

MODEL = ROOT / "samples" / "detection" / "model" / "detector.onnx"
TACTICS = ("EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS")
SIZE = 320  # the model's input height and width (main() reads them from --model)
EVAL_BATCH = 32
NMS = {"score_threshold": 0.25, "iou_threshold": 0.45, "max_detections": 100}
# The flag and calibrator builds ask for their precision on every convolution (as precision_h200 does): TensorRT 8.6
# otherwise keeps FP32 wherever its FP32 kernel is faster, and the row would not show the precision it names.
CONSTRAINTS = "prefer"
ROWS = ("fp32", "fp16", "int8_calibrator", "int8_qdq", "int8_qdq_heads")
STARTED = time.perf_counter()


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - STARTED:6.1f}s] {msg}", flush=True)


def new_run(budget: float):
    """``precision_h200``'s guarded run (a failed or over-budget step is recorded, the rest goes on), with rows."""
    from precision_h200 import Run

    run = Run(budget)
    run.result["rows"] = {}
    return run


# --- data ----------------------------------------------------------------------------------------------------------


def profile() -> str:
    return f"images:1x3x{SIZE}x{SIZE},8x3x{SIZE}x{SIZE},32x3x{SIZE}x{SIZE}"


def ensure_data(data: Path, val: int, calib: int, workers: int) -> None:
    import make_detection_data as gen

    for split, count in (("val", val), ("train", calib)):
        folder = data / split
        if not (data / f"{split}.json").exists() or len(list(folder.glob("*.jpg"))) < count:
            gen.make_split(data, split, count, seed=0, workers=workers)
            log(f"generated {count} {split} images in {data}")


class ValSet:
    """The val images letterboxed once (uint8), their ids and letterbox geometry, and the COCO annotations (the first
    ``limit`` images in file order, or all)."""

    def __init__(self, data: Path, limit: int | None = None):
        from trtkit.detection import Letterbox, list_images
        from trtkit.eval.coco import category_ids, load_coco
        from trtkit.eval.detection import match_images

        self.coco = load_coco(data / "val.json")
        self.categories = category_ids(self.coco)
        pairs = match_images(self.coco, list_images(data / "val"))[:limit]
        letterbox = Letterbox((SIZE, SIZE))
        self.canvas = np.full((len(pairs), SIZE, SIZE, 3), 114, np.uint8)
        self.metas = [letterbox.paste(path, self.canvas[i]) for i, (path, _) in enumerate(pairs)]
        self.ids = [image_id for _, image_id in pairs]
        self.letterbox = letterbox

    def batches(self):
        for start in range(0, len(self.ids), EVAL_BATCH):
            yield start, self.letterbox.to_batch(self.canvas[start:start + EVAL_BATCH])


def engine_outputs(engine: Path, val: ValSet) -> list[tuple[int, dict]]:
    from trtkit.runtime.runner import TrtRunner

    with TrtRunner(str(engine)) as runner:
        return [(start, runner.infer({"images": batch})) for start, batch in val.batches()]


def score(outputs, val: ValSet, decode: dict | None = None) -> dict:
    """pycocotools metrics (points) of raw outputs, decoded and mapped back as ``trtkit eval detection`` does."""
    from trtkit.detection import detections_from_outputs
    from trtkit.eval.coco import evaluate_coco, to_coco_results
    from trtkit.eval.detection import DecodeSettings

    options = (decode or DecodeSettings()).options()
    results = []
    for start, out in outputs:
        for k, det in enumerate(detections_from_outputs(out, **options)):
            results += to_coco_results(val.ids[start + k], det.mapped(val.metas[start + k]), val.categories)
    return evaluate_coco(val.coco, results, val.ids).to_json()


# --- builds --------------------------------------------------------------------------------------------------------


def build(run, key: str, work: Path, cache: Path, calib_dir: Path, opt_level, model, extra: dict | None = None,
          shapes: str | None = None) -> Path | None:
    from trtkit.builder.api import build as trtkit_build
    from trtkit.builder.config import BuildConfig, CalibrationSettings
    from trtkit.builder.profiles import parse_shapes

    options: dict = {"precision": "fp32"}
    if key.startswith("fp16"):
        options = {"precision": "fp16", "precision_constraints": CONSTRAINTS}
    elif key.startswith("int8"):
        from calibrators.settings import DEFAULT_ALGORITHMS

        mode = "calibrator" if key == "int8_calibrator" else "qdq"
        # each path's own default algorithm (the cache is named by it: a kept cache of another one is not reused)
        algorithm = DEFAULT_ALGORITHMS[mode]
        calib = CalibrationSettings(source=str(calib_dir), cache_path=str(cache / f"detector.{key}.{algorithm}.calib"),
                                    algorithm=algorithm, preprocess={"resize": "letterbox"})
        options = {"precision": "int8", "int8_mode": mode, "calibration": calib,
                   "qdq_keep_heads": key != "int8_qdq_heads"}
        if mode == "calibrator":
            options["precision_constraints"] = CONSTRAINTS
    options.update(extra or {})
    config = BuildConfig(profiles=[parse_shapes(shapes or profile())], tactic_sources=TACTICS,
                         optimization_level=opt_level, timing_cache=str(cache / "detector-timing.cache"),
                         workspace_bytes=4 << 30, **options)
    out = work / f"detector.{key}.engine"
    t0 = time.perf_counter()
    result = trtkit_build(model, config, output=out, isolate=False)
    row = run.result["rows"].setdefault(key, {})
    row["build_s"] = round(time.perf_counter() - t0, 2)
    row["engine_mb"] = round(len(result.engine) / 1e6, 3)
    report = result.manifest.precision_report or {}
    row["layers_by_precision"] = report.get("layers_by_precision")
    row["precision_notes"] = result.manifest.build.precision_plan.notes
    row["precision_constraints"] = config.precision_constraints
    log(f"built {key}: {row['engine_mb']} MB in {row['build_s']} s; layers {row['layers_by_precision']}")
    return out


# --- timings -------------------------------------------------------------------------------------------------------


def bench(engine: Path, batch: int, graph: bool, seconds: float, nhwc: bool = False, e2e: bool | None = None):
    from trtkit.bench.measure import BenchSettings, benchmark

    shape = (batch, SIZE, SIZE, 3) if nhwc else (batch, 3, SIZE, SIZE)
    settings = BenchSettings(shapes={"images": shape}, cuda_graph=graph, duration_s=seconds,
                             e2e=(batch == 1 and not graph) if e2e is None else e2e)
    return benchmark(str(engine), settings)


def time_row(run, key: str, engine: Path, seconds: float) -> None:
    row = run.result["rows"][key]
    b1 = bench(engine, 1, False, seconds)
    b8 = bench(engine, 8, False, seconds)
    b8g = bench(engine, 8, True, seconds)
    row.update(b1_ms=round(b1.compute.median, 4), b8_ms=round(b8.compute.median, 4),
               b8_graph_ms=round(b8g.compute.median, 4), b8_images_per_s=round(b8g.items_per_s, 1),
               b1_e2e_ms=round(b1.e2e.median, 4) if b1.e2e else None)
    log(f"timed {key}: b1 {row['b1_ms']} ms, b8 {row['b8_ms']} ms, b8 graph {row['b8_graph_ms']} ms, "
        f"{row['b8_images_per_s']} img/s")


def decoded_val_arrays(data: Path, images: int = 300) -> list:
    """The first val images, decoded once to RGB arrays (the sample's input: numpy in)."""
    from PIL import Image

    from trtkit.detection import list_images

    arrays = []
    for path in list_images(data / "val")[:images]:
        with Image.open(path) as img:
            arrays.append(np.asarray(img.convert("RGB")))
    return arrays


def sample_latency(run, key: str, engine: Path, arrays: list, what: str, letterbox: str = "auto",
                   comparator: tuple | None = None) -> list:
    """The sample's Detector (as ``detect.py`` runs it: CUDA graph, output views, the letterbox where ``letterbox``
    says) at batch 1 on decoded images against an engine's e2e latency alone (``trtkit bench``; ``comparator``:
    ``(ms, what)``, default the plain FP16 engine's); returns the detections of each image."""
    from detect import RUNNER_OPTIONS, Detector

    from trtkit.eval.models import open_model

    with open_model(str(engine), runner_options=RUNNER_OPTIONS) as model:
        detector = Detector(model, letterbox=letterbox)
        try:
            for array in arrays:  # warm-up: every image size's resize pass order (and taps) found once, graphs made
                detector([array])
            detector.times = {k: [] for k in detector.times}
            found = [detector([array])[0] for array in arrays]
        finally:
            detector.close()
    parts = {k: statistics.median(v) * 1e3 for k, v in detector.times.items()}
    total = sum(parts.values())
    fp16_e2e = run.result["rows"]["fp16"].get("b1_e2e_ms")
    e2e, against = comparator or (fp16_e2e, "trtkit bench's end-to-end TrtRunner.infer of the plain FP16 engine at "
                                            "batch 1 (rows.fp16)")
    where = detector.letterbox.where
    run.result[key] = {
        "engine": engine.name, "images": len(arrays), "input": f"{model.layout} {np.dtype(model.input_dtype)}",
        "letterbox": where, "letterbox_reason": detector.letterbox_reason,
        "pre_ms": round(parts["pre"], 4), "infer_ms": round(parts["infer"], 4),
        "post_ms": round(parts["post"], 4), "total_ms": round(total, 4), "engine_e2e_ms": e2e,
        "ratio": round(total / e2e, 3) if e2e else None,
        "ratio_vs_fp16_e2e": round(total / fp16_e2e, 3) if fp16_e2e else None,
        "what": f"median per-image ms of samples/detection/detect.py's Detector at batch 1 on {what} (decoded RGB "
                f"arrays in, detections in original pixels out, conf 0.25, letterbox on the {where.upper()}"
                + (": its kernels run in the engine's stream, so pre_ms is the host's part and the GPU's is in "
                   "infer_ms" if where == "gpu" else "")
                + f", after one warm-up pass over the images) vs {against}"}
    log(f"{key}: {run.result[key]}")
    return found


def build_fast(run, model: Path, engines: Path, cache: Path, data: Path, opt_level, with_nms: bool = True) -> Path:
    """FP16 with ``input_uint8_nhwc`` and ``add_nms``: the sample's fast path (uint8 pixels in, detections out)."""
    from trtkit.detection import NmsOptions

    extra = {"input_uint8_nhwc": True, "add_nms": NmsOptions(**NMS) if with_nms else None}
    shapes = f"images:1x{SIZE}x{SIZE}x3,8x{SIZE}x{SIZE}x3,32x{SIZE}x{SIZE}x3"
    path = build(run, "fp16_fast", engines, cache, data / "train", opt_level, str(model), extra, shapes)
    run.result["fast_engine"] = dict(run.result["rows"].pop("fp16_fast"), add_nms=with_nms, input_uint8_nhwc=True)
    return path


def fast_path(run, fp16_engine: Path, fast_engine: Path | None, data: Path, seconds: float) -> None:
    """The sample on the plain FP16 engine (float NCHW in, numpy decode; numpy and GPU letterbox) and on the fast
    engine (GPU letterbox where it loads: ``sample_latency``, against the fast engine's own e2e; numpy letterbox); the
    fast engine's own e2e latency; how far their detections agree."""
    arrays = decoded_val_arrays(data)
    plain_what = "the plain FP16 engine (float NCHW input, numpy decode and NMS)"
    plain = sample_latency(run, "sample_latency_plain", fp16_engine, arrays, plain_what, letterbox="cpu")
    # the GPU letterbox's runs are guarded one by one: a failure there keeps the numpy figures
    run.guard("sample_latency_plain_gpu_letterbox",
              lambda: sample_latency(run, "sample_latency_plain_gpu_letterbox", fp16_engine, arrays, plain_what))
    if fast_engine is None:
        return
    nms = run.result["fast_engine"].get("add_nms", True)
    what = ("the FP16 engine built with --input-uint8-nhwc --add-nms (uint8 NHWC pixels in, EfficientNMS out)" if nms
            else "the FP16 engine built with --input-uint8-nhwc (uint8 NHWC pixels in, numpy decode and NMS)")
    own = bench(fast_engine, 1, False, seconds, nhwc=True, e2e=True)
    own_e2e = round(own.e2e.median, 4) if own.e2e else None
    run.result["fast_engine"]["b1_e2e_ms"] = own_e2e
    comparator = (own_e2e, "trtkit bench's end-to-end TrtRunner.infer of that engine itself at batch 1 "
                           "(fast_engine.b1_e2e_ms)") if own_e2e else None
    numpy_fast = sample_latency(run, "sample_latency_cpu_letterbox", fast_engine, arrays, what, letterbox="cpu",
                                comparator=comparator)
    fast = run.guard("sample_latency/gpu_letterbox",
                     lambda: sample_latency(run, "sample_latency", fast_engine, arrays, what, comparator=comparator))
    compared, ious, only_fast, only_plain = pair_detections(numpy_fast if fast is None else fast, plain)
    run.result["sample_fast_vs_plain"] = {
        "images": len(arrays), "boxes_compared": compared, "only_fast": only_fast, "only_plain": only_plain,
        "min_iou": round(min(ious), 5) if ious else None, "mean_iou": round(float(np.mean(ious)), 6) if ious else None,
        "fast_letterbox": "cpu" if fast is None else run.result["sample_latency"]["letterbox"],
        "what": "the sample's detections on the fast engine (letterbox: fast_letterbox) vs on the plain FP16 "
                "engine (numpy letterbox and decode, single-label; the plugin is multi-label), boxes paired by class "
                "and IoU >= 0.5"}
    log(f"fast vs plain: {run.result['sample_fast_vs_plain']}")
    if fast is not None:
        compared, ious, only_gpu, only_numpy = pair_detections(fast, numpy_fast)
        run.result["sample_gpu_vs_numpy_letterbox"] = {
            "images": len(arrays), "boxes_compared": compared, "only_gpu": only_gpu, "only_numpy": only_numpy,
            "min_iou": round(min(ious), 5) if ious else None, "letterbox": run.result["sample_latency"]["letterbox"],
            "what": "the sample's detections on the fast engine with its letterbox (sample_latency) vs with the numpy "
                    "letterbox (sample_latency_cpu_letterbox): the same pixels in, so the same boxes out"}
        log(f"gpu vs numpy letterbox: {run.result['sample_gpu_vs_numpy_letterbox']}")


# --- NMS plugin vs numpy ---------------------------------------------------------------------------------------------


def pair_detections(first: list, second: list) -> tuple:
    """Pair the boxes of two lists of per-image Detections by class and IoU >= 0.5, greedily in ``first``'s order:
    ``(pairs, their IoUs, boxes only in first, boxes only in second)``."""
    from trtkit.detection import box_iou

    compared, ious, only_first, only_second = 0, [], 0, 0
    for a, b in zip(first, second):
        used = np.zeros(len(b), bool)
        for box, cls in zip(a.boxes, a.classes):
            candidates = np.nonzero((b.classes == cls) & ~used)[0]
            iou = box_iou(box, b.boxes[candidates]) if len(candidates) else np.zeros(0)
            if len(iou) and iou.max() >= 0.5:
                used[candidates[int(iou.argmax())]] = True
                ious.append(float(iou.max()))
                compared += 1
            else:
                only_first += 1
        only_second += int((~used).sum())
    return compared, ious, only_first, only_second


def nms_match(run, plain_outputs, nms_engine: Path, val: ValSet) -> None:
    from trtkit.detection import decode, from_efficient_nms

    plugin = engine_outputs(nms_engine, val)
    theirs, ours = [], []
    for (_, head), (_, out) in zip(plain_outputs, plugin):
        ours += decode(head["output0"], conf_threshold=NMS["score_threshold"], iou_threshold=NMS["iou_threshold"],
                       max_detections=NMS["max_detections"], multi_label=True)
        theirs += from_efficient_nms(out["num_dets"], out["boxes"], out["scores"], out["classes"])
    compared, ious, only_plugin, only_numpy = pair_detections(theirs, ours)
    run.result["nms_match"] = {
        "boxes_compared": compared, "min_iou": round(min(ious), 5) if ious else None,
        "mean_iou": round(float(np.mean(ious)), 6) if ious else None, "only_plugin": only_plugin,
        "only_numpy": only_numpy, "images": len(val.ids), "settings": NMS,
        "what": "FP32 engine with --add-nms (EfficientNMS_TRT) vs the FP32 engine's head through trtkit's numpy "
                "decode (multi-label, same thresholds); boxes paired by class and IoU >= 0.5"}
    log(f"nms match: {run.result['nms_match']}")


# --- targets and output ----------------------------------------------------------------------------------------------


def targets_of(result: dict) -> dict:
    rows = result["rows"]
    fp32, fp16 = rows.get("fp32", {}).get("map"), rows.get("fp16", {}).get("map")
    out: dict = {}
    if fp32 is not None and fp16 is not None:
        out["fp16_within_0.3pt"] = {"delta": round(fp16 - fp32, 3), "met": abs(fp16 - fp32) <= 0.3}
    int8 = {k: rows[k] for k in ("int8_calibrator", "int8_qdq", "int8_qdq_heads")
            if rows.get(k, {}).get("map") is not None}
    if fp32 is not None and int8:
        best = max(int8, key=lambda k: int8[k]["map"])
        speed = (int8[best].get("b8_images_per_s") or 0) / (rows.get("fp16", {}).get("b8_images_per_s") or np.inf)
        out["best_int8"] = {"row": best, "delta": round(int8[best]["map"] - fp32, 3),
                            "within_1.5pt": fp32 - int8[best]["map"] <= 1.5,
                            "b8_images_per_s_vs_fp16": round(speed, 3), "at_least_1.15x": speed >= 1.15}
    match = result.get("nms_match")
    if match and match.get("min_iou") is not None:
        out["nms_min_iou_0.99"] = {"min_iou": match["min_iou"], "met": match["min_iou"] >= 0.99 and
                                   match["only_plugin"] == 0 and match["only_numpy"] == 0}
    lat = result.get("sample_latency")
    if lat and lat.get("ratio") is not None:
        out["sample_latency_1.5x"] = {"ratio": lat["ratio"], "met": lat["ratio"] <= 1.5}
    return out


def write(result: dict, folders) -> None:
    result["targets"] = targets_of(result)
    text = json.dumps(result, indent=2, sort_keys=True) + "\n"
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / "detection-h200.json.tmp"
        tmp.write_text(text)
        os.replace(tmp, folder / "detection-h200.json")


def environment() -> dict:
    from dataclasses import asdict

    from trtkit._lazy import tensorrt
    from trtkit.manifest import environment as env

    return asdict(env(tensorrt()))


def add_run_arguments(parser, budget: float) -> None:
    """The options this script shares with the benchmarks built on it (``qdq_placement_h200.py``)."""
    parser.add_argument("--out", type=Path, required=True, help="folder for the JSON")
    parser.add_argument("--cache", type=Path, required=True, help="timing and calibration caches (keep them)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/trtkit-detection"), help="data and engines")
    parser.add_argument("--calib", type=int, default=512, help="train images to calibrate on (512)")
    parser.add_argument("--budget", type=float, default=budget,
                        help=f"seconds; later parts are skipped past it ({budget:g})")
    parser.add_argument("--bench-seconds", type=float, default=1.0, help="measuring time of each bench run")
    parser.add_argument("--model", type=Path, default=MODEL, help="the detector (default: the sample's)")
    parser.add_argument("--val-images", type=int, default=2000, help="val images to generate and score (2000)")
    parser.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results",
                        help="the repository's copy of the JSON goes in this folder")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_arguments(parser, 540)
    parser.add_argument("--opt-level", type=int, default=None, help="builder optimization level (TensorRT's)")
    parser.add_argument("--rows", default=",".join(ROWS), help=f"subset of {','.join(ROWS)}")
    parser.add_argument("--merge", type=Path, help="results JSON of an earlier call: its figures are kept unless "
                        "measured again (the ONNX row is not re-scored), the targets recomputed")
    parser.add_argument("--fast-nms", action=argparse.BooleanOptionalAction, default=True,
                        help="build the sample's fast engine with --add-nms as well as --input-uint8-nhwc (on)")
    args = parser.parse_args(argv)
    global SIZE
    SIZE = input_size(args.model)
    rows = [k for k in ROWS if k in args.rows.split(",")]
    run = new_run(args.budget)
    if args.merge:
        merge_into(run, json.loads(args.merge.read_text()), rows)
        log(f"merging rows {','.join(rows)} into {args.merge}")
    folders = (args.out, args.results)
    data, engines = args.work / "data", args.work / "engines"
    for folder in (args.cache, data, engines):
        folder.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    run.result.setdefault("calls", []).append({"started": started, "rows": rows, "calib_images": args.calib,
                                               "optimization_level": args.opt_level,
                                               "argv": sys.argv[1:] if argv is None else list(argv)})
    run.result.update(model=str(args.model), profile=profile(), tactic_sources=list(TACTICS),
                      calib_images=args.calib, optimization_level=args.opt_level, started=started)
    run.guard("environment", lambda: run.result.update(environment=environment()))
    run.guard("data", lambda: ensure_data(data, args.val_images, args.calib, os.cpu_count() or 1))
    val = run.guard("val_letterbox", lambda: ValSet(data))
    if val is None:
        write(run.result, folders)
        return 1
    if "onnx" not in run.result["rows"]:
        onnx = run.guard("onnx/eval", lambda: onnx_row(run, args.model, data))
        log(f"onnx: {onnx}")
    plain = None
    for key in rows:
        earlier = run.result["rows"].pop(key, None)
        engine = run.guard(f"{key}/build", lambda key=key: build(run, key, engines, args.cache, data / "train",
                                                                  args.opt_level, args.model), cost=30)
        if engine is None:
            if earlier is not None:  # this call could not build it: the earlier figures stay
                run.result["rows"][key] = earlier
            continue
        outputs = run.guard(f"{key}/infer", lambda engine=engine: engine_outputs(engine, val))
        if outputs is not None:
            metrics = run.guard(f"{key}/score", lambda outputs=outputs: score(outputs, val))
            if metrics:
                run.result["rows"][key].update(map=metrics["map"], map50=metrics["map50"], ar100=metrics["ar100"])
                log(f"{key}: {metrics}")
            if key == "fp32":
                plain = outputs
        run.guard(f"{key}/bench", lambda key=key, engine=engine: time_row(run, key, engine, args.bench_seconds),
                  cost=10)
        if key == "fp32" and plain is not None:  # early: its build reuses the FP32 timing cache
            nms_engine = run.guard("fp32_nms/build", lambda: build_nms(run, args.model, engines, args.cache, data,
                                                                       args.opt_level), cost=30)
            if nms_engine is not None:
                run.guard("nms_match", lambda plain=plain, nms=nms_engine: nms_match(run, plain, nms, val))
        if key == "fp16":  # the fast engine's build reuses the FP16 timing cache
            fast = run.guard("fp16_fast/build", lambda: build_fast(run, args.model, engines, args.cache, data,
                                                                   args.opt_level, args.fast_nms), cost=30)
            run.guard("sample_latency", lambda engine=engine, fast=fast: fast_path(run, engine, fast, data,
                                                                                    args.bench_seconds), cost=15)
        write(run.result, folders)
    run.result["seconds"] = run.result["calls"][-1]["seconds"] = round(time.perf_counter() - STARTED, 1)
    write(run.result, folders)
    log(f"targets: {json.dumps(run.result['targets'])}")
    log(f"errors: {json.dumps(run.result['errors'])}" if run.result["errors"] else "no errors")
    return 0


def merge_into(run, earlier: dict, rows: list) -> None:
    """Start from an earlier call's results: its figures stay unless measured again; its errors about the rows
    measured now are re-decided by this call (``Run.resolved`` moves those that succeed to the notes)."""
    errors = dict(run.result["errors"])
    run.result = {**earlier, "errors": {**earlier.get("errors", {}), **errors}}
    run.result.setdefault("notes", {})
    run.result.setdefault("timings_s", {})
    run.result["rows"] = dict(earlier.get("rows", {}))
    if "calls" not in run.result:  # the earlier call, as its own keys describe it
        run.result["calls"] = [{"started": earlier.get("started"), "rows": [k for k in ROWS if k in earlier.get(
            "rows", {})], "seconds": earlier.get("seconds"), "calib_images": earlier.get("calib_images"),
            "optimization_level": earlier.get("optimization_level")}]


def input_size(model: Path) -> int:
    import onnx

    dims = onnx.load(str(model), load_external_data=False).graph.input[0].type.tensor_type.shape.dim
    return int(dims[2].dim_value)


def onnx_row(run, model: Path, data: Path) -> dict:
    """The reference row: the ONNX model through ``trtkit eval detection``'s own path (onnxruntime on the CPU)."""
    from trtkit.eval.detection import evaluate_detection

    result = evaluate_detection(model, data / "val", data / "val.json", batch=EVAL_BATCH)
    row = result.row("onnx")
    run.result["rows"]["onnx"] = {"map": row.metrics.map, "map50": row.metrics.map50, "ar100": row.metrics.ar100,
                                  "backend": row.model, "engine_mb": None, "b1_ms": None, "b8_ms": None,
                                  "b8_graph_ms": None, "b8_images_per_s": None, "build_s": None}
    return row.to_json()


def build_nms(run, model: Path, engines: Path, cache: Path, data: Path, opt_level) -> Path:
    from trtkit.detection import NmsOptions, add_nms

    path = build(run, "fp32_nms", engines, cache, data / "train", opt_level, add_nms(str(model), NmsOptions(**NMS)))
    run.result["nms_engine"] = run.result["rows"].pop("fp32_nms")
    return path


if __name__ == "__main__":
    sys.exit(main())
