#!/usr/bin/env python3
"""FP16 and INT8 on one GPU, in one call (issue 3 §5): accuracy on real data, throughput next to raw TensorRT.

1. Digits CNN (``tests/data``, real data): top-1 on the held-out split of engines built by trtkit in FP32, FP16
   (flag), FP16 (cast), INT8 with TensorRT's calibrator (entropy, min-max) and INT8 Q/DQ made by trtkit.
2. ResNet-50 (torchvision, random weights, dynamic batch 1..32, exported here with the torch venv): FP32 (TF32),
   FP16, INT8 calibrator and INT8 Q/DQ engines built by trtkit, and their twins built with the raw TensorRT API with
   the same settings (the INT8 twins read trtkit's calibration cache / build trtkit's Q/DQ model). Throughput at
   batch 1, 8 and 32 is measured the same way for both (one CUDA graph of ``execute_async_v3`` on device buffers,
   replayed back to back, timed with CUDA events), interleaved, best of three rounds, right after each pair is built
   (a run cut short still reports the pairs done).
3. Calibration time of the INT8 calibrator build: first run (calibrates) and cached run (reads the cache).

Every measurement is guarded: a failure is recorded under ``errors`` and the rest goes on. Builds use TensorRT's own
tactic sources only (the GPU bundle stubs cuBLAS/cuDNN) and a shared timing cache under ``--cache`` (keep it between
calls), plus ``--opt-level`` for trtkit and raw builds alike. Parts past ``--budget`` seconds are skipped (recorded).

    python3 benchmarks/precision_h200.py --out "$OUT" --cache "$OUT/precision-cache" [--parts digits,resnet50]

Writes ``<out>/precision-h200.json`` and ``benchmarks/results/precision-h200.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TACTICS = ("EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS")
TORCH_PY = "/opt/torch/.venv/bin/python3"
DIGITS_PROFILE = "images:1x1x8x8,32x1x8x8,64x1x8x8"
RESNET_PROFILE = "images:1x3x224x224,32x3x224x224,32x3x224x224"
BATCHES = (1, 8, 32)
STARTED = time.perf_counter()

EXPORT = """
import sys, torch, torchvision
torch.manual_seed(0)
m = torchvision.models.resnet50(weights=None).eval()
x = torch.randn(1, 3, 224, 224)
torch.onnx.export(m, (x,), sys.argv[1], input_names=["images"], output_names=["logits"], opset_version=17,
                  dynamic_axes={"images": {0: "N"}, "logits": {0: "N"}}, dynamo=False)
"""


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - STARTED:6.1f}s] {msg}", flush=True)


class Run:
    """Results, errors and timings; ``guard`` runs one measurement and records its failure instead of raising."""

    def __init__(self, budget: float):
        self.budget = budget
        self.result: dict = {"errors": {}, "timings_s": {}, "notes": {}}
        self.folders: tuple = ()  # where save() writes the JSON

    def save(self) -> None:
        """Write what has been measured so far (a call cut short by its time limit still leaves its figures)."""
        self.result["targets"] = targets_of(self.result)
        write(self, self.folders)

    def resolved(self, key: str) -> None:
        """``key`` succeeded in this call: an error an earlier (merged) call left under it moves to the notes."""
        old = self.result["errors"].pop(key, None)
        if old is not None:
            self.result["notes"].setdefault("errors_resolved_by_later_calls", {})[key] = old

    def guard(self, key: str, fn, *, cost: float = 0.0):
        left = self.budget - (time.perf_counter() - STARTED)
        if left < cost:
            self.result["errors"][key] = f"skipped: {left:.0f} s left of the {self.budget:.0f} s budget"
            log(f"SKIP {key}")
            return None
        t0 = time.perf_counter()
        try:
            value = fn()
            self.resolved(key)
            return value
        except Exception as exc:  # noqa: BLE001 - one failure must not stop the other measurements
            self.result["errors"][key] = f"{type(exc).__name__}: {exc}"[:2000]
            log(f"ERROR {key}: {exc}")
            traceback.print_exc()
            return None
        finally:
            self.result["timings_s"][key] = round(time.perf_counter() - t0, 2)


# --- trtkit side ---------------------------------------------------------------------------------------------------


def timing_cache_path(cache: Path, profile: str) -> Path | None:
    """ResNet-50's own timing cache. The digits builds use none: TensorRT 8.6.0 writes Myelin entries for its Gemm
    layers that it then refuses to read back ("myelinCache ... The timing cache will not be used!"), which would
    also disable the cache for every build sharing the file."""
    return cache / "resnet50-precision-timing.cache" if profile == RESNET_PROFILE else None


def trtkit_config(profile: str, cache: Path, opt_level, **options):
    from trtkit.builder.config import BuildConfig
    from trtkit.builder.profiles import parse_shapes

    timing = timing_cache_path(cache, profile)
    return BuildConfig(profiles=[parse_shapes(profile)], tactic_sources=TACTICS, optimization_level=opt_level,
                       timing_cache=str(timing) if timing else None, workspace_bytes=4 << 30, **options)


INSPECTOR_DIR: Path | None = None  # set by main(): where each engine's inspector JSON is saved


def trtkit_build(model, config, name: str | None = None):
    """Build in this process; save the timing cache back (the builder returns it, the API writes it), and the
    engine's inspector JSON under ``INSPECTOR_DIR/<name>.json`` (the raw material of its precision report)."""
    from trtkit.builder.builder import build_serialized

    result = build_serialized(str(model), config)
    if result.timing_cache and config.timing_cache:
        Path(config.timing_cache).write_bytes(result.timing_cache)
    if name and INSPECTOR_DIR is not None:
        try:
            save_inspector(result.engine, INSPECTOR_DIR / f"{name}.json")
        except Exception as exc:  # noqa: BLE001 - the build's figures matter more than this record
            log(f"could not save the inspector JSON of {name}: {exc}")
    return result


def save_inspector(engine: bytes, path: Path) -> None:
    """The engine inspector's JSON with and without an execution context at the opt shapes (TensorRT 8.6 reports
    formats only with one), kept so a precision report can be recomputed from what TensorRT said."""
    from trtkit._lazy import tensorrt
    from trtkit.log import make_trt_logger
    from trtkit.runtime.engine import engine_information

    trt = tensorrt()
    deserialized = trt.Runtime(make_trt_logger(trt)).deserialize_cuda_engine(engine)
    plain = deserialized.create_engine_inspector().get_engine_information(trt.LayerInformationFormat.JSON)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"tensorrt": trt.__version__, "with_context": engine_information(trt, deserialized),
                                "without_context": plain}))


def notes_of(result) -> list:
    return result.manifest.build.precision_plan.notes


def top1(engine: bytes, x, y) -> float:
    from trtkit.runtime.runner import TrtRunner

    with TrtRunner(engine, check_manifest=False) as runner:
        logits = np.concatenate([runner.infer({"images": x[i:i + 64]})["logits"] for i in range(0, len(x), 64)])
    return round(float((logits.argmax(1) == y).mean()) * 100, 3)


DIGITS_KEYS = ("fp32", "fp16_flag", "fp16_cast", "int8_calibrator_entropy", "int8_calibrator_minmax", "int8_qdq",
               "int8_qdq_heads")
# TensorRT 8.6 keeps the digits CNN in FP32 under the FP16/INT8 flags alone (its FP32 kernels are faster at 8x8):
# the flag and calibrator variants ask for the precision with --precision-constraints prefer so the figures are those
# of FP16/INT8 engines (the precision share beside each says what ran).
CONSTRAINED = {"fp16_flag", "fp16_cast", "int8_calibrator_entropy", "int8_calibrator_minmax"}


def digits(run: Run, cache: Path, opt_level, keys=DIGITS_KEYS) -> None:
    from calibrators.sources import IterableSource
    from trtkit.builder.config import CalibrationSettings

    data = ROOT / "tests" / "data"
    model = data / "digits_cnn.onnx"
    hold = np.load(data / "digits_holdout.npz")
    calib = np.load(data / "digits_calib.npz")["x"]
    source = IterableSource([{"images": calib}], identity="tests/data/digits_calib.npz")
    variants = {
        "fp32": {},
        "fp16_flag": {"precision": "fp16", "fp16_mode": "flag"},
        "fp16_cast": {"precision": "fp16", "fp16_mode": "cast"},
        "int8_calibrator_entropy": {"precision": "int8", "int8_mode": "calibrator", "algorithm": "entropy"},
        "int8_calibrator_minmax": {"precision": "int8", "int8_mode": "calibrator", "algorithm": "minmax"},
        "int8_qdq": {"precision": "int8", "int8_mode": "qdq", "algorithm": "entropy"},
        # --qdq-quantize-heads: the classifier quantized too (the ResNet-50 b1 throughput question)
        "int8_qdq_heads": {"precision": "int8", "int8_mode": "qdq", "algorithm": "entropy", "qdq_keep_heads": False},
    }
    accuracy = run.result.setdefault("digits_top1", {})
    settings = run.result.setdefault("digits_settings", {})
    if accuracy and not settings:  # figures of a run before constraints existed: TensorRT's own choice
        run.result["digits_top1_unconstrained"] = dict(accuracy)
        run.result["digits_precision_share_unconstrained"] = dict(run.result.get("digits_precision_share", {}))
    shares = run.result.setdefault("digits_precision_share", {})
    notes = run.result["notes"].setdefault("digits", {})
    for key in keys:
        options = dict(variants[key])
        if key in CONSTRAINED:
            options["precision_constraints"] = "prefer"
        algorithm = options.pop("algorithm", None)
        if algorithm:
            cache_file = cache / f"digits.{key}.calib"
            options["calibration"] = CalibrationSettings(source=source, cache_path=str(cache_file), algorithm=algorithm)
            for stale in (cache_file, Path(f"{cache_file}.trtkit.json")):
                stale.unlink(missing_ok=True)  # measure a real calibration every time

        def one(options=options, key=key):
            t0 = time.perf_counter()
            result = trtkit_build(model, trtkit_config(DIGITS_PROFILE, cache, opt_level, **options), f"digits-{key}")
            return result, top1(result.engine, hold["x"], hold["y"]), time.perf_counter() - t0

        out = run.guard(f"digits/{key}", one, cost=5)
        if out:
            accuracy[key] = out[1]
            shares[key] = out[0].precision_report["flops_share"] if out[0].precision_report else None
            notes[key] = notes_of(out[0])
            settings[key] = {"precision_constraints": options.get("precision_constraints", "none")}
            log(f"digits {key}: top-1 {out[1]:.2f}%  {shares[key]}")
            if key == "int8_calibrator_entropy":
                again = run.guard("digits/int8_calibrator_entropy_cached", lambda: one(), cost=5)
                run.result["digits_calibration_seconds"] = {
                    "first": round(out[2], 2), "cached": round(again[2], 2) if again else None,
                    "what": "seconds of the digits INT8 entropy-calibrator build and top-1 run: calibrating, "
                            "then reading the cache it wrote"}
    if "int8_qdq" in keys or "int8_calibrator_entropy" in keys:
        run.guard("digits/entropy_vs_tensorrt", lambda: compare_caches(run, cache))


def compare_caches(run: Run, cache: Path) -> None:
    """trtkit's entropy amax (Q/DQ path) against TensorRT's EntropyCalibrator2 on the same data, per shared tensor."""
    from calibrators.cache import parse_cache

    ours = parse_cache((cache / "digits.int8_qdq.calib").read_bytes()).amaxes()
    theirs = parse_cache((cache / "digits.int8_calibrator_entropy.calib").read_bytes()).amaxes()
    run.result["digits_entropy_amax_trtkit_over_tensorrt"] = {
        name: round(ours[name] / theirs[name], 4) for name in sorted(ours) if theirs.get(name)}


# --- ResNet-50 -----------------------------------------------------------------------------------------------------


class RandomImages:
    """Deterministic synthetic calibration batches (random weights make real images pointless here)."""

    def __init__(self, count: int, batch: int = 32):
        self.count, self.batch = count, batch

    def __iter__(self):
        for i in range(self.count // self.batch):
            rng = np.random.default_rng(1000 + i)
            yield {"images": rng.standard_normal((self.batch, 3, 224, 224), dtype=np.float32)}


def export_resnet(cache: Path) -> Path:
    path = cache / "resnet50.onnx"
    if not path.exists():
        tmp = cache / "resnet50.onnx.tmp"
        subprocess.run([TORCH_PY, "-c", EXPORT, str(tmp)], check=True, timeout=300)
        os.replace(tmp, path)
    return path


RESNET_KEYS = ("fp32", "fp16", "int8_calibrator", "int8_qdq", "int8_qdq_heads", "int8_calibrator_cached")
# Asked for by name only: fp16_unprepared is the FP16 build with the build pipeline's rewrites and constant folding
# off (the ONNX goes to the parser as exported), to tell what the pipeline changes from what trtkit's builder does.
RESNET_EXTRA_KEYS = ("fp16_unprepared",)
# Engines whose throughput is a figure of the issue; int8_qdq_heads is --qdq-quantize-heads (classifier in INT8 too);
# int8_calibrator_cached only times the calibrator build that reads the cache an earlier call wrote (no throughput).


def resnet(run: Run, cache: Path, opt_level, calib_images: int, keys, raw_keys=RESNET_KEYS) -> None:
    """Build and measure the ResNet-50 ``keys`` (a subset of :data:`RESNET_KEYS`), each next to its raw twin when
    in ``raw_keys`` (a twin measured in an earlier call need not be rebuilt: the merge keeps it).

    The calibrator's cache is kept in ``cache`` between calls: a build that finds none calibrates (its seconds are
    ``calibration_seconds.first``), one that finds it reads it (``.cached``; ``int8_calibrator_cached`` does only
    that). The Q/DQ paths always collect their histograms afresh; the notes split that time.
    """
    from calibrators.sources import IterableSource
    from trtkit.builder.config import CalibrationSettings

    model = run.guard("resnet50/export", lambda: export_resnet(cache), cost=30)
    if model is None:
        return
    source = IterableSource(RandomImages(calib_images), identity=f"random-normal-{calib_images}")
    paths = {"calib": cache / "resnet50.calib", "qdq_calib": cache / "resnet50.qdq.calib",
             "qdq_model": cache / "resnet50.qdq.onnx", "heads_calib": cache / "resnet50.qdq-heads.calib",
             "heads_model": cache / "resnet50.qdq-heads.onnx"}
    if "int8_qdq" in keys and paths["qdq_calib"].exists():  # the last call's ranges: compared with this call's below
        paths["qdq_calib_before"] = cache / "resnet50.qdq.calib.before"
        os.replace(paths["qdq_calib"], paths["qdq_calib_before"])
    for key, stale in (("int8_qdq", paths["qdq_calib"]), ("int8_qdq_heads", paths["heads_calib"])):
        if key in keys:  # the Q/DQ variants built in this call calibrate afresh; the others' caches stay
            for path in (stale, Path(f"{stale}.trtkit.json")):
                path.unlink(missing_ok=True)
    calib = CalibrationSettings(source=source, cache_path=str(paths["calib"]), algorithm="entropy")
    qdq = CalibrationSettings(source=source, cache_path=str(paths["qdq_calib"]), algorithm="entropy")
    heads = CalibrationSettings(source=source, cache_path=str(paths["heads_calib"]), algorithm="entropy")
    builds = ResnetBuilds(run, model, cache, opt_level, raw_keys)
    seconds = run.result.setdefault("calibration_seconds", {
        "what": "seconds of the whole ResNet-50 INT8 calibrator build: calibrating (first), reading the cache (cached)",
        "calib_images": calib_images})
    for key in keys:
        if key == "fp32":
            builds.both("fp32", (), {})
        elif key == "fp16":
            builds.both("fp16", ("FP16",), {"precision": "fp16", "fp16_mode": "flag"})
        elif key == "fp16_unprepared":
            builds.both(key, ("FP16",), {"precision": "fp16", "fp16_mode": "flag", "sanitize": False,
                                         "fold_constants": False})
        elif key == "int8_calibrator":
            which = "cached" if paths["calib"].exists() else "first"
            took = builds.trtkit(key, precision="int8", int8_mode="calibrator", calibration=calib)
            if took:
                seconds[which] = round(took, 2)
            builds.raw_twin(key, model, ("INT8", "FP16"), calib_cache=paths["calib"])
        elif key == "int8_calibrator_cached":
            if not paths["calib"].exists():
                run.result["errors"][f"resnet50/{key}"] = "no calibration cache from an earlier call to read"
                continue
            took = builds.trtkit(key, precision="int8", int8_mode="calibrator", calibration=calib)
            if took:
                seconds["cached"] = round(took, 2)
            builds.engines.pop(key, None)
            run.save()
            continue
        elif key in ("int8_qdq", "int8_qdq_heads"):
            settings, saved = (qdq, paths["qdq_model"]) if key == "int8_qdq" else (heads, paths["heads_model"])
            took = builds.trtkit(key, precision="int8", int8_mode="qdq", calibration=settings,
                                 save_qdq_onnx=str(saved), qdq_keep_heads=(key == "int8_qdq"))
            if took:
                seconds["qdq_first" if key == "int8_qdq" else "qdq_heads_first"] = round(took, 2)
            builds.raw_twin(key, saved, ("INT8", "FP16"))
            if key == "int8_qdq" and "qdq_calib_before" in paths and paths["qdq_calib"].exists():
                run.result["resnet50_qdq_cache_same_as_last_call"] = (
                    paths["qdq_calib"].read_text() == paths["qdq_calib_before"].read_text())
        measure_pair(run, key, builds.engines, builds.raw)
        run.result.setdefault("resnet50_measured_in_call", {})[key] = len(run.result["calls"])
        run.save()


class ResnetBuilds:
    """trtkit builds and their raw-API twins, each guarded; engines kept for the throughput measurements."""

    def __init__(self, run: Run, model: Path, cache: Path, opt_level, raw_keys=RESNET_KEYS):
        self.run, self.model, self.cache, self.opt_level = run, model, cache, opt_level
        self.raw_keys = set(raw_keys)
        self.engines, self.raw = {}, {}
        self.shares = run.result.setdefault("resnet50_precision_share", {})
        self.notes = run.result["notes"].setdefault("resnet50", {})

    def trtkit(self, key: str, **options):
        cost = 150 if options.get("precision") == "int8" else 80  # seconds a build may take, roughly, on an H200
        return self.run.guard(f"resnet50/trtkit/{key}", lambda: self._trtkit(key, options), cost=cost)

    def _trtkit(self, key: str, options: dict) -> float:
        t0 = time.perf_counter()
        result = trtkit_build(self.model, trtkit_config(RESNET_PROFILE, self.cache, self.opt_level, **options),
                              f"resnet50-{key}")
        self.engines[key] = result.engine
        self.shares[key] = result.precision_report["flops_share"] if result.precision_report else None
        self.notes[key] = notes_of(result)
        log(f"resnet50 {key}: built in {time.perf_counter() - t0:.1f} s  {self.shares[key]}")
        return time.perf_counter() - t0

    def raw_twin(self, key: str, model: Path, flags: tuple, calib_cache: Path | None = None) -> None:
        if key not in self.engines:  # trtkit's build failed: a twin alone measures nothing
            return
        if key not in self.raw_keys:
            self.run.result["notes"].setdefault("raw_twins_kept_from_earlier_calls", [])
            if key not in self.run.result["notes"]["raw_twins_kept_from_earlier_calls"]:
                self.run.result["notes"]["raw_twins_kept_from_earlier_calls"].append(key)
            return

        def build():
            self.raw[key] = raw_build(model, self.cache, self.opt_level, flags, calib_cache=calib_cache)

        self.run.guard(f"resnet50/raw/{key}", build, cost=30)

    def both(self, key: str, flags: tuple, options: dict) -> None:
        self.trtkit(key, **options)
        self.raw_twin(key, self.model, flags)


def measure_pair(run: Run, key: str, engines: dict, raw: dict) -> None:
    """Throughput of trtkit's ``key`` engine and its raw twin at each batch, interleaved; recorded as soon as measured
    (so a run cut short by the budget still reports the pairs done), then the engines are dropped."""
    if key not in engines:  # trtkit's build failed: keep the last call's pair rather than mix calls
        run.result["errors"][f"throughput/{key}"] = "not measured: the trtkit build failed in this call"
        engines.pop(key, None)
        raw.pop(key, None)
        return
    trtkit_ips = run.result.setdefault("resnet50_images_per_s", {}).setdefault(key, {})
    raw_ips = run.result.setdefault("raw_api_images_per_s", {}).setdefault(key, {})
    for batch in BATCHES:
        for side, table, store in (("trtkit", engines, trtkit_ips), ("raw", raw, raw_ips)):
            if key in table:
                store[str(batch)] = run.guard(f"throughput/{side}/{key}/{batch}",
                                              lambda table=table, batch=batch: throughput(table[key], batch), cost=5)
        log(f"throughput {key} batch {batch}: trtkit {trtkit_ips.get(str(batch))} raw {raw_ips.get(str(batch))} img/s")
    if all(trtkit_ips.get(str(b)) for b in BATCHES):
        run.resolved(f"throughput/{key}")
    ratio = {b: round(v / raw_ips[b], 4) for b, v in trtkit_ips.items() if v and raw_ips.get(b)}
    run.result.setdefault("trtkit_vs_raw", {})[key] = ratio
    engines.pop(key, None)
    raw.pop(key, None)


# --- raw TensorRT API twins (deliberately no trtkit code) -----------------------------------------------------------


def _raw_trt():
    import tensorrt as trt

    return trt, trt.Logger(trt.Logger.WARNING)


def raw_build(onnx_path: Path, cache: Path, opt_level, flags: tuple, calib_cache: Path | None = None) -> bytes:
    """The same engine with the raw API: same profile, tactic sources, timing cache, optimization level, flags."""
    trt, logger = _raw_trt()
    builder = trt.Builder(logger)
    network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(Path(onnx_path).read_bytes()):
        raise RuntimeError(f"parse failed: {[parser.get_error(i).desc() for i in range(parser.num_errors)]}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, 4 << 30)
    mask = 0
    for name in TACTICS:
        mask |= 1 << int(getattr(trt.TacticSource, name))
    config.set_tactic_sources(mask)
    if opt_level is not None:
        config.builder_optimization_level = int(opt_level)
    config.set_flag(trt.BuilderFlag.TF32)
    for flag in flags:
        config.set_flag(getattr(trt.BuilderFlag, flag))
    profile = builder.create_optimization_profile()
    profile.set_shape("images", (1, 3, 224, 224), (32, 3, 224, 224), (32, 3, 224, 224))
    config.add_optimization_profile(profile)
    timing_path = timing_cache_path(cache, RESNET_PROFILE)
    timing = config.create_timing_cache(timing_path.read_bytes() if timing_path.exists() else b"")
    config.set_timing_cache(timing, True)
    if calib_cache is not None:
        config.int8_calibrator = _cache_only_calibrator(trt, calib_cache.read_bytes())
        config.set_calibration_profile(profile)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise RuntimeError("raw build failed")
    timing_path.write_bytes(bytes(timing.serialize()))
    return bytes(serialized)


def _cache_only_calibrator(trt, data: bytes):
    class CacheOnly(trt.IInt8EntropyCalibrator2):
        def __init__(self):
            trt.IInt8EntropyCalibrator2.__init__(self)

        def get_batch_size(self):
            return 32

        def get_batch(self, names):
            return None

        def read_calibration_cache(self):
            return data

        def write_calibration_cache(self, cache):
            return None

    return CacheOnly()


def _ok(result):
    err = result[0]
    if int(err) != 0:
        raise RuntimeError(f"CUDA error {err}")
    return result[1] if len(result) == 2 else result[1:]


def throughput(engine_bytes: bytes, batch: int, *, rounds: int = 3, seconds: float = 0.3) -> float:
    """Images per second, best of ``rounds``: one CUDA graph of ``execute_async_v3`` on device buffers, replayed back
    to back and timed with CUDA events."""
    from trtkit._lazy import cudart

    rt = cudart()
    trt, logger = _raw_trt()
    engine = trt.Runtime(logger).deserialize_cuda_engine(engine_bytes)
    context = engine.create_execution_context()
    context.set_input_shape("images", (batch, 3, 224, 224))
    buffers, handles = [], {}
    try:
        for i in range(engine.num_io_tensors):
            name = engine.get_tensor_name(i)
            size = int(np.prod(context.get_tensor_shape(name))) * np.dtype(
                trt.nptype(engine.get_tensor_dtype(name))).itemsize
            buffers.append(_ok(rt.cudaMalloc(max(size, 1))))
            context.set_tensor_address(name, int(buffers[-1]))
        stream = handles["stream"] = _ok(rt.cudaStreamCreateWithFlags(rt.cudaStreamNonBlocking))
        if not context.execute_async_v3(int(stream)):
            raise RuntimeError("execute_async_v3 failed")
        _ok(rt.cudaStreamSynchronize(stream))
        _ok(rt.cudaStreamBeginCapture(stream, rt.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal))
        context.execute_async_v3(int(stream))
        graph = handles["graph"] = _ok(rt.cudaStreamEndCapture(stream))
        exe = handles["exe"] = _ok(rt.cudaGraphInstantiate(graph, 0))
        start = handles["start"] = _ok(rt.cudaEventCreate())
        end = handles["end"] = _ok(rt.cudaEventCreate())
        per_launch = _timed(rt, exe, stream, start, end, 20) / 20
        launches = max(20, int(seconds * 1000 / max(per_launch, 1e-3)))
        best_ms = min(_timed(rt, exe, stream, start, end, launches) for _ in range(rounds))
        return round(batch * launches / (best_ms / 1000.0), 1)
    finally:
        _release(rt, handles, buffers)
        del context, engine


def _release(rt, handles: dict, buffers: list) -> None:
    for key, call in (("exe", rt.cudaGraphExecDestroy), ("graph", rt.cudaGraphDestroy), ("start", rt.cudaEventDestroy),
                      ("end", rt.cudaEventDestroy), ("stream", rt.cudaStreamDestroy)):
        if key in handles:
            call(handles[key])
    for ptr in buffers:
        rt.cudaFree(ptr)


def _timed(rt, exe, stream, start, end, launches: int) -> float:
    _ok(rt.cudaEventRecord(start, stream))
    for _ in range(launches):
        _ok(rt.cudaGraphLaunch(exe, stream))
    _ok(rt.cudaEventRecord(end, stream))
    _ok(rt.cudaEventSynchronize(end))
    return float(_ok(rt.cudaEventElapsedTime(start, end)))


# --- main ----------------------------------------------------------------------------------------------------------


def environment(run: Run) -> None:
    from trtkit._device import device_info

    info = device_info()
    run.result["gpu"] = info.get("name") or info.get("error")
    try:
        import tensorrt as trt

        run.result["tensorrt"] = trt.__version__
    except ImportError as exc:
        run.result["tensorrt"] = f"not importable: {exc}"


def main(argv=None) -> int:
    global INSPECTOR_DIR
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for precision-h200.json (e.g. $OUT)")
    ap.add_argument("--cache", help="folder kept between calls: timing cache, exported ResNet-50 (default: --out)")
    ap.add_argument("--parts", default="digits,resnet50", help="comma-separated: digits, resnet50")
    ap.add_argument("--digits-keys", default=",".join(DIGITS_KEYS), help="comma-separated digits variants")
    ap.add_argument("--resnet-keys", default=",".join(RESNET_KEYS),
                    help="comma-separated ResNet-50 engines to build and measure (each next to its raw twin)")
    ap.add_argument("--raw-keys", default=",".join(RESNET_KEYS),
                    help="ResNet-50 engines to build a raw-API twin for (default: all of --resnet-keys)")
    ap.add_argument("--merge", help="results JSON of an earlier call: its figures are kept unless measured again "
                                    "(a ResNet-50 run split over GPU calls of 10 minutes)")
    ap.add_argument("--opt-level", type=int, default=None, help="builder optimization level for every build")
    ap.add_argument("--calib-images", type=int, default=512, help="ResNet-50 calibration images (synthetic)")
    ap.add_argument("--budget", type=float, default=530.0, help="seconds; later parts are skipped past it")
    ap.add_argument("--results", default=str(ROOT / "benchmarks" / "results"), help="also write the JSON here")
    args = ap.parse_args(argv)
    keys = [k.strip() for k in args.resnet_keys.split(",") if k.strip()]
    digit_keys = [k.strip() for k in args.digits_keys.split(",") if k.strip()]
    raw_keys = [k.strip() for k in args.raw_keys.split(",") if k.strip()]
    resnet_known = RESNET_KEYS + RESNET_EXTRA_KEYS
    for given, known, flag in ((keys, resnet_known, "--resnet-keys"), (digit_keys, DIGITS_KEYS, "--digits-keys"),
                               (raw_keys, resnet_known, "--raw-keys")):
        unknown = [k for k in given if k not in known]
        if unknown:
            ap.error(f"{flag}: unknown {', '.join(unknown)}; expected some of {', '.join(known)}")
    out = Path(args.out)
    cache = Path(args.cache) if args.cache else out / "precision-cache"
    out.mkdir(parents=True, exist_ok=True)
    cache.mkdir(parents=True, exist_ok=True)
    INSPECTOR_DIR = out / "inspector"
    run = Run(args.budget)
    if args.merge and Path(args.merge).exists():
        run.result = json.loads(Path(args.merge).read_text())
        log(f"merging into the results of {len(run.result.get('calls', []))} earlier call(s) from {args.merge}")
    for key in ("errors", "timings_s", "notes"):
        run.result.setdefault(key, {})
    call = {"parts": args.parts, "resnet_keys": keys, "opt_level": args.opt_level, "calib_images": args.calib_images,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    run.result.setdefault("calls", []).append(call)
    run.result["settings"] = {"opt_level": args.opt_level, "tactic_sources": list(TACTICS),
                              "calib_images": args.calib_images,
                              "resnet50_profile": RESNET_PROFILE, "int8_flags": "INT8+FP16 (trtkit and raw alike)",
                              "throughput": "CUDA graph of execute_async_v3 on device buffers, best of 3 rounds"}
    environment(run)
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    run.folders = (out, Path(args.results), cache)  # in the cache too: a later call's --merge finds it there
    if "digits" in parts:
        digits(run, cache, args.opt_level, digit_keys)
        run.save()
    if "resnet50" in parts:
        resnet(run, cache, args.opt_level, args.calib_images, keys, raw_keys)
    call["total_seconds"] = round(time.perf_counter() - STARTED, 1)
    run.save()
    return 0


def targets_of(result: dict) -> dict:
    """The issue's targets, from whatever has been measured so far (None where a figure is missing)."""
    top1, ips, raw = result.get("digits_top1", {}), result.get("resnet50_images_per_s", {}), \
        result.get("raw_api_images_per_s", {})

    def item(value, target, ok):
        return {"value": value, "target": target, "met": (bool(ok) if value is not None else None)}

    out = {}
    base = top1.get("fp32")
    for key, limit in (("fp16_flag", 0.2), ("fp16_cast", 0.2), ("int8_calibrator_entropy", 1.0),
                       ("int8_calibrator_minmax", 1.0), ("int8_qdq", 1.0), ("int8_qdq_heads", 1.0)):
        drop = round(base - top1[key], 3) if base is not None and top1.get(key) is not None else None
        out[f"digits_{key}_drop_points"] = item(drop, f"<= {limit}", drop is not None and drop <= limit)
    for key in (k for k in RESNET_KEYS if k != "int8_calibrator_cached"):
        for batch in ("1", "8", "32"):
            a, b = ips.get(key, {}).get(batch), raw.get(key, {}).get(batch)
            ratio = round(a / b, 4) if a and b else None
            out[f"resnet50_{key}_b{batch}_over_raw"] = item(ratio, ">= 0.97", ratio is not None and ratio >= 0.97)

    def best_int8(batch):
        values = [ips.get(k, {}).get(batch) for k in ("int8_calibrator", "int8_qdq", "int8_qdq_heads")]
        return max((v for v in values if v), default=None)

    for batch, limit in (("32", 1.15), ("1", 1.0)):
        fp16, int8 = ips.get("fp16", {}).get(batch), best_int8(batch)
        ratio = round(int8 / fp16, 4) if fp16 and int8 else None
        out[f"resnet50_best_int8_over_fp16_b{batch}"] = item(ratio, f">= {limit}", ratio is not None and ratio >= limit)
    for batch in ("1", "8", "32"):
        for key, name in (("int8_qdq", "qdq"), ("int8_qdq_heads", "qdq_heads")):
            a, b = ips.get(key, {}).get(batch), ips.get("int8_calibrator", {}).get(batch)
            ratio = round(a / b, 4) if a and b else None
            out[f"resnet50_{name}_over_calibrator_b{batch}"] = item(ratio, ">= 0.95",
                                                                     ratio is not None and ratio >= 0.95)
    return out


def write(run: Run, folders) -> None:
    text = json.dumps(run.result, indent=2, sort_keys=True) + "\n"
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "precision-h200.json").write_text(text)
        log(f"wrote {folder / 'precision-h200.json'}")


if __name__ == "__main__":
    sys.exit(main())
