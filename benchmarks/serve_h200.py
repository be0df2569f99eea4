#!/usr/bin/env python3
"""ResNet-50 FP16 served by ``trtkit serve`` on the GPU host, against ``trtkit bench --streams 2`` (issue 17).

In one call:

1. ResNet-50 (torchvision, random weights, seed 0) exported by the torch venv; built FP16 with trtkit (TensorRT's own
   tactic sources: the GPU bundle stubs cuBLAS/cuDNN), profile batch 1/32/32; cached by ONNX sha256 in ``--cache``.
2. ``bench_streams2_ips``: ``trtkit bench --streams 2`` on that engine at batch 32 (CUDA graphs, copies included);
   with ``--bench-batches 4,8``, ``bench_at_served_batches``: the same at those batches with ``--instances`` streams
   (the GPU alone at the batch sizes the server forms).
3. ``trtkit serve --backend`` (``--backend``, default ``stub``: the runners inside Triton's Python backend stubs) on
   that engine (``--instances``, ``--max-batch 32``, ``--max-queue-delay-us``, ``--preferred-batch``) in a child
   process; ``ready_s``: from
   the engines described to Triton ready with the model (the server's own figure; the stub backend's runners load
   inside it), ``start_s`` from the command's start.
4. ``grpc``: load over gRPC at concurrency 1, 8 and 64, one request of batch 1 at a time per worker, from
   ``--client-procs`` client processes (one Python client cannot make the requests/s of a batch-32 engine), started
   together: each connects and sets up its inputs, and when all are ready their warm-ups and levels begin at once
   (``clients_ready_s``: how long the slowest took), so the levels overlap; their latencies are merged before the
   percentiles are taken. ``--client-nice`` lowers the clients' priority where they share the host's cores with
   the server. With ``--shared-memory system`` (the default) the server
   is started with ``--shared-memory`` and each client writes its input once into system shared memory, so requests
   carry only the region's name (perf_analyzer's ``--shared-memory system``); ``none`` sends the input in every
   request; ``cuda`` writes it once into device memory on GPU 0 instead (CUDA IPC). Each level runs
   ``--duration-s``, shortened where the soak's share would not fit before the deadline (``level_s`` says how long
   they ran).
4b. ``perf_analyzer`` (``--perf-analyzer on``, the default, where a binary is found: ``$PERF_ANALYZER`` or
   ``PATH``): NVIDIA's C++ load generator against the same server after the main run's levels, at
   ``--perf-analyzer-levels`` (1, 8 and 64), the same model, gRPC port, input and shared memory, batch 1 a request,
   windows of ``--perf-analyzer-ms`` (benchmarks/perf_analyzer_anchor.py); ``ratio_c64_to_bench`` against
   ``bench_streams2_ips``. Where no binary is found, ``available`` is false and ``reason`` says why (not an error).
5. ``soak``: ``--soak-requests`` (100 000) requests at concurrency 64, given ``--soak-s`` of its own (reserved before
   the levels run); ``leak_bytes_device``: the GPU's free memory (cudaMemGetInfo, device-wide, so the server's
   allocations count) after a warm-up load minus after the soak.
6. SIGTERM to the server: ``stop``: exit code and seconds to exit.
6b. ``compare``: with ``--compare pytriton`` (the default when the main run is the stub backend), steps 3-4 again
   with that backend, given what is left before the deadline, and ``grpc64_main_over_this``; ``--compare tensorrt``:
   Triton's own TensorRT backend (``trtkit serve --backend tensorrt``, the backend from ``--triton-backends``), with
   its ``grpc64_vs_bench_streams2``.
7. ``sweep`` (with ``--sweep``): a server of its own per setting of the model (``runner``, or ``null``: the stubs
   answer zeros with no runner, a diagnostic ceiling of Triton, the Python backend and the clients alone), instances
   and batcher delay (``preferred``: ``--preferred-batch``'s sizes), loaded at ``--sweep-levels`` (default 64) for
   ``--sweep-s`` per number of client processes; ``skipped`` names what would not have ended before
   ``--deadline-s``. With ``--sweep-perf-analyzer`` each sweep server is also loaded by perf_analyzer at
   ``--sweep-levels`` (a run of its own, ``client: perf_analyzer``). ``cpus=split`` keeps the server on half of the
   host's CPUs and the clients and perf_analyzer on the other half (``split:N``: the server on N CPUs); ``--cpus``
   sets that layout for the main run (its clients, ``trtkit bench --procs``, perf_analyzer and the soak) and is the
   sweep's default.
8. ``two_gpus``: steps 3-4 at concurrency 64 with ``--gpus 0,1`` where the host has two GPUs (else why not).

Where the time goes, at every gRPC level (steps 4 and 7): ``server``, Triton's statistics of the model
(``/v2/models/<m>/stats``) read before and after the level: each stage's mean per request (queue, compute_input,
compute_infer, compute_output), the batch sizes executed and ``busy_frac``, the instances' compute time over the
clients' warm-up and level (near 1: the server is the limit); ``client_cpu_frac``: each client process's CPU over its
level (near 1: that process, one core and one GIL, is the limit) and ``client_cpu_us_per_request``;
``server_threads``: the server's CPU (``trtkit serve`` and every process under it) in cores, by process and its
busiest threads (one near 1.0 is a limit of its own: Triton 2.51 serves every unary gRPC call on two front-end
threads, every stream on a third); ``host_cpu_busy_frac``: every core of the host over the whole step (the client
processes' start included). ``--stream-procs`` N: the first N client processes send over a gRPC stream each
(``stream_procs`` in the sweep too). ``--client-kind wire`` (``client`` in the sweep): the other client processes
send with trtkit's own HTTP/2 writer (``trtkit bench --client wire``) instead of tritonclient; ``wire:N``: N
connections a process.

Writes ``benchmarks/results/serve-h200.json`` and, with ``--out`` (made if missing), a copy, Triton's log and the
server's output there. Each step's failure is recorded in ``errors`` instead of stopping the run; the JSON is written
after every step (a run killed by a timeout keeps what it had) and at the end whatever failed, each place on its own,
before any log is copied; a copy that fails is recorded too.

    python3 benchmarks/serve_h200.py --out "$OUT" --cache /root/trtkit-cache

``--onnx`` serves a given model instead of exporting ResNet-50 (the CPU dry run's stand-in), and ``--serve-with``
runs ``trtkit serve`` through another script taking the same arguments (the CPU dry run's fake-backend child,
tests/serve/serve_child.py).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
import perf_analyzer_anchor  # noqa: E402 - NVIDIA's C++ load generator, the clients' anchor
from precision_h200 import export_resnet  # noqa: E402 - the same ResNet-50 ONNX, in the same --cache

TACTICS = ("EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS")
INPUT = "images"
MAX_BATCH = 32
STARTED = time.monotonic()
RESULT_PATHS: list = []  # where main writes the results JSON; rewritten after every step (a killed run keeps its past)


def log(msg: str) -> None:
    print(f"[{time.monotonic() - STARTED:7.1f} s] {msg}", flush=True)


def step(results: dict, key: str, fn):
    log(key)
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - every step's failure is recorded, the others still run
        results["errors"][key] = f"{type(exc).__name__}: {exc}"
        log(f"{key} failed: {traceback.format_exc()}")
        return None
    finally:
        write_results(results, RESULT_PATHS)


# --- engine ---------------------------------------------------------------------------------------------------------


def input_shape(batch: int, uint8: bool = False) -> tuple:
    """The engine's input shape: ResNet-50's (N, 3, 224, 224) float, or with ``uint8`` the (N, 224, 224, 3) uint8
    pixels of an engine built with ``input_uint8_nhwc`` (a quarter of the bytes a request carries)."""
    return (batch, 224, 224, 3) if uint8 else (batch, 3, 224, 224)


def build_engine(onnx_path: Path, cache: Path, results: dict, uint8: bool = False, opt: int = MAX_BATCH) -> Path:
    """ResNet-50 FP16 with one profile, batch 1 / ``opt`` / ``MAX_BATCH``: TensorRT picks its kernels for ``opt``,
    so an ``opt`` near the batches the server forms trades some of the full batch's speed for theirs."""
    import tensorrt as trt

    from trtkit.builder.api import build
    from trtkit.builder.config import BuildConfig
    from trtkit.builder.profiles import InputShape, Profile

    sha = hashlib.sha256(onnx_path.read_bytes()).hexdigest()[:16]
    kind = ("-u8nhwc" if uint8 else "") + (f"-opt{opt}" if opt != MAX_BATCH else "")
    path = cache / f"resnet50-fp16{kind}-b{MAX_BATCH}-{sha}-trt{trt.__version__}.engine"
    results["engine"] = {"path": str(path), "onnx_sha256_16": sha, "precision": "fp16",
                         "profile": {"min": 1, "opt": opt, "max": MAX_BATCH}, "tactic_sources": list(TACTICS),
                         "input": {"shape": list(input_shape(MAX_BATCH, uint8)), "dtype": "uint8" if uint8 else
                                   "float32"}, "cached": path.exists()}
    if not path.exists():
        def shape(b):
            return input_shape(b, uint8)

        config = BuildConfig(precision="fp16", tactic_sources=TACTICS, timing_cache=str(cache / "resnet50-fp16.cache"),
                             profiles=[Profile({INPUT: InputShape(shape(1), shape(opt), shape(MAX_BATCH))})],
                             input_uint8_nhwc=uint8)
        t0 = time.perf_counter()
        build(str(onnx_path), config, output=path, isolate=False)
        results["engine"]["build_s"] = round(time.perf_counter() - t0, 1)
    return path


def bench_streams2(engine: Path, duration_s: float, uint8: bool = False, batch: int = MAX_BATCH,
                   streams: int = 2) -> float:
    from trtkit.bench import BenchSettings, benchmark

    result = benchmark(engine, BenchSettings(shapes={INPUT: input_shape(batch, uint8)}, streams=streams,
                                             cuda_graph=True, duration_s=duration_s, e2e=False))
    return round(result.items_per_s, 1)


def bench_served_batches(engine: Path, args) -> dict:
    """``trtkit bench`` at the batch sizes the server forms (``--bench-batches``), with as many streams as the main
    run's instances: what the GPU carries at those batches alone, the ceiling of serving batches that small."""
    out: dict = {"streams": int(args.instances)}
    for b in (int(v) for v in args.bench_batches.split(",") if v.strip()):
        out[str(b)] = bench_streams2(engine, args.bench_s, args.input_uint8, batch=b, streams=int(args.instances))
    return out


# --- server ---------------------------------------------------------------------------------------------------------


def tensorrt_options_flag(trt: str | None) -> list:
    """``trtkit serve``'s ``--tensorrt-options`` for a sweep's ``trt`` value (option sets joined by ``+`` in the
    sweep, by commas on the command line); none for ``none`` or nothing."""
    from trtkit.export.triton import tensorrt_options

    names = tensorrt_options(trt or ())  # the sweep's names were checked by parse_sweep
    return ["--tensorrt-options", ",".join(names)] if names else []


class ServeProcess:
    """``trtkit serve`` in a child process; ``instances``/``delay_us`` override the command line's, ``null_model``
    starts the stubs as the null model (:mod:`trtkit.serve.stub_model`: zeros, no runner; a diagnostic)."""

    def __init__(self, engine: Path, args, workdir: Path, gpus: str, tag: str, backend: str,
                 instances: int | None = None, delay_us: int | None = None, null_model: bool = False,
                 graphs: str | None = None, trt: str | None = None, grpc_pool: int | None = None,
                 preferred: str | None = None, cpus: tuple | None = None):
        from trtkit.serve.stub_model import NULL_MODEL_ENV

        self.instances = int(instances or args.instances)
        self.http_url = f"http://127.0.0.1:{args.port}"
        self.status = workdir / f"status-{tag}.json"
        self.output = workdir / f"serve-{tag}.out"
        self.log_file = workdir / f"triton-{tag}.log"
        launcher = [args.serve_with] if args.serve_with else ["-m", "trtkit.cli.main"]
        shared = ["--shared-memory"] if args.shared_memory != "none" else []
        trt = args.tensorrt_options if trt is None else trt
        native = (["--triton-backends", args.triton_backends, "--graph-batches", graphs or args.graph_batches,
                   *tensorrt_options_flag(trt)]
                  if backend == "tensorrt" else [])
        pool = args.grpc_allocation_pool if grpc_pool is None else grpc_pool
        grpc = ["--grpc-allocation-pool", str(pool)] if pool else []  # 0: Triton's own
        batches = preferred_flag(args.preferred_batch if preferred is None else preferred)
        cmd = [sys.executable, *launcher, "serve", str(engine), *shared, "--backend", backend, *native, *grpc, *batches,
               "--instances", str(self.instances), "--max-batch", str(MAX_BATCH), "--max-queue-delay-us",
               str(args.max_queue_delay_us if delay_us is None else delay_us), "--gpus", gpus,
               "--http-port", str(args.port), "--grpc-port", str(args.port + 1), "--metrics-port",
               str(args.port + 2), "--json", str(self.status), "--log-file", str(self.log_file)]
        env = {k: v for k, v in os.environ.items() if k != NULL_MODEL_ENV}
        if null_model:
            env[NULL_MODEL_ENV] = "1"
        log(("NULL MODEL " if null_model else "") + " ".join(cmd))
        self.started = time.monotonic()
        with open(self.output, "wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env,
                                         preexec_fn=pin(cpus))  # Triton, its child, keeps the CPUs

    def wait_ready(self, timeout_s: float) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.status.exists():
                status = json.loads(self.status.read_text())
                status["start_s"] = round(time.monotonic() - self.started, 2)
                return status
            if self.proc.poll() is not None:
                raise RuntimeError(f"trtkit serve exited {self.proc.returncode}: {self.tail()}")
            time.sleep(0.2)
        raise TimeoutError(f"trtkit serve not ready after {timeout_s} s: {self.tail()}")

    def files(self) -> tuple:
        """What the server leaves to read: trtkit serve's output, Triton's log and what tritonserver printed itself
        (a crash's signal and stack)."""
        from trtkit.serve.logs import console_path

        return self.output, self.log_file, console_path(self.log_file)

    def tail(self) -> str:
        return self.output.read_text(errors="replace")[-1500:] if self.output.exists() else ""

    def stop(self, timeout_s: float = 90) -> dict:
        t0 = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(timeout=30)
        return {"exit_code": code, "exit_s": round(time.monotonic() - t0, 2)}


# --- load -----------------------------------------------------------------------------------------------------------


CLIENT_WARMUP_S = 0.5  # each client process's warm-up at its level's concurrency, before the level


# a gRPC call per request (tritonclient), every request of the process over one gRPC stream, or a gRPC call per
# request from trtkit's wire client ("wire:N": over N connections)
CLIENT_MODES = ("unary", "stream", "wire")


def client_problem(client: str) -> str | None:
    """Why ``client`` is not ``tritonclient``, ``wire`` or ``wire:N`` (N connections a process, 1 or more), or None."""
    kind, _, count = client.partition(":")
    if client == "tritonclient" or (kind == "wire" and (not count or (count.isdigit() and int(count) >= 1))):
        return None
    return "give tritonclient, wire or wire:N (trtkit's wire client over N connections a process)"


def client_main(argv: list) -> int:
    """One client process: ``--client URL MODEL CONCURRENCY DURATION_S MAX_REQUESTS RESULT_JSON SHARED_MEMORY GO NICE
    MODE`` (MODE one of :data:`CLIENT_MODES`). Once connected with its inputs set up, it writes ``RESULT_JSON.ready``
    and waits for the file ``GO`` (its parent makes it when every client is ready), so that the levels of all the
    processes run at the same time; ``NICE`` above 0 lowers its priority (the server's threads go first)."""
    from trtkit.bench.serving import LoadSettings, load_test

    url, model, concurrency, duration_s, max_requests, out, shared_memory, go, nice, mode = argv
    if int(nice) > 0:
        os.nice(int(nice))
    kind, _, connections = mode.partition(":")
    settings = LoadSettings(concurrency=(int(concurrency),), duration_s=float(duration_s),
                            max_requests=int(max_requests), warmup_s=CLIENT_WARMUP_S, grpc=True, keep_latencies=True,
                            shared_memory=shared_memory, streaming=mode == "stream",
                            client="wire" if kind == "wire" else "tritonclient", connections=int(connections or 1))

    def ready():
        Path(out + ".ready").touch()
        deadline = time.monotonic() + CLIENT_START_TIMEOUT_S
        while not Path(go).exists() and time.monotonic() < deadline:
            time.sleep(0.005)

    (result,) = load_test(url, model, settings, ready=ready)
    data = result.to_json()
    # this process's CPU over the level: near 1.0 (one core, one GIL) is a client at its limit
    data["cpu_frac"] = round(result.cpu_s / max(result.wall_s, 1e-9), 3)
    Path(out).write_text(json.dumps(data))
    return 0


# how long client processes may take to start (imports, connecting, their inputs) before the level starts anyway
CLIENT_START_TIMEOUT_S = 120.0


def start_together(clients: list, outs: list, go: Path, timeout_s: float = CLIENT_START_TIMEOUT_S) -> float:
    """Wait until every client process is ready (its ``.ready`` file), has already written its result or has ended,
    then make ``go``, which starts their load at once. Returns the seconds the slowest took to get ready."""
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    while time.monotonic() < deadline:
        if all(Path(str(o) + ".ready").exists() or o.exists() or c.poll() is not None for c, o in zip(clients, outs)):
            break
        time.sleep(0.005)
    go.touch()
    return round(time.monotonic() - t0, 2)


def load(url: str, concurrency: int, procs: int, duration_s: float, max_requests: int, workdir: Path,
         shared_memory: str = "none", stream_procs: int = 0, nice: int = 0, cpus: tuple | None = None,
         client: str = "tritonclient") -> dict:
    """``concurrency`` workers spread over up to ``procs`` client processes, started together (each connects and
    sets up its inputs first; then all begin their warm-up and level at once); their results merged. The first
    ``stream_procs`` of the processes send theirs over a gRPC stream each (Triton serves streams on a front-end
    thread apart from its two for unary calls), the others a gRPC call per request; ``nice`` lowers the client
    processes' priority; ``cpus`` keeps them on those CPUs (None: any); ``client``: what the others send their calls
    with (:func:`client_problem`'s names)."""
    import numpy as np

    from trtkit.bench.client_procs import spread

    n = max(1, min(procs, concurrency))
    shares, caps = spread(concurrency, n), spread(max_requests, n)
    stamp = time.monotonic_ns()
    outs = [workdir / f"client-{concurrency}-{i}-{stamp}.json" for i in range(n)]
    go = workdir / f"go-{concurrency}-{stamp}"
    unary = CLIENT_MODES[0] if client == "tritonclient" else client
    modes = [CLIENT_MODES[1] if i < stream_procs else unary for i in range(n)]
    clients = [subprocess.Popen([sys.executable, __file__, "--client", url, "resnet50", str(c), str(duration_s),
                                 str(cap), str(out), shared_memory, str(go), str(int(nice)), mode], cwd=ROOT,
                                preexec_fn=pin(cpus))
               for c, cap, out, mode in zip(shares, caps, outs, modes)]
    start_s = start_together(clients, outs, go)
    for c in clients:
        c.wait(timeout=duration_s + 300)
    parts = [json.loads(o.read_text()) for o in outs if o.exists()]
    if len(parts) != n:
        codes = [c.returncode for c, o in zip(clients, outs) if not o.exists()]
        raise RuntimeError(f"{n - len(parts)} of {n} client processes wrote no result (exit codes "
                           f"{', '.join(map(str, codes))}; their errors are in the run's stderr)")
    # a client with no answer has no latencies (its errors say why: every request failed, or none came back)
    lat = np.sort(np.concatenate([np.asarray(p.get("latencies_ms", []), float) for p in parts]))
    pct = (lambda q: round(float(np.percentile(lat, q)), 3)) if lat.size else (lambda q: None)
    requests = sum(p["requests"] for p in parts)
    return {"ips": round(sum(p["ips"] for p in parts), 1), "p50_ms": pct(50), "p90_ms": pct(90), "p99_ms": pct(99),
            "failed": sum(p["failed"] for p in parts), "requests": requests,
            "client_procs": n, "stream_procs": modes.count("stream"), "client": client,
            "wall_s": max(p["wall_s"] for p in parts),
            # the level's processes ran side by side: their walls differ by their ends only
            "wall_s_min": min(p["wall_s"] for p in parts), "clients_ready_s": start_s, "client_nice": int(nice),
            "client_cpus": list(cpus) if cpus else "all",
            "client_cpu_frac": [p["cpu_frac"] for p in parts],
            # the clients' CPU per answered request: what one client process can send at most is 1e6 / this
            "client_cpu_us_per_request": round(1e6 * sum(p["cpu_s"] for p in parts) / max(requests, 1), 1),
            "errors": sorted({e for p in parts for e in p["errors"]})[:5]}


# --- where the time goes -------------------------------------------------------------------------------------------


def model_stats(http_url: str, model: str = "resnet50", timeout_s: float = 5.0) -> dict:
    """Triton's statistics of ``model`` (``GET /v2/models/<model>/stats``): its first ``model_stats`` entry."""
    import urllib.request

    with urllib.request.urlopen(f"{http_url}/v2/models/{model}/stats", timeout=timeout_s) as answer:
        return json.loads(answer.read())["model_stats"][0]


def readable_stats(http_url: str):
    """:func:`model_stats`, or why it could not be read (a string): the load is measured either way."""
    try:
        return model_stats(http_url)
    except Exception as exc:  # noqa: BLE001 - urllib's errors, a JSON without model_stats
        return f"not read: {type(exc).__name__}: {exc}"


def _count_ns(entry: dict | None) -> tuple:
    entry = entry or {}
    return int(entry.get("count", 0)), int(entry.get("ns", 0))


STAGES = ("queue", "compute_input", "compute_infer", "compute_output")


def stats_delta(before: dict, after: dict, wall_s: float, instances: int) -> dict:
    """What the server did between two :func:`model_stats` readings.

    ``per_request_us``: each stage's mean per request (Triton adds a batch's compute times to each of its requests);
    ``batch_sizes``: executions per batch size; ``mean_batch``: inferences per execution; ``busy_frac``: the
    executions' compute time over ``wall_s`` x ``instances`` (near 1.0: every instance busy, the server is the limit;
    low: the instances wait for requests, the clients or the path to the server are).
    """
    inf_b, inf_a = before.get("inference_stats", {}), after.get("inference_stats", {})
    requests = _count_ns(inf_a.get("success"))[0] - _count_ns(inf_b.get("success"))[0]
    per_request = {}
    for stage in STAGES:
        (cb, nb), (ca, na) = _count_ns(inf_b.get(stage)), _count_ns(inf_a.get(stage))
        per_request[stage] = round((na - nb) / (ca - cb) / 1e3, 1) if ca > cb else None
    old = {int(b["batch_size"]): b for b in before.get("batch_stats", [])}
    sizes, busy_ns = {}, 0
    for b in after.get("batch_stats", []):
        size, prior = int(b["batch_size"]), old.get(int(b["batch_size"]), {})
        runs = _count_ns(b.get("compute_infer"))[0] - _count_ns(prior.get("compute_infer"))[0]
        if runs > 0:
            sizes[str(size)] = runs
        busy_ns += sum(_count_ns(b.get(k))[1] - _count_ns(prior.get(k))[1] for k in STAGES[1:])
    executions = int(after.get("execution_count", 0)) - int(before.get("execution_count", 0))
    inferences = int(after.get("inference_count", 0)) - int(before.get("inference_count", 0))
    return {"requests": requests, "executions": executions, "inferences": inferences,
            "mean_batch": round(inferences / executions, 2) if executions else None,
            "batch_sizes": dict(sorted(sizes.items(), key=lambda kv: int(kv[0]))),
            "per_request_us": per_request,
            "busy_frac": round(busy_ns / 1e9 / (wall_s * instances), 3) if wall_s > 0 and instances else None}


def host_cpu_ticks() -> tuple:
    """``(busy, total)`` jiffies of every core of this host (``/proc/stat``; ``(0, 0)`` where there is none)."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def descendants(pid: int) -> list:
    """``pid`` and every process under it (``/proc/<pid>/stat``'s parent field), parents first."""
    parents: dict = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        parents.setdefault(int(text[text.rindex(")") + 2:].split()[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop(0))
        todo += parents.get(found[-1], [])
    return found


def server_threads(pid: int) -> dict:
    """``{(pid, tid): (process name, thread name, CPU seconds)}`` of every thread of ``pid`` (``trtkit serve``) and
    the processes under it (tritonserver, its backends' stub processes)."""
    from trtkit.pipeline.threads import read_threads

    found: dict = {}
    for proc in descendants(pid):
        try:
            comm = Path(f"/proc/{proc}/comm").read_text().strip()
        except OSError:
            continue
        for tid, (name, cpu) in read_threads(Path(f"/proc/{proc}/task")).items():
            found[(proc, tid)] = (comm, name, cpu)
    return found


def threads_delta(before: dict, after: dict, wall_s: float, top: int = 8) -> dict | None:
    """The server's CPU between two :func:`server_threads` readings ``wall_s`` apart (``window_s``): ``cores`` in
    all, ``by_process`` and the ``busiest`` threads (a thread near 1.0 is a limit of its own, whatever the cores left
    idle: Triton 2.51 serves every unary gRPC call on two threads)."""
    if not after:
        return None
    used = {key: (comm, name, cpu - before.get(key, (comm, name, 0.0))[2]) for key, (comm, name, cpu) in after.items()}
    by_process: dict = {}
    for (comm, _, cpu) in used.values():
        by_process[comm] = by_process.get(comm, 0.0) + cpu
    busiest = sorted(used.items(), key=lambda kv: -kv[1][2])[:top]
    return {"window_s": round(wall_s, 2), "cores": round(sum(c for _, _, c in used.values()) / wall_s, 3),
            "by_process": {k: round(v / wall_s, 3) for k, v in sorted(by_process.items(), key=lambda kv: -kv[1])},
            "busiest": [{"process": comm, "thread": name, "tid": int(tid), "cores": round(cpu / wall_s, 3)}
                        for (_, tid), (comm, name, cpu) in busiest]}


def measured_level(server, url: str, concurrency: int, procs: int, duration_s: float, workdir: Path,
                   shared_memory: str, stream_procs: int = 0, nice: int = 0, cpus: tuple | None = None,
                   client: str = "tritonclient") -> dict:
    """One load level with the server's statistics before and after (``server``; where they cannot be read, why:
    pytriton keeps its statistics endpoint behind its token), the server's CPU by thread and the host's CPU use."""
    before, ticks0 = readable_stats(server.http_url), host_cpu_ticks()
    threads0, t0 = server_threads(server.proc.pid), time.monotonic()
    result = load(url, concurrency, procs, duration_s, 10**9, workdir, shared_memory, stream_procs, nice, cpus, client)
    threads1, t1 = server_threads(server.proc.pid), time.monotonic()
    after, ticks1 = readable_stats(server.http_url), host_cpu_ticks()
    # the stats count the clients' warm-up too, not their start (imports, connecting: the server idles then), so
    # busy_frac is over the warm-up and the level
    wall = result["wall_s"] + CLIENT_WARMUP_S
    unread = next((s for s in (before, after) if isinstance(s, str)), None)
    result["server"] = unread or stats_delta(before, after, wall, server.instances)
    total = ticks1[1] - ticks0[1]
    # over the clients' start too (the server idles then): a thread's figure is a floor of its share of the level
    result["server_threads"] = threads_delta(threads0, threads1, t1 - t0)
    result["host_cpu_busy_frac"] = round((ticks1[0] - ticks0[0]) / total, 3) if total > 0 else None
    result["host_cpus"] = os.cpu_count()
    return result


# --- perf_analyzer --------------------------------------------------------------------------------------------------


def perf_analyzer_setup(args) -> dict:
    """``results['perf_analyzer']`` before any server starts: the binary and its version, or why the anchor is not
    run (``--perf-analyzer off``, no binary found: a reason, not an error)."""
    if args.perf_analyzer == "off":
        return {"available": False, "reason": "--perf-analyzer off"}
    binary, why = perf_analyzer_anchor.find_binary()
    if not binary:
        return {"available": False, "reason": why}
    return {"available": True, "binary": binary, "version": perf_analyzer_anchor.binary_version(binary),
            "measurement_interval_ms": args.perf_analyzer_ms, "max_trials": perf_analyzer_anchor.MAX_TRIALS,
            "stability_pct": perf_analyzer_anchor.STABILITY_PCT}


def perf_analyzer_share_s(args, levels: int) -> float:
    """Seconds kept before the deadline for ``levels`` perf_analyzer levels: each one's shortest run."""
    return levels * perf_analyzer_anchor.shortest_level_s(args.perf_analyzer_ms)


def perf_analyzer_levels(args, url: str, levels, workdir: Path, results: dict, tag: str,
                         reserved_s: float = 0.0, cpus: tuple | None = None) -> dict:
    """perf_analyzer at each of ``levels`` on the server at ``url`` with ``--shared-memory``'s kind:
    ``{"<c>": figures, or {"failed": why}, or "not run: ..."}``. A failed level is also recorded in ``errors`` and the
    next one still runs; each level's timeout is at most what is left before the deadline less ``reserved_s``."""
    folder = Path(args.out) if args.out else workdir
    out: dict = {}
    for c in levels:
        left = args.deadline_s - (time.monotonic() - STARTED) - STOP_RESERVE_S - reserved_s
        if left < perf_analyzer_anchor.shortest_level_s(args.perf_analyzer_ms):
            out[str(c)] = f"not run: {left:.0f} s left before the deadline"
            continue
        level = out[str(c)] = perf_analyzer_anchor.measure_level(
            results["perf_analyzer"]["binary"], "resnet50", url, c, args.shared_memory, args.perf_analyzer_ms,
            folder, min(left, perf_analyzer_anchor.level_timeout_s(args.perf_analyzer_ms)), f"perf-analyzer-{tag}",
            preexec_fn=pin(cpus))
        if "failed" in level:
            results["errors"][f"{tag}.perf_analyzer.c{c}"] = level["failed"]
        log(f"{tag} perf_analyzer c{c}: {level.get('ips') or level.get('failed')}")
    return out


# --- sweep ----------------------------------------------------------------------------------------------------------

# what --sweep may vary: the server's instances and batcher delay, the clients' processes and how they send inputs
# (shm: --shared-memory's kinds), and the model (the engine's runner, or the null model: zeros with no runner, the
# ceiling of Triton and the clients alone)
SWEEP_KEYS = {"instances": int, "delay_us": int, "client_procs": int, "model": str, "backend": str, "graphs": str,
              "shm": str, "trt": str, "grpc_pool": int, "stream_procs": int, "preferred": str, "nice": int,
              "cpus": str, "client": str}
# a new server per setting of these; the client settings (client_procs, shm) reuse it. trt: the tensorrt backend's
# latency options (trtkit serve --tensorrt-options), joined by '+', or none; grpc_pool: trtkit serve
# --grpc-allocation-pool (Triton's gRPC request states kept for reuse; 0: Triton's own, 8); preferred: trtkit serve
# --preferred-batch, its sizes and ranges joined by '+' (8-32, 16+32), or none (the profile's); nice: the client
# processes' nice value (a client setting); cpus: one of CPU_LAYOUTS; client: tritonclient, wire or wire:N (a client
# setting, client_problem)
SERVER_KEYS = ("model", "backend", "instances", "delay_us", "graphs", "trt", "grpc_pool", "preferred", "cpus")
# where the processes run: all: anywhere on the host's CPUs; split: the server (trtkit serve and Triton under it) on
# the first half of this process's CPUs, the client processes and perf_analyzer on the second half, so that neither
# takes the other's cores; split:N: the server on the first N CPUs, the clients on the rest
CPU_LAYOUTS = ("all", "split", "split:N")
SHARED_MEMORY = ("system", "cuda", "none")
SERVE_BACKENDS = ("stub", "pytriton", "tensorrt")
MODELS = ("runner", "null")
GRAPH_BATCHES = ("every", "triton")  # trtkit serve --graph-batches (the tensorrt backend's CUDA graphs)


def parse_sweep(text: str) -> list:
    """``"instances=4,8;client_procs=4,8"`` -> every combination, as dicts, the first key outermost; ``A | B``: the
    settings of ``A``, then those of ``B`` (each a product of its own).

    Raises:
        ValueError: an unknown key, a key given twice in one product, no values, or a value the key does not take.
    """
    products = [p for p in text.split("|") if p.strip()]
    if not products:
        raise ValueError("the sweep is empty: give e.g. instances=4,8;client_procs=4,8")
    return [one for product in products for one in _product(product)]


def _product(text: str) -> list:
    import itertools

    axes: dict = {}
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        key, eq, values = part.partition("=")
        key = key.strip()
        if not eq or key not in SWEEP_KEYS:
            raise ValueError(f"sweep setting {part!r}: give KEY=V1,V2 with KEY one of {', '.join(SWEEP_KEYS)}")
        if key in axes:
            raise ValueError(f"sweep key {key!r} given twice in {text.strip()!r}")
        items = [v.strip() for v in values.split(",") if v.strip()]
        if not items:
            raise ValueError(f"sweep key {key!r} has no values")
        try:
            axes[key] = [SWEEP_KEYS[key](v) for v in items]
        except ValueError:
            raise ValueError(f"sweep key {key!r}: {values.strip()!r} are not whole numbers") from None
        if key == "trt":
            _check_trt_options(axes[key])
            continue
        if key == "preferred":
            _check_preferred(axes[key])
            continue
        if key in ("cpus", "client"):
            problem = cpu_layout_problem if key == "cpus" else client_problem
            bad = [f"{v!r} ({why})" for v in axes[key] if (why := problem(v))]
            if bad:
                raise ValueError(f"sweep key {key!r}: {', '.join(bad)}")
            continue
        choices = {"model": MODELS, "backend": SERVE_BACKENDS, "graphs": GRAPH_BATCHES, "shm": SHARED_MEMORY}.get(key)
        low = 0 if key in ("delay_us", "grpc_pool", "stream_procs", "nice") else 1
        bad = [v for v in axes[key] if (v not in choices if choices else v < low)]
        if bad:
            accepted = " or ".join(choices) if choices else f"{low} or more"
            raise ValueError(f"sweep key {key!r}: {', '.join(map(str, bad))} not accepted ({accepted})")
    if not axes:
        raise ValueError(f"sweep part {text.strip()!r} is empty: give e.g. instances=4,8;client_procs=4,8")
    return [dict(zip(axes, combo)) for combo in itertools.product(*axes.values())]


def _check_trt_options(values: list) -> None:
    from trtkit.errors import TrtkitError
    from trtkit.export.triton import tensorrt_options

    for value in values:
        try:
            tensorrt_options(value)
        except TrtkitError as exc:
            raise ValueError(f"sweep key 'trt': {value!r}: {exc}") from None


def preferred_flag(value: str | None) -> list:
    """``trtkit serve``'s ``--preferred-batch`` for a sweep's ``preferred`` value (``+`` between sizes and ranges
    there, commas on the command line); none for ``none`` or nothing (the profile's sizes)."""
    if not value or value == "none":
        return []
    return ["--preferred-batch", value.replace("+", ",")]


def preferred_problem(text: str) -> str | None:
    """What is wrong with preferred batch sizes ``text`` (commas or '+' between sizes and ranges), or None."""
    import argparse

    from trtkit.cli.options import batch_sizes

    try:
        sizes = batch_sizes(text.replace("+", ","))
    except argparse.ArgumentTypeError as exc:
        return str(exc)
    return f"sizes above the engine's max batch {MAX_BATCH}" if max(sizes) > MAX_BATCH else None


def _check_preferred(values: list) -> None:
    for value in values:
        why = None if value == "none" else preferred_problem(value)
        if why:
            raise ValueError(f"sweep key 'preferred': {value!r}: {why} (sizes joined by '+', e.g. 8-32 or 16+32, or "
                             "none)")


def sweep_groups(settings: list, args) -> list:
    """The sweep's settings filled in from the main run's (``args``) and grouped by server, in first-seen order:
    ``[(server settings, [{"client_procs": N, "shm": KIND, "stream_procs": M, "nice": K, "client": C}, ...])]``."""
    groups: dict = {}
    for one in settings:
        full = {"model": "runner", "backend": args.backend, "instances": args.instances,
                "delay_us": args.max_queue_delay_us, "client_procs": args.client_procs,
                "graphs": args.graph_batches, "shm": args.shared_memory, "trt": args.tensorrt_options or "none",
                "grpc_pool": args.grpc_allocation_pool, "stream_procs": args.stream_procs,
                "preferred": args.preferred_batch or "none", "nice": args.client_nice, "cpus": args.cpus,
                "client": args.client_kind, **one}
        key = tuple(full[k] for k in SERVER_KEYS)
        clients = groups.setdefault(key, [])
        client = {"client_procs": full["client_procs"], "shm": full["shm"], "stream_procs": full["stream_procs"],
                  "nice": full["nice"], "client": full["client"]}
        if client not in clients:
            clients.append(client)
    return [(dict(zip(SERVER_KEYS, key)), clients) for key, clients in groups.items()]


def run_sweep(engine: Path, args, workdir: Path, results: dict, start_s: float, stop_s: float) -> dict:
    """Each sweep setting's gRPC levels (``--sweep-levels``, ``--sweep-s`` each) on a server of its own, as long as
    the deadline allows; ``start_s``/``stop_s`` (the main run's, at ``--instances``) estimate a server's start and
    stop (Triton's Python backend unloads the instances one after the other: a runner server's stop is taken as
    growing with its instances), and a setting that would not end before the deadline is skipped and named."""
    levels = [int(c) for c in args.sweep_levels.split(",")]
    out: dict = {"spec": args.sweep, "levels": levels, "level_s": args.sweep_s, "runs": [], "skipped": [],
                 "warmup_s": SWEEP_WARMUP_S}
    url = f"127.0.0.1:{args.port + 1}"
    one_load = args.sweep_s + LOAD_OVERHEAD_S
    start_s = start_s + SWEEP_WARMUP_S + LOAD_OVERHEAD_S  # each sweep server's warm-up load counts as its start
    for i, (server_settings, clients) in enumerate(sweep_groups(parse_sweep(args.sweep), args)):
        left = args.deadline_s - (time.monotonic() - STARTED) - STOP_RESERVE_S
        stop_est = stop_s * max(1.0, server_settings["instances"] / max(int(args.instances), 1))
        if left < start_s + stop_est + one_load:
            out["skipped"] += [{**server_settings, **client, "why": f"{left:.0f} s left before the deadline"}
                               for client in clients]
            continue
        tag = f"sweep{i}"
        server_cpus, client_cpus = cpu_halves(server_settings["cpus"])
        server = ServeProcess(served_as(engine, workdir), args, workdir, "0", tag, server_settings["backend"],
                              instances=server_settings["instances"], delay_us=server_settings["delay_us"],
                              null_model=server_settings["model"] == "null", graphs=server_settings["graphs"],
                              trt=server_settings["trt"], grpc_pool=server_settings["grpc_pool"],
                              preferred=server_settings["preferred"], cpus=server_cpus)
        runs: list = []
        try:
            status = step(results, f"{tag}.ready", lambda server=server: server.wait_ready(args.ready_timeout_s))
            if status:  # the main run's c64 follows its c1 and c8 levels: a sweep server is loaded once before it too
                step(results, f"{tag}.warmup",
                     lambda first=clients[0], cpus=client_cpus: warm_up(url, max(levels), first, workdir, cpus))
            for client in clients:
                n, shm, streams, nice = client["client_procs"], client["shm"], client["stream_procs"], client["nice"]
                kind = client["client"]
                run = {**server_settings, **client, "grpc": {}}
                if status:
                    run["ready_s"] = round(status["ready_s"], 3)
                for c in levels:
                    left = args.deadline_s - (time.monotonic() - STARTED) - STOP_RESERVE_S - stop_est
                    if not status or left < one_load:
                        run["grpc"][str(c)] = ("not run: the server did not start" if not status
                                               else f"not run: {left:.0f} s left before the deadline")
                        continue
                    level = run["grpc"][str(c)] = step(
                        results, f"{tag}.procs{n}.streams{streams}.nice{nice}.{kind}.{shm}.c{c}",
                        lambda c=c, n=n, shm=shm, streams=streams, nice=nice, server=server, cpus=client_cpus,
                        kind=kind: measured_level(server, url, c, n, args.sweep_s, workdir, shm, streams, nice, cpus,
                                                  kind))
                    log(f"{tag} {server_settings} procs {n} (streams {streams}, nice {nice}, {kind}) {shm} c{c}: "
                        f"{(level or {}).get('ips')} images/s")
                runs.append(run)
                out["runs"].append(run)
            if args.sweep_perf_analyzer and results["perf_analyzer"].get("available"):
                run = {**server_settings, "client": "perf_analyzer", "shm": args.shared_memory}
                run["grpc"] = (perf_analyzer_levels(args, url, levels, workdir, results, tag, stop_est, client_cpus)
                               if status
                               else {str(c): "not run: the server did not start" for c in levels})
                runs.append(run)
                out["runs"].append(run)
        finally:
            stopped = step(results, f"{tag}.stop", server.stop)
            for run in runs:
                run["stop"] = stopped
            for path in server.files():
                if args.out and path.exists():
                    step(results, f"{tag}.copy.{path.name}", lambda path=path: copy_to(path, Path(args.out)))
        results["sweep"] = out
    return out


# seconds of unmeasured load on each sweep server before its levels (the main run's c64 comes after its c1 and c8)
SWEEP_WARMUP_S = 1.0


def warm_up(url: str, concurrency: int, client: dict, workdir: Path, cpus: tuple | None = None) -> None:
    """An unmeasured load on a fresh server with ``client``'s settings (processes, shared memory, streams, nice),
    its processes on ``cpus``."""
    load(url, concurrency, client["client_procs"], SWEEP_WARMUP_S, 10**9, workdir, client["shm"],
         client["stream_procs"], client["nice"], cpus, client["client"])


def cpu_layout_problem(layout: str) -> str | None:
    """Why ``layout`` is not one of :data:`CPU_LAYOUTS` (``all``, ``split``, ``split:N`` with N a whole number of 1 or
    more), or None."""
    if layout in ("all", "split"):
        return None
    kind, _, count = layout.partition(":")
    if kind == "split" and count.isdigit() and int(count) >= 1:
        return None
    return "give all, split (the server on half of the CPUs) or split:N (the server on N CPUs, the clients on the rest)"


def cpu_halves(layout: str) -> tuple:
    """``(server CPUs, client CPUs)`` for a :data:`CPU_LAYOUTS` name: ``(None, None)`` for ``all``; for ``split``
    the first and second half of the CPUs this process may use; for ``split:N`` the first N of them and the rest.

    Raises:
        RuntimeError: fewer CPUs than the layout needs (the server and the clients one or more each).
    """
    if layout == "all":
        return None, None
    cpus = sorted(os.sched_getaffinity(0))
    count = int(layout.partition(":")[2] or len(cpus) // 2)
    if not 1 <= count < len(cpus):
        raise RuntimeError(f"cpus={layout} needs {max(count, 1) + 1} or more CPUs (the server on {max(count, 1)}, the "
                           f"clients on one or more); this process may use {len(cpus)}")
    return tuple(cpus[:count]), tuple(cpus[count:])


def pin(cpus: tuple | None):
    """A ``preexec_fn`` that keeps a child process (and the processes it starts) on ``cpus``; None for any CPU."""
    if not cpus:
        return None
    return lambda: os.sched_setaffinity(0, cpus)


def device_free_bytes() -> int:
    from trtkit.runtime.cuda import Cuda

    return Cuda().mem_get_info()[0]


def gpu_count() -> int:
    from trtkit._lazy import cudart

    err, count = cudart().cudaGetDeviceCount()
    return int(count) if int(err) == 0 else 0


# --- main -----------------------------------------------------------------------------------------------------------


def served_as(engine: Path, workdir: Path, name: str = "resnet50") -> Path:
    """The engine (and its manifest) linked as ``<name>.engine``: Triton names the model after the file's stem."""
    from trtkit.manifest import manifest_path

    link = workdir / f"{name}.engine"
    for src, dst in ((engine, link), (manifest_path(engine), manifest_path(link))):
        if src.exists() and not dst.exists():
            dst.symlink_to(src)
    return link


def serve_and_load(engine: Path, args, workdir: Path, results: dict, gpus: str, tag: str, levels, soak: bool,
                   backend: str | None = None, anchor: bool = False) -> dict:
    """``trtkit serve`` loaded at ``levels`` by the clients, then (``anchor``, where perf_analyzer is available) by
    perf_analyzer into ``results['perf_analyzer']``, then the soak (``soak``)."""
    backend = backend or args.backend
    main_run = anchor  # trtkit bench --procs (--cli-procs) runs there, whether perf_analyzer is found or not
    anchor = anchor and bool(results["perf_analyzer"].get("available"))
    pa_levels = [int(c) for c in args.perf_analyzer_levels.split(",")] if anchor else []
    out: dict = {"gpus": gpus, "backend": backend, "cpus": args.cpus}
    server_cpus, client_cpus = cpu_halves(args.cpus)
    server = ServeProcess(served_as(engine, workdir), args, workdir, gpus, tag, backend, cpus=server_cpus)
    try:
        status = server.wait_ready(args.ready_timeout_s)
        out.update(ready_s=round(status["ready_s"], 3), load_s=round(status["load_s"], 3),
                   start_s=status["start_s"], instances=status["models"][0]["instances"])
        url = f"127.0.0.1:{args.port + 1}"
        out["grpc"] = {"concurrency": {}, "shared_memory": args.shared_memory, "client": args.client_kind}
        out["level_s"] = level_s = level_seconds(args, len(levels), soak, args.compare_levels_s
                                                 + perf_analyzer_share_s(args, len(pa_levels)))
        for c in levels:
            levels_out = out["grpc"]["concurrency"]
            levels_out[str(c)] = step(results, f"{tag}.grpc.c{c}", lambda c=c: measured_level(
                server, url, c, args.client_procs, level_s, workdir, args.shared_memory, args.stream_procs,
                args.client_nice, client_cpus, args.client_kind))
            log(f"{tag} c{c}: {(levels_out[str(c)] or {}).get('ips')} images/s")
        if main_run and args.cli_procs:
            results["cli_bench"] = step(results, f"{tag}.cli_bench",
                                        lambda: cli_bench(url, args, level_s, workdir, max(levels), client_cpus))
        if pa_levels:
            # the soak and the comparison keep their share: a slow perf_analyzer level is cut short, not them
            kept = args.compare_levels_s + (soak_share_s(args) if soak else 0.0)
            results["perf_analyzer"].update(shared_memory=args.shared_memory, concurrency=step(
                results, f"{tag}.perf_analyzer", lambda: perf_analyzer_levels(args, url, pa_levels, workdir, results,
                                                                              tag, kept, client_cpus)))
        if soak:
            out["soak"] = step(results, f"{tag}.soak", lambda: soak_run(url, args, workdir, client_cpus))
    finally:
        out["stop"] = step(results, f"{tag}.stop", server.stop)
        for path in server.files():
            if args.out and path.exists():
                step(results, f"{tag}.copy.{path.name}", lambda path=path: copy_to(path, Path(args.out)))
    return out


def cli_bench(url: str, args, level_s: float, workdir: Path, concurrency: int, cpus: tuple | None = None) -> dict:
    """``trtkit bench --server --procs`` (what a user runs) on the main run's server at ``concurrency``, on ``cpus``
    (None: any; its client processes keep them): its JSON, and its command (with ``taskset -c`` where pinned)."""
    out = workdir / "cli-bench.json"
    cmd = [sys.executable, "-m", "trtkit.cli.main", "bench", "--server", url, "--grpc", "--model", "resnet50",
           "--concurrency", str(concurrency), "--procs", str(args.cli_procs), "--shared-memory", args.shared_memory,
           "--duration-s", str(level_s), "--json", str(out)]
    kind, _, connections = args.client_kind.partition(":")
    if kind == "wire":
        cmd += ["--client", "wire", "--connections", connections or "1"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, encoding="utf-8", errors="replace",
                          timeout=level_s + 300, preexec_fn=pin(cpus))  # the table's lines are UTF-8 under any locale
    if not out.exists():
        raise RuntimeError(f"trtkit bench exited {proc.returncode} with no JSON: {(proc.stdout + proc.stderr)[-1500:]}")
    data = json.loads(out.read_text())
    data["command"] = (f"taskset -c {','.join(map(str, cpus))} " if cpus else "") + " ".join(cmd[1:])
    data["exit_code"] = proc.returncode
    return data


def copy_to(path: Path, folder: Path) -> None:
    from trtkit._atomic import write_bytes_atomic

    write_bytes_atomic(folder / path.name, path.read_bytes())


# seconds a load step takes besides its load: client processes starting (imports, connecting) and their warm-up
LOAD_OVERHEAD_S = 2.5
# seconds kept after the soak: stopping the server, copying its logs, writing the results
STOP_RESERVE_S = 20.0


def level_seconds(args, levels: int, soak: bool, reserved_s: float = 0.0) -> float:
    """Seconds of load per concurrency level: ``--duration-s``, shortened (to no less than 2 s) so that the levels, then
    the soak's ``--soak-s`` (when ``soak``) and ``reserved_s`` (the comparison run after it) end before
    ``--deadline-s``."""
    left = args.deadline_s - (time.monotonic() - STARTED) - STOP_RESERVE_S - reserved_s
    if soak:
        left -= soak_share_s(args)
    return round(min(args.duration_s, max(2.0, left / max(levels, 1) - LOAD_OVERHEAD_S)), 1)


def soak_share_s(args) -> float:
    """Seconds kept for the soak: its ``--soak-s``, its warm-up and its clients' start."""
    return args.soak_s + 2 * LOAD_OVERHEAD_S + 1.0


def soak_run(url: str, args, workdir: Path, cpus: tuple | None = None) -> dict:
    # warm-up: every batch size's graph captured before the memory is read
    load(url, 64, args.client_procs, 1.0, 5000, workdir, args.shared_memory, args.stream_procs, args.client_nice,
         cpus, args.client_kind)
    before = device_free_bytes()
    left = args.deadline_s - (time.monotonic() - STARTED) - STOP_RESERVE_S - LOAD_OVERHEAD_S
    result = load(url, 64, args.client_procs, max(5.0, min(args.soak_s, left)), args.soak_requests, workdir,
                  args.shared_memory, args.stream_procs, args.client_nice, cpus, args.client_kind)
    after = device_free_bytes()
    return {"requests": result["requests"], "failed": result["failed"], "leak_bytes_device": before - after,
            "asked": args.soak_requests, "wall_s": result["wall_s"], "ips": result["ips"],
            "p99_ms": result["p99_ms"], "errors": result["errors"]}


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        return client_main(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="also copy the results JSON and logs here (e.g. $OUT)")
    ap.add_argument("--cache", default=os.path.expanduser("~/.cache/trtkit-bench"))
    ap.add_argument("--results", default=str(ROOT / "benchmarks" / "results" / "serve-h200.json"))
    ap.add_argument("--instances", type=int, default=4, help="model instances (default 4: each is its own Python "
                    "backend stub and handler thread, the serial part of a batch's way through pytriton)")
    ap.add_argument("--max-queue-delay-us", type=int, default=100)
    ap.add_argument("--client-procs", type=int, default=4)
    ap.add_argument("--client-kind", default="tritonclient",
                    help="what the client processes (not --stream-procs') and trtkit bench --procs send their gRPC "
                         "calls with: tritonclient (default), wire (trtkit's own HTTP/2 writer, --client wire) or "
                         "wire:N (over N connections a process)")
    ap.add_argument("--stream-procs", type=int, default=0,
                    help="how many of the client processes send over a gRPC stream each (Triton's ModelStreamInfer, "
                         "served on a front-end thread apart from the two of unary calls) instead of a call per "
                         "request (default 0)")
    ap.add_argument("--duration-s", type=float, default=8.0, help="seconds of load per concurrency level")
    ap.add_argument("--bench-s", type=float, default=5.0, help="seconds of trtkit bench --streams 2")
    ap.add_argument("--bench-batches", default="",
                    help="also trtkit bench the engine at these batch sizes (e.g. 4,8,16) with --instances streams: "
                         "what the GPU carries alone at the batches the server forms (results "
                         "'bench_at_served_batches')")
    ap.add_argument("--soak-requests", type=int, default=100_000)
    ap.add_argument("--soak-s", type=float, default=60.0, help="the soak's own seconds, reserved before the levels")
    ap.add_argument("--shared-memory", choices=("system", "cuda", "none"), default="system",
                    help="system: clients send inputs through system shared memory (default); cuda: through device "
                         "memory on GPU 0 (CUDA IPC, perf_analyzer's --shared-memory cuda); none: in each request")
    ap.add_argument("--backend", choices=("stub", "pytriton", "tensorrt"), default="stub",
                    help="trtkit serve --backend for the main run (default stub: the runners inside Triton's Python "
                    "backend stubs)")
    ap.add_argument("--triton-backends", default=str(ROOT / ".gpu-triton" / "backends"),
                    help="with --backend/--compare tensorrt: the folder holding Triton's TensorRT backend "
                         "(tensorrt/libtriton_tensorrt.so; scripts/build_triton_trt_backend.sh)")
    ap.add_argument("--tensorrt-options", default="",
                    help="trtkit serve --tensorrt-options for the tensorrt backend (its latency options, e.g. "
                         "busy_wait_events,eager_batching; default none: Triton's defaults)")
    ap.add_argument("--grpc-allocation-pool", type=int, default=0,
                    help="trtkit serve --grpc-allocation-pool (Triton's gRPC request states kept for reuse; default 0: "
                         "Triton's own, 8)")
    ap.add_argument("--preferred-batch", default="",
                    help="trtkit serve --preferred-batch: batch sizes the batcher sends as soon as it has them, e.g. "
                         "8-32 (whatever is queued once 8 are; fewer wait up to the queue delay) or 16,32 (default: "
                         "the profile's opt and max)")
    ap.add_argument("--opt-batch", type=int, default=MAX_BATCH,
                    help=f"the engine profile's opt batch (default {MAX_BATCH}, its max): TensorRT tunes its kernels "
                    "for it; bench --streams 2 still runs at the max batch, on this same engine")
    ap.add_argument("--client-nice", type=int, default=0,
                    help="nice value of the client processes (default 0; above 0 the server's threads go first "
                         "where they share the host's cores)")
    ap.add_argument("--cpus", default="all",
                    help="where the main run's processes run: all (default: anywhere), split (the server on the first "
                         "half of the CPUs, the client processes, trtkit bench --procs and perf_analyzer on the other "
                         "half) or split:N (the server on the first N CPUs, the clients on the rest); also the "
                         "sweep's default")
    ap.add_argument("--cli-procs", type=int, default=0,
                    help="after the main run's levels: trtkit bench --server --procs N at its highest level on the "
                         "same server (results 'cli_bench'; default 0: not run)")
    ap.add_argument("--graph-batches", choices=GRAPH_BATCHES, default="every",
                    help="trtkit serve --graph-batches for the tensorrt backend (default every: a CUDA graph for every "
                         "batch size; triton: the backend's own choice of 1, the preferred sizes and the largest)")
    ap.add_argument("--compare", choices=("pytriton", "stub", "tensorrt", "none"), default="pytriton",
                    help="after the main run, serve with this backend too and load it at 1/8/64 (no soak): "
                    "results['compare'] (default pytriton, the older path)")
    ap.add_argument("--compare-levels-s", type=float, default=0.0, help=argparse.SUPPRESS)
    ap.add_argument("--sweep", help="after the main run: restart the server per setting and load it at "
                    "--sweep-levels only, e.g. 'model=null,runner;instances=4,8;client_procs=4,8;delay_us=100,1000' "
                    "(every combination; 'A | B': A's, then B's; model=null: zeros with no runner, a diagnostic of "
                    "what Triton and the clients carry alone); results['sweep'], settings that do not fit before "
                    "--deadline-s skipped")
    ap.add_argument("--sweep-levels", default="64", help="the sweep's gRPC concurrency levels (default 64)")
    ap.add_argument("--sweep-perf-analyzer", action="store_true",
                    help="also load each sweep server with perf_analyzer at --sweep-levels (with --shared-memory's "
                         "kind), after its clients")
    ap.add_argument("--sweep-s", type=float, default=3.0, help="seconds of load per sweep level")
    ap.add_argument("--port", type=int, default=18000, help="HTTP port; gRPC and metrics take the next two")
    ap.add_argument("--ready-timeout-s", type=float, default=180)
    ap.add_argument("--deadline-s", type=float, default=540, help="shorten the soak to end by then")
    ap.add_argument("--onnx", help="serve this ONNX model instead of exporting ResNet-50 (input 'images')")
    ap.add_argument("--input-uint8", action="store_true",
                    help="build the engine with input_uint8_nhwc: requests carry (224, 224, 3) uint8 pixels (150 KB) "
                         "instead of (3, 224, 224) float32 (602 KB); bench --streams 2 runs the same engine")
    ap.add_argument("--perf-analyzer", choices=("on", "off"), default="on",
                    help="on (default): after the main run's levels, load the same server with NVIDIA's perf_analyzer "
                         "($PERF_ANALYZER, else on PATH; skipped with a reason where there is none)")
    ap.add_argument("--perf-analyzer-levels", default="1,8,64", help="perf_analyzer's concurrency levels")
    ap.add_argument("--perf-analyzer-ms", type=int, default=3500,
                    help="perf_analyzer's measurement window (ms); a level takes 3 to "
                         f"{perf_analyzer_anchor.MAX_TRIALS} of them")
    ap.add_argument("--serve-with", help="run trtkit serve through this script (same arguments)")
    args = ap.parse_args()
    try:
        if any(int(c) < 1 for c in args.perf_analyzer_levels.split(",")) or args.perf_analyzer_ms < 100:
            raise ValueError
    except ValueError:
        ap.error(f"--perf-analyzer-levels {args.perf_analyzer_levels} / --perf-analyzer-ms {args.perf_analyzer_ms}: "
                 "give levels of 1 or more (e.g. 1,8,64) and a window of 100 ms or more")
    try:
        if any(not 1 <= int(b) <= MAX_BATCH for b in args.bench_batches.split(",") if b.strip()):
            raise ValueError
    except ValueError:
        ap.error(f"--bench-batches {args.bench_batches}: give batch sizes from 1 to {MAX_BATCH}, e.g. 4,8,16")
    if not 0 <= args.stream_procs <= args.client_procs:
        ap.error(f"--stream-procs {args.stream_procs}: give 0 to --client-procs ({args.client_procs}) processes")
    if not 1 <= args.opt_batch <= MAX_BATCH:
        ap.error(f"--opt-batch {args.opt_batch}: give a batch from 1 to {MAX_BATCH}")
    if args.cli_procs < 0:
        ap.error(f"--cli-procs {args.cli_procs}: give 1 or more client processes, or 0 for none")
    why = cpu_layout_problem(args.cpus)
    if why:
        ap.error(f"--cpus {args.cpus}: {why}")
    why = client_problem(args.client_kind)
    if why:
        ap.error(f"--client-kind {args.client_kind}: {why}")
    if not 0 <= args.client_nice <= 19:
        ap.error(f"--client-nice {args.client_nice}: give 0 to 19")
    why = args.preferred_batch and preferred_problem(args.preferred_batch)
    if why:
        ap.error(f"--preferred-batch {args.preferred_batch}: {why}")
    if args.grpc_allocation_pool < 0:
        ap.error(f"--grpc-allocation-pool {args.grpc_allocation_pool}: give 1 or more request states, or 0 for "
                 "Triton's own")
    if args.sweep:
        try:
            parse_sweep(args.sweep)
            if any(int(c) < 1 for c in args.sweep_levels.split(",")):
                raise ValueError(f"--sweep-levels {args.sweep_levels}: levels of 1 or more")
        except ValueError as exc:
            ap.error(str(exc))
    # a layout this host's CPUs cannot take is refused now, not after the engine's build
    layouts = {args.cpus, *(one["cpus"] for one in (parse_sweep(args.sweep) if args.sweep else []) if "cpus" in one)}
    for layout in sorted(layouts):
        try:
            cpu_halves(layout)
        except RuntimeError as exc:
            ap.error(str(exc))
    if args.compare == args.backend:
        args.compare = "none"
    # the comparison's share of the deadline: its server's start and stop, and three levels of --duration-s
    args.compare_levels_s = 0.0 if args.compare == "none" else 3 * (args.duration_s + LOAD_OVERHEAD_S) + 15.0
    results: dict = {"errors": {}, "settings": {k: v for k, v in vars(args).items() if k not in ("out",)},
                     "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    RESULT_PATHS[:] = [Path(args.results)] + ([Path(args.out, "serve-h200.json")] if args.out else [])
    try:
        for folder in (args.cache, args.out):
            if folder:
                Path(folder).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="serve-h200-") as tmp:
            run(args, Path(args.cache), Path(tmp), results)
    except Exception as exc:  # noqa: BLE001 - recorded; the results so far are still written below
        results["errors"]["run"] = f"{type(exc).__name__}: {exc}"
        log(f"run failed: {traceback.format_exc()}")
    finally:
        written = write_results(results, RESULT_PATHS)
    log(f"wrote {', '.join(map(str, written)) or 'nothing'}; errors: {list(results['errors']) or 'none'}")
    return 0 if written else 1


def write_results(results: dict, paths: list) -> list:
    """The results JSON written to each of ``paths`` (folders made), each on its own: one that fails is logged and the
    others are still written. Returns the paths written."""
    from trtkit._atomic import write_text_atomic

    text = json.dumps(results, indent=2, sort_keys=True, default=str) + "\n"
    written = []
    for path in paths:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, text)
            written.append(path)
        except Exception as exc:  # noqa: BLE001 - the next copy may still land
            log(f"could not write {path}: {type(exc).__name__}: {exc}")
    return written


def anchor_ratio(results: dict, ips64) -> None:
    """perf_analyzer's c64 against ``bench_streams2_ips`` (``ratio_c64_to_bench``), and a line saying it."""
    pa = results["perf_analyzer"]
    if not pa.get("available"):
        log(f"perf_analyzer: not run: {pa.get('reason')}")
        return
    pa64 = (pa.get("concurrency") or {}).get("64")
    ips = pa64.get("ips") if isinstance(pa64, dict) else None
    bench = results.get("bench_streams2_ips")
    if ips and bench:
        pa["ratio_c64_to_bench"] = round(ips / bench, 3)
    log(f"perf_analyzer c64: {ips or pa64} images/s, {pa.get('ratio_c64_to_bench')} x bench --streams 2 "
        f"(trtkit's clients: {ips64})")


def run(args, cache: Path, workdir: Path, results: dict) -> None:
    import platform

    results["environment"] = {"python": platform.python_version()}
    results["perf_analyzer"] = perf_analyzer_setup(args)
    step(results, "environment", lambda: _environment(results["environment"]))
    onnx_path = Path(args.onnx) if args.onnx else step(results, "export", lambda: export_resnet(cache))
    engine = onnx_path and step(results, "build", lambda: build_engine(onnx_path, cache, results, args.input_uint8,
                                                                      args.opt_batch))
    if not engine:
        return
    results["bench_streams2_ips"] = step(results, "bench_streams2",
                                         lambda: bench_streams2(engine, args.bench_s, args.input_uint8))
    if args.bench_batches:
        results["bench_at_served_batches"] = step(results, "bench_at_served_batches",
                                                  lambda: bench_served_batches(engine, args))
    one = step(results, "serve", lambda: serve_and_load(engine, args, workdir, results, "0", "gpu0", (1, 8, 64),
                                                         True, anchor=True)) or {}
    keys = ("grpc", "soak", "ready_s", "load_s", "start_s", "instances", "stop", "level_s", "backend", "cpus")
    results.update({k: one.get(k) for k in keys})
    ips64 = ((one.get("grpc") or {}).get("concurrency", {}).get("64") or {}).get("ips")
    if ips64 and results.get("bench_streams2_ips"):
        results["grpc64_vs_bench_streams2"] = round(ips64 / results["bench_streams2_ips"], 3)
    anchor_ratio(results, ips64)
    if args.compare != "none":
        left = args.deadline_s - (time.monotonic() - STARTED) - STOP_RESERVE_S
        if left >= args.compare_levels_s * 0.5:
            args.compare_levels_s = 0.0
            results["compare"] = step(results, "compare", lambda: serve_and_load(
                engine, args, workdir, results, "0", f"{args.compare}-gpu0", (1, 8, 64), False, args.compare))
            cmp64 = (((results.get("compare") or {}).get("grpc") or {}).get("concurrency", {}).get("64") or {})
            if cmp64.get("ips") and ips64:
                results["compare"]["grpc64_main_over_this"] = round(ips64 / cmp64["ips"], 2)
            if cmp64.get("ips") and results.get("bench_streams2_ips"):
                results["compare"]["grpc64_vs_bench_streams2"] = round(cmp64["ips"] / results["bench_streams2_ips"],
                                                                       3)
        else:
            results["compare"] = f"not run: {left:.0f} s left before the deadline"
    if args.sweep:
        start_s = float(one.get("start_s") or 10.0)
        stop_s = float((one.get("stop") or {}).get("exit_s") or 10.0)
        step(results, "sweep", lambda: run_sweep(engine, args, workdir, results, start_s, stop_s))
    count = results["environment"].get("gpu_count") or 0
    if count >= 2:
        results["two_gpus"] = step(results, "two_gpus", lambda: serve_and_load(
            engine, args, workdir, results, "0,1", "gpus01", (64,), False))
    else:
        results["two_gpus"] = f"not run: this host has {count} GPU(s)"


def _environment(env: dict) -> None:
    """What the run ran on, into ``env`` as it is found (what came before a failure is kept)."""
    import numpy
    import tensorrt

    from trtkit._device import device_info
    from trtkit.serve.backend import backend_environment, require_pytriton

    env.update(tensorrt=tensorrt.__version__, numpy=numpy.__version__, gpu=device_info().get("name"),
               gpu_count=gpu_count())
    pytriton = require_pytriton()
    env["pytriton"] = getattr(pytriton, "__version__", None)
    env["ld_library_path_for_triton"] = backend_environment()["LD_LIBRARY_PATH"].split(":")[0]


if __name__ == "__main__":
    sys.exit(main())
