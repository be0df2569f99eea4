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
- ``bench_gpu_compute_ms``: the GPU compute median ``trtkit bench --no-data-transfers`` reports for the same engine
  and batch (like ``floor_compute_ms``, the engine with no copies around it; the figure with copies in between, where
  they share the GPU's memory and L2 with it, is ``extra.bench_gpu_compute_with_transfers_ms``).

All latency anchors of a batch are open at once and measured in interleaved rounds, so drift over the run (GPU clocks,
temperature) does not favour whichever anchor ran last. Every anchor is given the same input array call after call (each
its own copy of it): trtkit's default runner page-locks that array in place on its second call and sends it from there
(``pin_reused_inputs``); ``trtkit_graph_copy_ms`` is the same runner without that, as for arrays not passed again
(copied into its pinned buffer below 1 MiB, sent from pageable memory from 1 MiB). Extra rows show where time goes: the
trtkit runner with outputs as views and with inputs written in place (``host_inputs``), the hand-written loop in graphs
(input page-locked in place; pageable input; device buffers only), a ``RunnerPool`` of two graph runners (throughput),
and ``breakdown_us``: one call's steps (input copy, launch, sync, output copy) by hand.

Then ``--leak-calls`` (100 000) calls through ``TrtRunner``: growth of device memory (cudaMemGetInfo) and host RSS.
Writes ``benchmarks/results/runner-h200.json`` and a copy in ``--out``. Each anchor's failure is recorded in
``errors`` instead of stopping the run.

    python3 benchmarks/runner_vs_anchors.py --out "$OUT" --cache /root/trtkit-cache
"""

from __future__ import annotations

import argparse
import contextlib
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
sys.path.insert(0, str(ROOT / "benchmarks"))
from timing import run_stamp, timed  # noqa: E402 - shared with torch_anchor.py

TACTICS = ("EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS")
INPUT, OUTPUT = "images", "logits"
KEYS = ("floor_ms", "floor_compute_ms", "trtkit_ms", "trtkit_graph_ms", "trtkit_device_ms", "polygraphy_ms", "loop_ms",
        "torch_eager_ms", "torch_compile_ms", "bench_gpu_compute_ms")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


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
    if proc is None:  # nobody is going to write it
        return path.exists()
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

    from trtkit.builder.api import build
    from trtkit.builder.config import BuildConfig
    from trtkit.builder.profiles import InputShape, Profile

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


class Interleaved:
    """Anchors measured in turns: each round gives every anchor the same slice of time, in a rotating order, so
    drift over the run (GPU clocks, temperature, other tenants) is shared instead of favouring whoever ran last.

    ``calls``: name → one call (wall time measured here); ``gpu``: name → GPU milliseconds of one replay (measured
    by the function itself with CUDA events). Results are medians over every call / round.
    """

    def __init__(self, errors: Errors, batch: int):
        self.errors, self.batch = errors, batch
        self.calls: dict = {}
        self.gpu: dict = {}

    def add(self, name: str, make) -> None:
        """Register ``make()`` → the one-call function (or None when it failed: recorded in ``errors``)."""
        fn = self.errors.guard(f"{self.batch}.{name}", make)
        if fn is not None:
            self.calls[name] = fn

    def add_gpu(self, name: str, make) -> None:
        fn = self.errors.guard(f"{self.batch}.{name}", make)
        if fn is not None:
            self.gpu[name] = fn

    def run(self, per_anchor_s: float, rounds: int = 8) -> dict:
        """Measure every anchor for about ``per_anchor_s`` seconds in all, spread over ``rounds`` rounds."""
        samples = {name: [] for name in [*self.calls, *self.gpu]}
        per_call = {}
        for name, fn in list(self.calls.items()):
            per_call[name] = self.errors.guard(f"{self.batch}.{name}", lambda fn=fn: _warm(fn))
            if per_call[name] is None:
                self.calls.pop(name)
        names = list(self.calls) + list(self.gpu)
        for r in range(rounds):
            for name in names[r % len(names):] + names[:r % len(names)] if names else []:
                if name in self.gpu:
                    value = self.errors.guard(f"{self.batch}.{name}", self.gpu[name])
                    if value is not None:
                        samples[name].append(value)
                    continue
                fn = self.calls.get(name)
                if fn is None:
                    continue
                n = max(5, int(per_anchor_s / rounds / max(per_call[name], 1e-6)))
                try:
                    fn()
                    for _ in range(n):
                        t0 = time.perf_counter()
                        fn()
                        samples[name].append((time.perf_counter() - t0) * 1e3)
                except Exception as exc:  # noqa: BLE001 - drop the anchor, keep the others
                    self.errors[f"{self.batch}.{name}"] = f"{type(exc).__name__}: {exc}"
                    self.calls.pop(name)
        return {name: statistics.median(values) for name, values in samples.items() if values}


def _warm(fn, seconds: float = 0.2) -> float:
    """Call ``fn`` for ``seconds``; return its mean seconds per call."""
    fn()
    calls, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds or calls < 5:
        fn()
        calls += 1
    return (time.perf_counter() - t0) / calls


def open_trtkit_anchors(stack: contextlib.ExitStack, anchors: Interleaved, engine: bytes, x: np.ndarray) -> None:
    """trtkit's runners, each on its own context and stream, kept open for the whole batch."""
    from trtkit.runtime import DeviceArray, TrtRunner
    from trtkit.runtime.cuda import default_cuda

    def runner(**options):
        r = stack.enter_context(TrtRunner(engine, **options))
        feed = {INPUT: x.copy()}  # its own array: one page-locked by another runner would be copied here
        return lambda: r.infer(feed)

    anchors.add("trtkit_ms", lambda: runner(cuda_graph=False))
    anchors.add("trtkit_graph_ms", lambda: runner(cuda_graph=True))  # the defaults
    # the copy route, as for arrays not passed again (through the pinned buffer, or straight from pageable memory)
    anchors.add("trtkit_graph_copy_ms", lambda: runner(cuda_graph=True, pin_reused_inputs=False))
    anchors.add("trtkit_graph_views_ms", lambda: runner(cuda_graph=True, copy_outputs=False))

    def pinned():
        """Inputs written in place into the runner's pinned buffers (``host_inputs``), outputs as views
        (``copy_outputs=False``): the runner's own overhead with no host copies at all."""
        r = stack.enter_context(TrtRunner(engine, cuda_graph=True, copy_outputs=False))
        in_place = r.host_inputs({INPUT: x.shape})
        np.copyto(in_place[INPUT], x)
        return lambda: r.infer(in_place)

    anchors.add("trtkit_graph_pinned_ms", pinned)

    def device():
        """Device-resident input and output (a DeviceArray stands in for a CuPy/torch tensor), graph on."""
        cuda = default_cuda()
        ptr = cuda.malloc(x.nbytes)
        stack.callback(cuda.free, ptr)
        cuda.memcpy_htod_async(ptr, x.ctypes.data, x.nbytes, 0)
        cuda.stream_synchronize(0)
        dev_feed = {INPUT: DeviceArray(ptr, x.shape, x.dtype)}
        r = stack.enter_context(TrtRunner(engine, cuda_graph=True, device_outputs=True))
        return lambda: r.infer(dev_feed)

    anchors.add("trtkit_device_ms", device)


def open_polygraphy_anchor(stack: contextlib.ExitStack, anchors: Interleaved, engine: bytes, x: np.ndarray) -> None:
    def make():
        from polygraphy.backend.trt import EngineFromBytes
        from polygraphy.backend.trt import TrtRunner as PolygraphyRunner

        r = stack.enter_context(PolygraphyRunner(EngineFromBytes(engine)))
        feed = {INPUT: x}
        return lambda: r.infer(feed)

    anchors.add("polygraphy_ms", make)


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


class RawLoops:
    """The plain cuda-python loop, the same in graphs, and the GPU floors, on one hand-made context (no trtkit
    code on the timed path). ``close()`` frees everything."""

    def __init__(self, engine_bytes: bytes, x: np.ndarray):
        import tensorrt as trt
        from cuda.bindings import runtime as rt

        from trtkit.runtime.buffers import host_view
        from trtkit.runtime.cuda import check
        from trtkit.runtime.engine import deserialize

        self.rt, self.graphs = rt, []
        self.x = x.copy()  # its own array, page-locked in place for registered_call
        self.pageable = x.copy()  # and one that is not, for pageable_call
        self.engine = deserialize(engine_bytes, trt=trt)
        self.ctx = self.engine.create_execution_context()
        self.s = s = int(check(rt.cudaStreamCreateWithFlags(rt.cudaStreamNonBlocking)))
        self.ctx.set_input_shape(INPUT, x.shape)
        out_shape = tuple(self.ctx.get_tensor_shape(OUTPUT))
        self.n_in, self.n_out = x.nbytes, int(np.prod(out_shape)) * 4
        self.d_in, self.d_out = int(check(rt.cudaMalloc(self.n_in))), int(check(rt.cudaMalloc(self.n_out)))
        self.p_in = int(check(rt.cudaMallocHost(self.n_in)))
        self.p_out = int(check(rt.cudaMallocHost(self.n_out)))
        self.h_in = host_view(self.p_in, self.n_in).view(np.float32).reshape(x.shape)
        self.h_out = host_view(self.p_out, self.n_out).view(np.float32).reshape(out_shape)
        self.ctx.set_tensor_address(INPUT, self.d_in)
        self.ctx.set_tensor_address(OUTPUT, self.d_out)
        self.h2d, self.d2h = rt.cudaMemcpyKind.cudaMemcpyHostToDevice, rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
        self.full = capture(rt, s, lambda: self._enqueue(True), self.graphs)
        self.x_ptr = self.x.ctypes.data
        check(rt.cudaHostRegister(self.x_ptr, self.n_in, rt.cudaHostRegisterDefault))
        self.registered = capture(rt, s, lambda: self._enqueue(True, source=self.x_ptr), self.graphs)
        self.compute = capture(rt, s, lambda: self._enqueue(False), self.graphs)
        self.tail = capture(rt, s, lambda: (self.ctx.execute_async_v3(s), self._d2h()), self.graphs)
        self.start, self.end = check(rt.cudaEventCreate()), check(rt.cudaEventCreate())

    def _d2h(self):
        self.rt.cudaMemcpyAsync(self.p_out, self.d_out, self.n_out, self.d2h, self.s)

    def _enqueue(self, copies: bool, source: int | None = None):
        if copies:
            self.rt.cudaMemcpyAsync(self.d_in, source or self.p_in, self.n_in, self.h2d, self.s)
        self.ctx.execute_async_v3(self.s)
        if copies:
            self._d2h()

    def loop_call(self):
        np.copyto(self.h_in, self.x)
        self._enqueue(True)
        self.rt.cudaStreamSynchronize(self.s)
        return self.h_out.copy()

    def graph_call(self):
        np.copyto(self.h_in, self.x)
        self.rt.cudaGraphLaunch(self.full, self.s)
        self.rt.cudaStreamSynchronize(self.s)
        return self.h_out.copy()

    def registered_call(self):
        """The graph loop with the input array page-locked in place (cudaHostRegister, once): no host copy."""
        self.rt.cudaGraphLaunch(self.registered, self.s)
        self.rt.cudaStreamSynchronize(self.s)
        return self.h_out.copy()

    def pageable_call(self):
        """H2D straight from the numpy array (pageable): the driver stages it in chunks, overlapping the host copy
        with the DMA; not capturable, so the graph holds only the engine and the D2H copy."""
        self.rt.cudaMemcpyAsync(self.d_in, self.pageable.ctypes.data, self.n_in, self.h2d, self.s)
        self.rt.cudaGraphLaunch(self.tail, self.s)
        self.rt.cudaStreamSynchronize(self.s)
        return self.h_out.copy()

    def device_call(self):
        """The compute graph on device buffers, launch + sync: the least one call on device data can take."""
        self.rt.cudaGraphLaunch(self.compute, self.s)
        self.rt.cudaStreamSynchronize(self.s)

    def floor(self, which: str, reps: int = 50) -> float:
        """GPU ms per replay of ``reps`` back-to-back replays of the ``full`` or ``compute`` graph."""
        from trtkit.runtime.cuda import check

        rt, graph = self.rt, getattr(self, which)
        for _ in range(3):
            check(rt.cudaGraphLaunch(graph, self.s))
        check(rt.cudaEventRecord(self.start, self.s))
        for _ in range(reps):
            check(rt.cudaGraphLaunch(graph, self.s))
        check(rt.cudaEventRecord(self.end, self.s))
        check(rt.cudaEventSynchronize(self.end))
        return check(rt.cudaEventElapsedTime(self.start, self.end)) / reps

    def close(self):
        rt = self.rt
        rt.cudaStreamSynchronize(self.s)
        for destroy, handle in self.graphs:
            destroy(handle)
        rt.cudaEventDestroy(self.start)
        rt.cudaEventDestroy(self.end)
        for ptr in (self.d_in, self.d_out):
            rt.cudaFree(ptr)
        for ptr in (self.p_in, self.p_out):
            rt.cudaFreeHost(ptr)
        rt.cudaHostUnregister(self.x_ptr)
        rt.cudaStreamDestroy(self.s)
        self.ctx = None  # the context before its engine
        self.engine = None


def open_raw_anchors(stack: contextlib.ExitStack, anchors: Interleaved, engine: bytes, x: np.ndarray) -> None:
    raw = anchors.errors.guard(f"{anchors.batch}.raw", lambda: RawLoops(engine, x))
    if raw is None:
        return
    stack.callback(raw.close)
    anchors.add("loop_ms", lambda: raw.loop_call)
    anchors.add("loop_graph_ms", lambda: raw.graph_call)
    anchors.add("loop_graph_registered_ms", lambda: raw.registered_call)
    anchors.add("loop_pageable_graph_ms", lambda: raw.pageable_call)
    anchors.add("loop_device_graph_ms", lambda: raw.device_call)
    anchors.add_gpu("floor_ms", lambda: lambda: raw.floor("full"))
    anchors.add_gpu("floor_compute_ms", lambda: lambda: raw.floor("compute"))


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


def bench_anchor(engine: bytes, x: np.ndarray, budget_s: float, extra: dict) -> float:
    from trtkit.bench import BenchSettings, benchmark

    result = benchmark(engine, BenchSettings(shapes={INPUT: x.shape}, cuda_graph=True, duration_s=budget_s,
                                             warmup_ms=min(200.0, budget_s * 200), e2e=False))
    compute_only = benchmark(engine, BenchSettings(shapes={INPUT: x.shape}, cuda_graph=True, duration_s=budget_s / 2,
                                                   warmup_ms=min(200.0, budget_s * 200), e2e=False,
                                                   data_transfers=False))
    extra["bench_gpu_compute_with_transfers_ms"] = round(result.compute.median, 4)
    extra["bench_latency_median_ms"] = round(result.latency.median, 4)
    extra["bench_qps"] = round(result.qps, 1)
    extra["bench_warnings"] = result.warnings
    return compute_only.compute.median  # like floor_compute_ms: the engine alone, no copies around it


def breakdown(engine: bytes, x: np.ndarray, calls: int = 2000) -> dict:
    """Where a batch's graph call goes, in microseconds (medians over ``calls``, on one runner each):

    - ``infer``: ``TrtRunner.infer`` with numpy in and out, copying the input (``pin_reused_inputs=False``); then the
      same steps by hand on that runner's own buffers and graph: ``copy_in`` (into pinned memory), ``launch``,
      ``sync``, ``copy_out`` (a fresh array);
    - ``in_place_infer``: ``infer`` with the defaults, the input page-locked in place; ``in_place_launch_sync``: its
      graph launched and synchronized through trtkit's wrappers;
    - ``device_infer``: ``infer`` on device-resident input and output; ``device_launch_sync``: its graph launched and
      synchronized through trtkit's wrappers; ``raw_launch_sync``: the same two calls on cuda-python directly.
    The gaps between a whole call and its steps are trtkit's Python overhead on this host's CPU.
    """
    from cuda.bindings import runtime as rt

    from trtkit.runtime import DeviceArray, TrtRunner
    from trtkit.runtime.buffers import copy_into, copy_of
    from trtkit.runtime.cuda import default_cuda

    ns = time.perf_counter_ns
    out: dict = {}
    feed = {INPUT: x}
    with TrtRunner(engine, cuda_graph=True, pin_reused_inputs=False) as r:
        for _ in range(50):
            r.infer(feed)
        in_view = r.host_inputs({INPUT: x.shape})[INPUT]  # the pinned buffer infer copies x into
        out_view = r.infer(feed, copy_outputs=False)[OUTPUT]  # the pinned buffer the graph copies the output to
        (graph,) = r.graphs().values()
        steps = {k: [] for k in ("infer", "copy_in", "launch", "sync", "copy_out")}
        for _ in range(calls):
            t0 = ns()
            r.infer(feed)
            t1 = ns()
            copy_into(in_view, x)
            t2 = ns()
            graph.launch(r.stream)
            t3 = ns()
            r.cuda.stream_synchronize(r.stream)
            t4 = ns()
            copy_of(out_view)
            t5 = ns()
            for key, a, b in (("infer", t0, t1), ("copy_in", t1, t2), ("launch", t2, t3), ("sync", t3, t4),
                              ("copy_out", t4, t5)):
                steps[key].append((b - a) / 1e3)
    out.update({k: round(float(np.median(v)), 2) for k, v in steps.items()})
    with TrtRunner(engine, cuda_graph=True) as r:
        for _ in range(50):
            r.infer(feed)
        (graph,) = [g for key, g in r.graphs().items() if key.sources[0] and key.sources[0][0]]  # reads x in place
        steps = {k: [] for k in ("in_place_infer", "in_place_launch_sync")}
        for _ in range(calls):
            t0 = ns()
            r.infer(feed)
            t1 = ns()
            graph.launch(r.stream)
            r.cuda.stream_synchronize(r.stream)
            t2 = ns()
            steps["in_place_infer"].append((t1 - t0) / 1e3)
            steps["in_place_launch_sync"].append((t2 - t1) / 1e3)
    out.update({k: round(float(np.median(v)), 2) for k, v in steps.items()})
    cuda = default_cuda()
    ptr = cuda.malloc(x.nbytes)
    try:
        cuda.memcpy_htod_async(ptr, x.ctypes.data, x.nbytes, 0)
        cuda.stream_synchronize(0)
        dev_feed = {INPUT: DeviceArray(ptr, x.shape, x.dtype)}
        with TrtRunner(engine, cuda_graph=True, device_outputs=True) as r:
            for _ in range(50):
                r.infer(dev_feed)
            (graph,) = r.graphs().values()
            steps = {k: [] for k in ("device_infer", "device_launch_sync", "raw_launch_sync")}
            s, exe = r.stream, graph.graph_exec
            for _ in range(calls):
                t0 = ns()
                r.infer(dev_feed)
                t1 = ns()
                graph.launch(s)
                r.cuda.stream_synchronize(s)
                t2 = ns()
                rt.cudaGraphLaunch(exe, s)
                rt.cudaStreamSynchronize(s)
                t3 = ns()
                for key, a, b in (("device_infer", t0, t1), ("device_launch_sync", t1, t2),
                                  ("raw_launch_sync", t2, t3)):
                    steps[key].append((b - a) / 1e3)
        out.update({k: round(float(np.median(v)), 2) for k, v in steps.items()})
    finally:
        cuda.free(ptr)
    return out


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
            extra[key] = _round(timed(lambda n=threads: buffers.copy_into(dst, x, threads=n), warmup_s=0.05,
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
    """Issue 4's targets, each with its value and whether it was met (None when a number is missing); extra rows
    (marked in their target text) show where the time goes."""
    def get(batch, key):
        return results.get(str(batch), {}).get(key, results.get("extra", {}).get(str(batch), {}).get(key))

    def item(value, target, ok):
        return {"value": None if value is None else round(value, 4), "target": target,
                "met": None if value is None else bool(ok(value))}

    def ratio(a, b):
        return None if a is None or b is None or b == 0 else a / b

    def minus_us(a, b):
        return None if a is None or b is None else (a - b) * 1e3

    at_most = lambda limit: (lambda v: v <= limit)  # noqa: E731
    at_least = lambda limit: (lambda v: v >= limit)  # noqa: E731
    out = {
        "b1_graph_over_floor": item(ratio(get(1, "trtkit_graph_ms"), get(1, "floor_ms")), "<= 1.10", at_most(1.10)),
        "b1_loop_graph_over_floor": item(ratio(get(1, "loop_graph_ms"), get(1, "floor_ms")),
                                         "reference: the hand-written cuda-python graph loop", at_most(1.10)),
        "b1_graph_over_loop_graph": item(ratio(get(1, "trtkit_graph_ms"), get(1, "loop_graph_ms")),
                                         "reference: trtkit against the hand-written graph loop", at_most(1.0)),
        "b1_pinned_graph_over_floor": item(ratio(get(1, "trtkit_graph_pinned_ms"), get(1, "floor_ms")),
                                           "<= 1.10 (inputs filled in pinned memory, outputs as views)",
                                           at_most(1.10)),
        "b1_graph_copy_over_floor": item(ratio(get(1, "trtkit_graph_copy_ms"), get(1, "floor_ms")),
                                         "reference: every input copied into pinned memory (arrays not passed again, "
                                         "or pin_reused_inputs=False)", at_most(1.10)),
        "b1_loop_graph_registered_over_floor": item(ratio(get(1, "loop_graph_registered_ms"), get(1, "floor_ms")),
                                                    "reference: the hand-written graph loop, input page-locked in "
                                                    "place", at_most(1.10)),
        "b1_polygraphy_over_graph": item(ratio(get(1, "polygraphy_ms"), get(1, "trtkit_graph_ms")), ">= 4",
                                         at_least(4)),
        "b32_graph_throughput_over_floor": item(ratio(get(32, "floor_ms"), get(32, "trtkit_graph_ms")),
                                                ">= 0.97 (one synchronous call at a time)", at_least(0.97)),
        "b32_graph_copy_throughput_over_floor": item(ratio(get(32, "floor_ms"), get(32, "trtkit_graph_copy_ms")),
                                                     "reference: one synchronous call at a time, every input copied",
                                                     at_least(0.97)),
        "b32_async2_throughput_over_floor": item(ratio(get(32, "floor_ms"), get(32, "trtkit_async2_per_call_ms")),
                                                 ">= 0.97 (RunnerPool of two graph runners, numpy in/out)",
                                                 at_least(0.97)),
        "leak_bytes_device": item(results.get("leak_bytes_device"), "<= 0", at_most(0)),
        "leak_bytes_host": item(results.get("leak_bytes_host"), "~0 (allocator noise < 1 MiB)", at_most(1 << 20)),
    }
    for batch in results["batches"]:
        comp = get(batch, "floor_compute_ms")
        out[f"b{batch}_device_minus_floor_compute_us"] = item(minus_us(get(batch, "trtkit_device_ms"), comp),
                                                              "<= 25", at_most(25))
        out[f"b{batch}_loop_device_minus_floor_compute_us"] = item(
            minus_us(get(batch, "loop_device_graph_ms"), comp),
            "reference: launch + sync of the compute graph by hand", at_most(25))
        out[f"b{batch}_bench_compute_over_floor_compute"] = item(
            ratio(get(batch, "bench_gpu_compute_ms"), comp), "within 2% of 1.0", lambda v: abs(v - 1) <= 0.02)
    return out


def print_table(results: dict) -> None:
    keys = KEYS + ("loop_graph_ms", "loop_graph_registered_ms", "loop_pageable_graph_ms", "loop_device_graph_ms",
                   "trtkit_graph_copy_ms", "trtkit_graph_views_ms", "trtkit_graph_pinned_ms",
                   "trtkit_async2_per_call_ms", "torch_eager_fp16_ms")
    print(f"{'ms':>28}" + "".join(f"{'batch ' + str(b):>12}" for b in results["batches"]))
    for key in keys:
        cells = [{**results.get("extra", {}).get(str(b), {}), **results.get(str(b), {})}.get(key)
                 for b in results["batches"]]
        print(f"{key:>28}" + "".join(f"{c:>12.4f}" if isinstance(c, (int, float)) else f"{'-':>12}" for c in cells))
    for name, t in results.get("targets", {}).items():
        print(f"target {name}: {t['value']} (target {t['target']}) met={t['met']}")


def measure_batch(engine: bytes, batch: int, budget_s: float, errors: Errors) -> tuple[dict, dict]:
    """The issue's keys for one batch, and extra figures (kept apart so each batch has exactly those keys).

    Every latency anchor and both floors are open at once and measured in interleaved rounds (:class:`Interleaved`);
    the throughput pool, ``trtkit bench`` and the host-copy figures run after, on their own.
    """
    x = np.random.default_rng(batch).uniform(-1, 1, (batch, 3, 224, 224)).astype(np.float32)
    row: dict = {key: None for key in KEYS}
    extra: dict = {}
    anchors = Interleaved(errors, batch)
    with contextlib.ExitStack() as stack:
        open_trtkit_anchors(stack, anchors, engine, x)
        open_polygraphy_anchor(stack, anchors, engine, x)
        open_raw_anchors(stack, anchors, engine, x)
        medians = anchors.run(budget_s)
    for key, value in medians.items():
        (row if key in row else extra)[key] = _round(value)

    def guard(key, fn, into=row):
        into[key] = _round(errors.guard(f"{batch}.{key}", fn))

    guard("trtkit_async2_per_call_ms", lambda: trtkit_throughput_anchor(engine, x, budget_s), into=extra)
    guard("bench_gpu_compute_ms", lambda: bench_anchor(engine, x, budget_s, extra))
    errors.guard(f"{batch}.host_copy", lambda: host_copy_figures(x, extra))
    extra["breakdown_us"] = errors.guard(f"{batch}.breakdown", lambda: breakdown(engine, x))
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
    results: dict = {**run_stamp(), "gpu": None, "tensorrt": None, "batches": args.batches,
                     **{str(b): {key: None for key in KEYS} for b in args.batches}, "extra": {}}
    workdir = Path(tempfile.mkdtemp(prefix="trtkit-anchors-"))
    onnx_path = Path(args.onnx) if args.onnx else cache / "resnet50.onnx"  # the name the GPU tests use too
    proc = start_torch(args, onnx_path, workdir)
    if proc is None and not onnx_path.exists() and not args.onnx:
        # no torch anchor process to export it (--no-torch): the same export as the precision benchmark's
        from precision_h200 import export_resnet

        errors.guard("export", lambda: export_resnet(cache))
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
