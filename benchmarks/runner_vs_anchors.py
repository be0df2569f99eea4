#!/usr/bin/env python3
"""trtkit's runner against its anchors on one GPU, in one call (issue 4 §3).

ResNet-50 (torchvision, random weights, dynamic batch 1..32) exported by the torch venv, built FP16 with trtkit
(TensorRT's own tactic sources only: the GPU bundle stubs cuBLAS/cuDNN), then at batch 1, 8 and 32, numpy in → numpy
out unless noted:

- ``trtkit_ms`` / ``trtkit_graph_ms``: ``TrtRunner.infer`` without / with CUDA graphs;
- ``trtkit_device_ms``: device-resident input and output, CUDA graph on;
- ``polygraphy_ms``: Polygraphy's ``TrtRunner.infer``;
- ``loop_ms``: a plain cuda-python loop (pinned buffers, async copies, one sync); ``loop_graph_ms`` the same in a graph;
- ``floor_ms``: GPU time of one graph holding H2D + enqueue + D2H, replayed back to back (events around the replays);
  ``floor_compute_ms`` the same without the copies;
- ``torch_eager_ms`` (FP32), ``torch_eager_fp16_ms``, ``torch_compile_ms`` (FP16): PyTorch in its own process;
- ``bench_gpu_compute_ms``: the GPU compute median ``trtkit bench`` reports for the same engine and batch.

Then ``--leak-calls`` (100 000) calls through ``TrtRunner``: growth of device memory (cudaMemGetInfo) and host RSS.
Writes ``benchmarks/results/runner-h200.json`` and a copy in ``--out``. Each anchor's failure is recorded in
``errors`` instead of stopping the run.

    python3 benchmarks/runner_vs_anchors.py --out "$OUT" --cache /root/trtkit-cache
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TACTICS = ("EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS")
INPUT, OUTPUT = "images", "logits"
KEYS = ("floor_ms", "floor_compute_ms", "trtkit_ms", "trtkit_graph_ms", "trtkit_device_ms", "polygraphy_ms", "loop_ms",
        "torch_eager_ms", "torch_compile_ms", "bench_gpu_compute_ms")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def timed(fn, *, warmup_s: float = 0.3, budget_s: float = 1.5, min_calls: int = 30, max_calls: int = 5000) -> float:
    """Median milliseconds per call of ``fn()`` after warming up."""
    end = time.perf_counter() + min(warmup_s, budget_s)
    while time.perf_counter() < end:
        fn()
    times = []
    end = time.perf_counter() + budget_s
    while len(times) < max_calls and (time.perf_counter() < end or len(times) < min_calls):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


class Errors(dict):
    def guard(self, key: str, fn):
        """``fn()``, or None with the error recorded under ``key``."""
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - a failing anchor must not stop the others
            self[key] = f"{type(exc).__name__}: {exc}"
            log(f"ERROR {key}: {self[key]}")
            traceback.print_exc()
            return None


# --- torch side process -------------------------------------------------------------------------------------------


def start_torch(args, onnx_path: Path, workdir: Path):
    python = args.torch_python
    if args.no_torch or not Path(python).exists():
        return None
    cmd = [python, str(ROOT / "benchmarks" / "torch_anchor.py"), "--batches", ",".join(map(str, args.batches)),
           "--ready", str(workdir / "ready"), "--go", str(workdir / "go"), "--result", str(workdir / "torch.json"),
           "--budget-s", str(args.budget_s)]
    if not onnx_path.exists():
        cmd += ["--export", str(onnx_path)]
    logfile = open(workdir / "torch.log", "w")
    log(f"torch process: {' '.join(cmd)}")
    return subprocess.Popen(cmd, stdout=logfile, stderr=subprocess.STDOUT)


def wait_for(path: Path, proc, timeout_s: float) -> bool:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if path.exists():
            return True
        if proc is not None and proc.poll() is not None:
            return path.exists()
        time.sleep(0.2)
    return False


def finish_torch(proc, workdir: Path, results: dict, errors: Errors, out_dir: Path | None) -> None:
    if proc is None:
        errors["torch"] = "torch venv not run (--no-torch or its python is missing)"
        return
    (workdir / "go").write_text("go\n")
    try:
        proc.wait(timeout=180)
    except subprocess.TimeoutExpired:
        proc.kill()
        errors["torch"] = "torch process timed out"
    torch_log = (workdir / "torch.log").read_text(errors="replace")
    if out_dir is not None:
        (out_dir / "torch-anchor.log").write_text(torch_log)
    path = workdir / "torch.json"
    if not path.exists():
        errors.setdefault("torch", f"torch process wrote no results (rc {proc.returncode}): {torch_log[-800:]}")
        return
    data = json.loads(path.read_text())
    results["torch"] = data.get("torch")
    for key, value in data.get("errors", {}).items():
        errors[f"torch.{key}"] = value
    for batch in results["batches"]:
        for key, value in data.get(str(batch), {}).items():
            target = results[str(batch)] if key in KEYS else results["extra"].setdefault(str(batch), {})
            target[key] = value


# --- engine ---------------------------------------------------------------------------------------------------------


def build_engine(onnx_path: Path, cache: Path, opt_batch: int, results: dict) -> bytes:
    import tensorrt as trt

    from trtkit.build.api import build
    from trtkit.build.config import BuildConfig
    from trtkit.build.profiles import InputShape, Profile

    sha = hashlib.sha256(onnx_path.read_bytes()).hexdigest()[:16]
    engine_path = cache / f"resnet50-fp16-opt{opt_batch}-{sha}-trt{trt.__version__}.engine"
    results["engine"] = {"path": str(engine_path), "onnx_sha256_16": sha, "precision": "fp16",
                         "profile": {"min": 1, "opt": opt_batch, "max": 32}, "tactic_sources": list(TACTICS)}
    if engine_path.exists():
        results["engine"]["cached"] = True
        return engine_path.read_bytes()
    shape = lambda b: (b, 3, 224, 224)  # noqa: E731
    config = BuildConfig(precision="fp16", tactic_sources=TACTICS, timing_cache=str(cache / "resnet50-fp16.cache"),
                         profiles=[Profile({INPUT: InputShape(shape(1), shape(opt_batch), shape(32))})])
    t0 = time.perf_counter()
    result = build(str(onnx_path), config, output=engine_path, isolate=False)
    results["engine"].update(cached=False, build_s=round(time.perf_counter() - t0, 1))
    return result.engine


# --- anchors --------------------------------------------------------------------------------------------------------


def trtkit_anchor(engine: bytes, x: np.ndarray, budget_s: float, **runner_args) -> float:
    from trtkit.runtime import TrtRunner

    with TrtRunner(engine, **runner_args) as runner:
        feed = {INPUT: x}
        return timed(lambda: runner.infer(feed), budget_s=budget_s)


def trtkit_pinned_anchor(engine: bytes, x: np.ndarray, budget_s: float) -> float:
    """Graph on, inputs written in place into the runner's pinned buffers (``host_inputs``), outputs as views into
    pinned memory (``copy_outputs=False``): the runner's own overhead with no host copies at all."""
    from trtkit.runtime import TrtRunner

    with TrtRunner(engine, cuda_graph=True, copy_outputs=False) as runner:
        feed = runner.host_inputs({INPUT: x.shape})
        np.copyto(feed[INPUT], x)
        return timed(lambda: runner.infer(feed), budget_s=budget_s)


def trtkit_throughput_anchor(engine: bytes, x: np.ndarray, budget_s: float, runners: int = 2) -> float:
    """Milliseconds per call, amortized, through a ``RunnerPool`` of graph runners (each its own stream): the host
    copies of one call overlap the GPU work of another (numpy in, numpy out)."""
    from trtkit.runtime import RunnerPool

    with RunnerPool(engine, size=runners, cuda_graph=True) as pool:
        feed = {INPUT: x}

        def run(calls: int) -> float:
            t0 = time.perf_counter()
            for _ in pool.map(feed for _ in range(calls)):
                pass
            return (time.perf_counter() - t0) * 1e3 / calls

        run(max(10, runners * 5))
        per_call = run(20)
        calls = max(20, int(budget_s * 1e3 / max(per_call, 1e-3)))
        return statistics.median(run(max(calls // 3, 10)) for _ in range(3))


def trtkit_device_anchor(engine: bytes, x: np.ndarray, budget_s: float) -> float:
    """Device-resident input and output (a DeviceArray stands in for a CuPy/torch tensor), graph on."""
    from trtkit.runtime import DeviceArray, TrtRunner
    from trtkit.runtime.cuda import default_cuda

    cuda = default_cuda()
    ptr = cuda.malloc(x.nbytes)
    try:
        cuda.memcpy_htod_async(ptr, x.ctypes.data, x.nbytes, 0)
        cuda.stream_synchronize(0)
        feed = {INPUT: DeviceArray(ptr, x.shape, x.dtype)}
        with TrtRunner(engine, cuda_graph=True, device_outputs=True) as runner:
            return timed(lambda: runner.infer(feed), budget_s=budget_s)
    finally:
        cuda.free(ptr)


def polygraphy_anchor(engine: bytes, x: np.ndarray, budget_s: float) -> float:
    from polygraphy.backend.trt import EngineFromBytes
    from polygraphy.backend.trt import TrtRunner as PolygraphyRunner

    with PolygraphyRunner(EngineFromBytes(engine)) as runner:
        feed = {INPUT: x}
        return timed(lambda: runner.infer(feed), budget_s=budget_s)


def raw_anchors(engine_bytes: bytes, x: np.ndarray, budget_s: float, errors: Errors, batch: int) -> dict:
    """The plain cuda-python loop, the same in a graph, and the floors, on one hand-made context."""
    import tensorrt as trt
    from cuda.bindings import runtime as rt

    from trtkit.runtime.buffers import host_view
    from trtkit.runtime.cuda import check
    from trtkit.runtime.engine import deserialize

    held = {"engine": deserialize(engine_bytes, trt=trt)}  # dropped in order at the end: context, then engine
    ctx = held["ctx"] = held["engine"].create_execution_context()
    s = int(check(rt.cudaStreamCreateWithFlags(rt.cudaStreamNonBlocking)))
    ctx.set_input_shape(INPUT, x.shape)
    out_shape = tuple(ctx.get_tensor_shape(OUTPUT))
    n_in, n_out = x.nbytes, int(np.prod(out_shape)) * 4
    d_in, d_out = int(check(rt.cudaMalloc(n_in))), int(check(rt.cudaMalloc(n_out)))
    p_in, p_out = int(check(rt.cudaMallocHost(n_in))), int(check(rt.cudaMallocHost(n_out)))
    h_in = host_view(p_in, n_in).view(np.float32).reshape(x.shape)
    h_out = host_view(p_out, n_out).view(np.float32).reshape(out_shape)
    ctx.set_tensor_address(INPUT, d_in)
    ctx.set_tensor_address(OUTPUT, d_out)
    h2d, d2h = rt.cudaMemcpyKind.cudaMemcpyHostToDevice, rt.cudaMemcpyKind.cudaMemcpyDeviceToHost

    def enqueue(copies: bool):
        if copies:
            rt.cudaMemcpyAsync(d_in, p_in, n_in, h2d, s)
        ctx.execute_async_v3(s)
        if copies:
            rt.cudaMemcpyAsync(p_out, d_out, n_out, d2h, s)

    def loop_call():
        np.copyto(h_in, x)
        enqueue(True)
        rt.cudaStreamSynchronize(s)
        return h_out.copy()

    out = {"loop_ms": errors.guard(f"{batch}.loop_ms", lambda: timed(loop_call, budget_s=budget_s))}
    graphs = []
    try:
        full = capture(rt, s, lambda: enqueue(True), graphs)
        compute = capture(rt, s, lambda: enqueue(False), graphs)

        def graph_call():
            np.copyto(h_in, x)
            check(rt.cudaGraphLaunch(full, s))
            rt.cudaStreamSynchronize(s)
            return h_out.copy()

        out["loop_graph_ms"] = errors.guard(f"{batch}.loop_graph_ms", lambda: timed(graph_call, budget_s=budget_s))
        tail = capture(rt, s, lambda: (ctx.execute_async_v3(s), rt.cudaMemcpyAsync(p_out, d_out, n_out, d2h, s)),
                       graphs)

        def pageable_call():
            # H2D straight from the numpy array (pageable): the driver stages it in chunks, overlapping the host
            # copy with the DMA; not capturable, so the graph holds only the engine and the D2H copy.
            check(rt.cudaMemcpyAsync(d_in, x.ctypes.data, n_in, h2d, s))
            check(rt.cudaGraphLaunch(tail, s))
            rt.cudaStreamSynchronize(s)
            return h_out.copy()

        out["loop_pageable_graph_ms"] = errors.guard(f"{batch}.loop_pageable_graph_ms",
                                                     lambda: timed(pageable_call, budget_s=budget_s))
        out["floor_ms"] = errors.guard(f"{batch}.floor_ms", lambda: replay_floor(rt, s, full))
        out["floor_compute_ms"] = errors.guard(f"{batch}.floor_compute_ms", lambda: replay_floor(rt, s, compute))
    finally:
        check(rt.cudaStreamSynchronize(s))
        for destroy, handle in graphs:
            destroy(handle)
        for ptr in (d_in, d_out):
            rt.cudaFree(ptr)
        for ptr in (p_in, p_out):
            rt.cudaFreeHost(ptr)
        rt.cudaStreamDestroy(s)
        ctx = None
        held.pop("ctx")
        held.pop("engine")
    return out


def capture(rt, s: int, enqueue, graphs: list):
    from trtkit.runtime.cuda import check

    enqueue()  # warm-up outside capture
    check(rt.cudaStreamSynchronize(s))
    check(rt.cudaStreamBeginCapture(s, rt.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal))
    enqueue()
    graph = check(rt.cudaStreamEndCapture(s))
    graph_exec = check(rt.cudaGraphInstantiate(graph, 0))
    graphs += [(rt.cudaGraphExecDestroy, graph_exec), (rt.cudaGraphDestroy, graph)]
    return graph_exec


def replay_floor(rt, s: int, graph_exec, reps: int = 200, rounds: int = 7) -> float:
    """Median over rounds of (events around ``reps`` back-to-back replays) / reps, in ms."""
    from trtkit.runtime.cuda import check

    start, end = check(rt.cudaEventCreate()), check(rt.cudaEventCreate())
    try:
        for _ in range(20):
            check(rt.cudaGraphLaunch(graph_exec, s))
        check(rt.cudaStreamSynchronize(s))
        per_round = []
        for _ in range(rounds):
            check(rt.cudaEventRecord(start, s))
            for _ in range(reps):
                check(rt.cudaGraphLaunch(graph_exec, s))
            check(rt.cudaEventRecord(end, s))
            check(rt.cudaEventSynchronize(end))
            per_round.append(check(rt.cudaEventElapsedTime(start, end)) / reps)
        return statistics.median(per_round)
    finally:
        rt.cudaEventDestroy(start)
        rt.cudaEventDestroy(end)


def bench_anchor(engine: bytes, x: np.ndarray, budget_s: float, extra: dict) -> float:
    from trtkit.bench import BenchSettings, benchmark

    result = benchmark(engine, BenchSettings(shapes={INPUT: x.shape}, cuda_graph=True, duration_s=budget_s,
                                             warmup_ms=min(200.0, budget_s * 200), e2e=False))
    extra["bench_latency_median_ms"] = round(result.latency.median, 4)
    extra["bench_qps"] = round(result.qps, 1)
    extra["bench_warnings"] = result.warnings
    return result.compute.median


def host_copy_figures(x: np.ndarray, extra: dict) -> None:
    """How long copying the input into pinned memory takes, on one thread and split over threads."""
    from trtkit.runtime import buffers
    from trtkit.runtime.cuda import default_cuda

    pinned = buffers.HostBuffer(default_cuda(), x.nbytes)
    try:
        dst = pinned.view(x.dtype, x.shape)
        extra["copy_threads_default"] = buffers.COPY_THREADS
        for threads in (1, 4, 8):
            key = f"host_copy_{threads}t_ms"
            extra[key] = _round(timed(lambda: buffers.copy_into(dst, x, threads=threads), warmup_s=0.05,
                                      budget_s=0.2))
    finally:
        pinned.free()


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def leak_check(engine: bytes, calls: int, results: dict) -> None:
    from trtkit.runtime import TrtRunner
    from trtkit.runtime.cuda import default_cuda

    cuda = default_cuda()
    x = np.random.default_rng(1).uniform(-1, 1, (1, 3, 224, 224)).astype(np.float32)
    with TrtRunner(engine, cuda_graph=True) as runner:
        feed = {INPUT: x}
        for _ in range(2000):
            runner.infer(feed)
        gc.collect()
        free0, rss0 = cuda.mem_get_info()[0], rss_bytes()
        t0 = time.perf_counter()
        for _ in range(calls):
            runner.infer(feed)
        elapsed = time.perf_counter() - t0
        gc.collect()
        free1, rss1 = cuda.mem_get_info()[0], rss_bytes()
    results.update(leak_calls=calls, leak_bytes_device=free0 - free1, leak_bytes_host=rss1 - rss0,
                   leak_mean_call_ms=round(elapsed / max(calls, 1) * 1e3, 4))


# --- report ---------------------------------------------------------------------------------------------------------


def targets(results: dict) -> dict:
    """Issue 4's targets, each with its value and whether it was met (None when a number is missing)."""
    def get(batch, key):
        return results.get(str(batch), {}).get(key)

    def item(value, target, ok):
        return {"value": None if value is None else round(value, 4), "target": target,
                "met": None if value is None else bool(ok(value))}

    def ratio(a, b):
        return None if a is None or b is None or b == 0 else a / b

    out = {
        "b1_graph_over_floor": item(ratio(get(1, "trtkit_graph_ms"), get(1, "floor_ms")), "<= 1.10",
                                    lambda v: v <= 1.10),
        "b1_loop_graph_over_floor": item(ratio(results.get("extra", {}).get("1", {}).get("loop_graph_ms"),
                                               get(1, "floor_ms")), "reference: the hand-written graph loop",
                                         lambda v: v <= 1.10),
        "b1_direct_graph_over_floor": item(ratio(results.get("extra", {}).get("1", {}).get("trtkit_graph_direct_ms"),
                                                 get(1, "floor_ms")), "<= 1.10 (pinned_inputs=False)",
                                           lambda v: v <= 1.10),
        "b1_pinned_graph_over_floor": item(ratio(results.get("extra", {}).get("1", {}).get("trtkit_graph_pinned_ms"),
                                                 get(1, "floor_ms")), "<= 1.10 (inputs filled in pinned memory)",
                                           lambda v: v <= 1.10),
        "b1_polygraphy_over_graph": item(ratio(get(1, "polygraphy_ms"), get(1, "trtkit_graph_ms")), ">= 4",
                                         lambda v: v >= 4),
        "b32_graph_throughput_over_floor": item(ratio(get(32, "floor_ms"), get(32, "trtkit_graph_ms")), ">= 0.97",
                                                lambda v: v >= 0.97),
        "b32_async2_throughput_over_floor": item(
            ratio(get(32, "floor_ms"), results.get("extra", {}).get("32", {}).get("trtkit_async2_per_call_ms")),
            ">= 0.97 (two graph runners, infer_async, numpy in/out)", lambda v: v >= 0.97),
        "b32_device_throughput_over_floor": item(ratio(get(32, "floor_ms"), get(32, "trtkit_device_ms")),
                                                 ">= 0.97 (informative)", lambda v: v >= 0.97),
        "leak_bytes_device": item(results.get("leak_bytes_device"), "<= 0", lambda v: v <= 0),
        "leak_bytes_host": item(results.get("leak_bytes_host"), "~0 (allocator noise < 1 MiB)",
                                lambda v: v < (1 << 20)),
    }
    for batch in results["batches"]:
        dev, comp = get(batch, "trtkit_device_ms"), get(batch, "floor_compute_ms")
        out[f"b{batch}_device_minus_floor_compute_us"] = item(
            None if dev is None or comp is None else (dev - comp) * 1e3, "<= 25", lambda v: v <= 25)
        out[f"b{batch}_bench_compute_over_floor_compute"] = item(
            ratio(get(batch, "bench_gpu_compute_ms"), comp), "within 2% of 1.0", lambda v: abs(v - 1) <= 0.02)
    return out


def print_table(results: dict) -> None:
    keys = KEYS + ("loop_graph_ms", "loop_pageable_graph_ms", "trtkit_graph_direct_ms", "trtkit_graph_views_ms",
                   "trtkit_graph_pinned_ms", "trtkit_async2_per_call_ms", "torch_eager_fp16_ms")
    print(f"{'ms':>22}" + "".join(f"{'batch ' + str(b):>12}" for b in results["batches"]))
    for key in keys:
        cells = [{**results.get("extra", {}).get(str(b), {}), **results.get(str(b), {})}.get(key)
                 for b in results["batches"]]
        print(f"{key:>22}" + "".join(f"{c:>12.4f}" if isinstance(c, (int, float)) else f"{'-':>12}" for c in cells))
    for name, t in results.get("targets", {}).items():
        print(f"target {name}: {t['value']} (target {t['target']}) met={t['met']}")


def measure_batch(engine: bytes, batch: int, budget_s: float, errors: Errors) -> tuple[dict, dict]:
    """The issue's keys for one batch, and extra figures (kept apart so each batch has exactly those keys)."""
    x = np.random.default_rng(batch).uniform(-1, 1, (batch, 3, 224, 224)).astype(np.float32)
    row: dict = {key: None for key in KEYS}
    extra: dict = {}

    def guard(key, fn, into=row):
        into[key] = _round(errors.guard(f"{batch}.{key}", fn))

    guard("trtkit_ms", lambda: trtkit_anchor(engine, x, budget_s, cuda_graph=False))
    guard("trtkit_graph_ms", lambda: trtkit_anchor(engine, x, budget_s, cuda_graph=True))
    guard("trtkit_graph_views_ms", lambda: trtkit_anchor(engine, x, budget_s, cuda_graph=True, copy_outputs=False),
          into=extra)
    guard("trtkit_graph_pinned_ms", lambda: trtkit_pinned_anchor(engine, x, budget_s), into=extra)
    guard("trtkit_graph_direct_ms", lambda: trtkit_anchor(engine, x, budget_s, cuda_graph=True, pinned_inputs=False),
          into=extra)
    guard("trtkit_device_ms", lambda: trtkit_device_anchor(engine, x, budget_s))
    guard("trtkit_async2_per_call_ms", lambda: trtkit_throughput_anchor(engine, x, budget_s), into=extra)
    guard("polygraphy_ms", lambda: polygraphy_anchor(engine, x, budget_s))
    raw = errors.guard(f"{batch}.raw", lambda: raw_anchors(engine, x, budget_s, errors, batch)) or {}
    for key in ("loop_ms", "floor_ms", "floor_compute_ms"):
        row[key] = _round(raw.get(key))
    for key in ("loop_graph_ms", "loop_pageable_graph_ms"):
        extra[key] = _round(raw.get(key))
    guard("bench_gpu_compute_ms", lambda: bench_anchor(engine, x, budget_s, extra))
    errors.guard(f"{batch}.host_copy", lambda: host_copy_figures(x, extra))
    log(f"batch {batch}: {row} {extra}")
    return row, extra


def _round(value):
    return round(value, 4) if isinstance(value, float) else value


def main() -> int:
    ap = argparse.ArgumentParser(description="trtkit TrtRunner vs Polygraphy, a cuda-python loop, the GPU floor "
                                             "and PyTorch, on ResNet-50 FP16")
    ap.add_argument("--onnx", help="ResNet-50 ONNX with input 'images' (N,3,224,224) and output 'logits' "
                                   "(default: exported by the torch venv into --cache)")
    ap.add_argument("--out", help="also copy the results JSON and logs here (e.g. $OUT)")
    ap.add_argument("--cache", default=os.path.expanduser("~/.cache/trtkit-bench"),
                    help="folder for the ONNX model, timing cache and engine (reused by later calls)")
    ap.add_argument("--results", default=str(ROOT / "benchmarks" / "results" / "runner-h200.json"))
    ap.add_argument("--batches", type=lambda s: [int(b) for b in s.split(",")], default=[1, 8, 32])
    ap.add_argument("--opt-batch", type=int, default=1,
                    help="the profile's opt batch (min 1, max 32); 1 (default) tunes kernels for the batch-1 latency "
                         "targets, as the README's anchors; 32 reproduces its throughput table")
    ap.add_argument("--budget-s", type=float, default=1.0, help="seconds of measured calls per anchor and batch")
    ap.add_argument("--leak-calls", type=int, default=100_000)
    ap.add_argument("--deadline-s", type=float, default=450, help="shorten the leak check to end by then")
    ap.add_argument("--torch-python", default="/opt/torch/.venv/bin/python3")
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args()
    started = time.perf_counter()
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    out_dir = Path(args.out) if args.out else None
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
    errors = Errors()
    results: dict = {"gpu": None, "tensorrt": None, "batches": args.batches,
                     **{str(b): {key: None for key in KEYS} for b in args.batches}, "extra": {}}
    workdir = Path(tempfile.mkdtemp(prefix="trtkit-anchors-"))
    onnx_path = Path(args.onnx) if args.onnx else cache / "resnet50.onnx"  # the name the GPU tests use too
    proc = start_torch(args, onnx_path, workdir)
    try:
        run(args, results, errors, onnx_path, proc, workdir, cache, started)
    finally:
        errors.guard("torch", lambda: finish_torch(proc, workdir, results, errors, out_dir))
        results["targets"] = targets(results)
        results["errors"] = dict(errors)
        results["total_s"] = round(time.perf_counter() - started, 1)
        write_results(results, Path(args.results), out_dir)
        print_table(results)
    return 0


def run(args, results, errors, onnx_path, proc, workdir, cache, started) -> None:
    import tensorrt as trt

    from trtkit._device import device_info

    results["tensorrt"] = trt.__version__
    results["gpu"] = errors.guard("gpu", lambda: device_info().get("name"))
    if not wait_for(onnx_path, proc, 300):
        raise SystemExit(f"no ONNX model at {onnx_path} (torch export failed? see {workdir / 'torch.log'})")
    log(f"ONNX ready: {onnx_path}")
    engine = build_engine(onnx_path, cache, args.opt_batch, results)
    log(f"engine ready: {results['engine']}")
    if proc is not None:
        t0 = time.perf_counter()
        ready = wait_for(workdir / "ready", proc, 240)
        log(f"torch ready={ready} after waiting {time.perf_counter() - t0:.1f} s more")
    for batch in args.batches:
        results[str(batch)], results["extra"][str(batch)] = measure_batch(engine, batch, args.budget_s, errors)
    left_s = args.deadline_s - (time.perf_counter() - started) - 40  # keep time for the torch measurements
    calls = max(1000, min(args.leak_calls, int(left_s / 0.0006)))
    log(f"leak check: {calls} calls")
    errors.guard("leak", lambda: leak_check(engine, calls, results))


def write_results(results: dict, path: Path, out_dir: Path | None) -> None:
    text = json.dumps(results, indent=2, sort_keys=False, default=str) + "\n"
    for target in [path] + ([out_dir / path.name] if out_dir else []):
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            log(f"wrote {target}")
        except OSError as exc:
            log(f"could not write {target}: {exc}")


if __name__ == "__main__":
    sys.exit(main())
