#!/usr/bin/env python3
"""ResNet-50 FP16 served by ``trtkit serve`` on the GPU host and loaded by perf_analyzer, against ``trtkit bench
--streams 2``.

In one call:

1. ResNet-50 (torchvision, random weights, seed 0) exported by the torch venv; built FP16 with trtkit (TensorRT's own
   tactic sources: the GPU bundle stubs cuBLAS/cuDNN), profile batch 1/32/32; cached by ONNX sha256 in ``--cache``.
   ``--input-uint8``: the engine takes (N, 224, 224, 3) uint8 pixels, a quarter of the bytes a request carries.
2. ``bench_streams2_ips``: ``trtkit bench --streams 2`` on that engine at batch 32 (what the GPU carries alone).
3. For each backend of ``--backends`` (``servers.<backend>``): ``trtkit serve`` on that engine in a child process
   (``--instances``, ``--max-batch 32``, ``--max-queue-delay-us``, ``--preferred-batch``; the tensorrt backend from
   ``--triton-backends`` with ``--tensorrt-options``); ``ready_s`` and ``load_s`` from its ``--json``, ``start_s``
   from the command's start. Then:

   - ``grpc``: perf_analyzer over gRPC at ``--levels``, as ``trtkit bench --server`` runs it (one request of batch
     1 at a time per request in flight, ``--shared-memory``, windows of ``--window-s`` until three agree): each
     level's images/s, p50/p90/p95/p99 and the server's queue and compute times; ``c64_vs_bench_streams2``;
   - ``soak`` (the first backend only): ``--soak-requests`` requests at concurrency 64 in one measurement, and
     ``leak_bytes_device``: the GPU's free memory (device-wide, so the server's allocations count) after the levels
     minus after the soak;
   - ``stop``: SIGTERM, its exit code and seconds to exit.

Writes ``benchmarks/results/serve-h200.json`` and, with ``--out``, a copy, Triton's log and the server's output there.
Each step's failure is recorded in ``errors`` instead of stopping the run; the JSON is written after every step (a
run killed by a timeout keeps what it had). A backend or soak that would not end before ``--deadline-s`` is not run
(said so in its place).

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
from precision_h200 import export_resnet  # noqa: E402 - the same ResNet-50 ONNX, in the same --cache

TACTICS = ("EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS")
INPUT = "images"
MAX_BATCH = 32
STARTED = time.monotonic()
RESULT_PATHS: list = []  # where the results JSON goes; rewritten after every step (a killed run keeps its past)
SOAK_WINDOW_S = 5.0  # the soak's warm-up level and what its requests may take beyond the server's pace


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


def left_s(args) -> float:
    return args.deadline_s - (time.monotonic() - STARTED)


# --- engine ---------------------------------------------------------------------------------------------------------


def input_shape(batch: int, uint8: bool = False) -> tuple:
    """ResNet-50's (N, 3, 224, 224) float input, or with ``uint8`` the (N, 224, 224, 3) uint8 pixels of an engine
    built with ``input_uint8_nhwc``."""
    return (batch, 224, 224, 3) if uint8 else (batch, 3, 224, 224)


def build_engine(onnx_path: Path, cache: Path, results: dict, uint8: bool = False) -> Path:
    """ResNet-50 FP16 with one profile, batch 1 / 32 / 32, cached by the ONNX model's sha256."""
    import tensorrt as trt

    from trtkit.builder.api import build
    from trtkit.builder.config import BuildConfig
    from trtkit.builder.profiles import InputShape, Profile

    sha = hashlib.sha256(onnx_path.read_bytes()).hexdigest()[:16]
    path = cache / f"resnet50-fp16{'-u8nhwc' if uint8 else ''}-b{MAX_BATCH}-{sha}-trt{trt.__version__}.engine"
    results["engine"] = {"path": str(path), "onnx_sha256_16": sha, "precision": "fp16", "tactic_sources": list(TACTICS),
                         "profile": {"min": 1, "opt": MAX_BATCH, "max": MAX_BATCH}, "cached": path.exists(),
                         "input": {"shape": list(input_shape(MAX_BATCH, uint8)), "dtype": "uint8" if uint8 else
                                   "float32"}}
    if not path.exists():
        shapes = [input_shape(b, uint8) for b in (1, MAX_BATCH, MAX_BATCH)]
        config = BuildConfig(precision="fp16", tactic_sources=TACTICS, timing_cache=str(cache / "resnet50-fp16.cache"),
                             profiles=[Profile({INPUT: InputShape(*shapes)})], input_uint8_nhwc=uint8)
        t0 = time.perf_counter()
        build(str(onnx_path), config, output=path, isolate=False)
        results["engine"]["build_s"] = round(time.perf_counter() - t0, 1)
    return path


def bench_streams2(engine: Path, duration_s: float, uint8: bool = False) -> float:
    from trtkit.bench import BenchSettings, benchmark

    result = benchmark(engine, BenchSettings(shapes={INPUT: input_shape(MAX_BATCH, uint8)}, streams=2,
                                             cuda_graph=True, duration_s=duration_s, e2e=False))
    return round(result.items_per_s, 1)


def served_as(engine: Path, workdir: Path, name: str = "resnet50") -> Path:
    """The engine (and its manifest) linked as ``<name>.engine``: Triton names the model after the file's stem."""
    from trtkit.manifest import manifest_path

    link = workdir / f"{name}.engine"
    for src, dst in ((engine, link), (manifest_path(engine), manifest_path(link))):
        if src.exists() and not dst.exists():
            dst.symlink_to(src)
    return link


def device_free_bytes() -> int:
    from trtkit.runtime.cuda import Cuda

    return Cuda().mem_get_info()[0]


# --- server ---------------------------------------------------------------------------------------------------------


class ServeProcess:
    """``trtkit serve --backend BACKEND`` in a child process; ready once its ``--json`` is written."""

    def __init__(self, engine: Path, args, workdir: Path, backend: str):
        self.status = workdir / f"status-{backend}.json"
        self.output = workdir / f"serve-{backend}.out"
        self.log_file = workdir / f"triton-{backend}.log"
        launcher = [args.serve_with] if args.serve_with else ["-m", "trtkit.cli.main"]
        native = ["--triton-backends", args.triton_backends] if backend == "tensorrt" else []
        if backend == "tensorrt" and args.tensorrt_options:
            native += ["--tensorrt-options", args.tensorrt_options]
        cmd = [sys.executable, *launcher, "serve", str(engine), "--backend", backend, *native,
               *(["--shared-memory"] if args.shared_memory != "none" else []),
               *(["--preferred-batch", args.preferred_batch] if args.preferred_batch else []),
               "--instances", str(args.instances), "--max-batch", str(MAX_BATCH), "--max-queue-delay-us",
               str(args.max_queue_delay_us), "--http-port", str(args.port), "--grpc-port", str(args.port + 1),
               "--metrics-port", str(args.port + 2), "--json", str(self.status), "--log-file", str(self.log_file)]
        log(" ".join(cmd))
        self.started = time.monotonic()
        with open(self.output, "wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)

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
        """What the server leaves to read: trtkit serve's output, Triton's log and what tritonserver printed itself."""
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


def perf_analyzer_levels(args, levels, binary: str, iterations: int | None = None) -> dict:
    """perf_analyzer at ``levels`` on the server's gRPC port, as ``trtkit bench --server --grpc`` runs it."""
    from trtkit.bench.serving import LoadSettings, load_test

    settings = LoadSettings(concurrency=tuple(levels), grpc=True, shared_memory=args.shared_memory,
                            duration_s=args.window_s, iterations=iterations)
    results = load_test(f"127.0.0.1:{args.port + 1}", "resnet50", settings, binary=binary)
    return {str(r.concurrency): r.to_json() for r in results}


def soak_run(args, binary: str) -> dict:
    """``--soak-requests`` at concurrency 64 in one measurement, and the device memory it left allocated."""
    before = device_free_bytes()
    (level,) = perf_analyzer_levels(args, [64], binary, iterations=args.soak_requests).values()
    return {**level, "requests": args.soak_requests, "leak_bytes_device": before - device_free_bytes()}


def serve_and_load(engine: Path, args, workdir: Path, results: dict, backend: str, soak: bool) -> dict:
    """``trtkit serve --backend BACKEND`` loaded by perf_analyzer at ``--levels``, then (``soak``) the soak."""
    out: dict = {}
    server = ServeProcess(served_as(engine, workdir), args, workdir, backend)
    try:
        status = server.wait_ready(args.ready_timeout_s)
        out.update(ready_s=round(status["ready_s"], 3), load_s=round(status["load_s"], 3),
                   start_s=status["start_s"], instances=status["models"][0]["instances"])
        binary = results["perf_analyzer"]["binary"]
        out["grpc"] = step(results, f"{backend}.grpc", lambda: perf_analyzer_levels(args, args.levels, binary))
        c64 = ((out["grpc"] or {}).get("64") or {}).get("ips")
        if c64 and results.get("bench_streams2_ips"):
            out["c64_vs_bench_streams2"] = round(c64 / results["bench_streams2_ips"], 3)
        log(f"{backend}: " + ", ".join(f"c{c} {(v or {}).get('ips')}" for c, v in (out["grpc"] or {}).items()))
        if soak and left_s(args) < args.soak_budget_s:
            out["soak"] = f"not run: {left_s(args):.0f} s left before the deadline"
        elif soak:
            out["soak"] = step(results, f"{backend}.soak", lambda: soak_run(args, binary))
    finally:
        out["stop"] = step(results, f"{backend}.stop", server.stop)
        for path in server.files():
            if args.out and path.exists():
                step(results, f"{backend}.copy.{path.name}", lambda path=path: copy_to(path, Path(args.out)))
    return out


def copy_to(path: Path, folder: Path) -> None:
    from trtkit._atomic import write_bytes_atomic

    write_bytes_atomic(folder / path.name, path.read_bytes())


# --- main -----------------------------------------------------------------------------------------------------------


def run(args, cache: Path, workdir: Path, results: dict) -> None:
    import platform

    from trtkit.bench.serving import find_perf_analyzer, perf_analyzer_version

    results["environment"] = {"python": platform.python_version()}
    step(results, "environment", lambda: _environment(results["environment"]))
    binary = step(results, "perf_analyzer", find_perf_analyzer)
    results["perf_analyzer"] = {"binary": binary, "version": binary and perf_analyzer_version(binary)}
    onnx_path = Path(args.onnx) if args.onnx else step(results, "export", lambda: export_resnet(cache))
    engine = onnx_path and step(results, "build", lambda: build_engine(onnx_path, cache, results, args.input_uint8))
    if not engine:
        return
    results["bench_streams2_ips"] = step(results, "bench_streams2",
                                         lambda: bench_streams2(engine, args.bench_s, args.input_uint8))
    results["servers"] = {}
    for i, backend in enumerate(args.backends):
        if i and left_s(args) < args.backend_budget_s:
            results["servers"][backend] = f"not run: {left_s(args):.0f} s left before the deadline"
            continue
        results["servers"][backend] = step(results, backend, lambda backend=backend, i=i: serve_and_load(
            engine, args, workdir, results, backend, soak=i == 0 and bool(binary)))


def _environment(env: dict) -> None:
    """What the run ran on, into ``env`` as it is found (what came before a failure is kept)."""
    import numpy
    import tensorrt

    from trtkit._device import device_info
    from trtkit.serve.tritonserver import require_pytriton

    env.update(tensorrt=tensorrt.__version__, numpy=numpy.__version__, gpu=device_info().get("name"))
    env["pytriton"] = getattr(require_pytriton(), "__version__", None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="also copy the results JSON and logs here (e.g. $OUT)")
    ap.add_argument("--cache", default=os.path.expanduser("~/.cache/trtkit-bench"))
    ap.add_argument("--results", default=str(ROOT / "benchmarks" / "results" / "serve-h200.json"))
    ap.add_argument("--backends", default="python,tensorrt",
                    help="trtkit serve --backend of each server, in order (default python,tensorrt; the first gets "
                         "the soak)")
    ap.add_argument("--instances", type=int, default=3)
    ap.add_argument("--max-queue-delay-us", type=int, default=100)
    ap.add_argument("--preferred-batch", default="", help="trtkit serve --preferred-batch (default: the profile's)")
    ap.add_argument("--triton-backends", default=str(ROOT / ".gpu-triton" / "backends"),
                    help="the tensorrt backend's folder (tensorrt/libtriton_tensorrt.so; "
                         "scripts/build_triton_trt_backend.sh)")
    ap.add_argument("--tensorrt-options", default="", help="trtkit serve --tensorrt-options (tensorrt backend)")
    ap.add_argument("--shared-memory", choices=("system", "cuda", "none"), default="system",
                    help="where perf_analyzer's requests carry their inputs and outputs (default system)")
    ap.add_argument("--levels", default="1,8,64", help="perf_analyzer's concurrency levels (default 1,8,64)")
    ap.add_argument("--window-s", type=float, default=3.0, help="perf_analyzer's measurement window (default 3)")
    ap.add_argument("--bench-s", type=float, default=5.0, help="seconds of trtkit bench --streams 2")
    ap.add_argument("--soak-requests", type=int, default=100_000)
    ap.add_argument("--port", type=int, default=18000, help="HTTP port; gRPC and metrics take the next two")
    ap.add_argument("--ready-timeout-s", type=float, default=180)
    ap.add_argument("--deadline-s", type=float, default=540, help="run no backend or soak that would end after it")
    ap.add_argument("--input-uint8", action="store_true", help="build the engine with input_uint8_nhwc")
    ap.add_argument("--onnx", help="serve this ONNX model instead of exporting ResNet-50 (input 'images')")
    ap.add_argument("--serve-with", help="run trtkit serve through this script (same arguments)")
    args = ap.parse_args()
    try:
        args.levels = [int(c) for c in args.levels.split(",")]
        if min(args.levels) < 1 or args.window_s <= 0 or args.soak_requests < 1:
            raise ValueError
    except ValueError:
        ap.error("give --levels of 1 or more (e.g. 1,8,64), a --window-s above 0 and --soak-requests of 1 or more")
    args.backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if not args.backends or set(args.backends) - {"python", "tensorrt"}:
        ap.error(f"--backends {','.join(args.backends)}: give python, tensorrt or both")
    # a server's start and stop and every level's windows (three to ten); the soak at the 64 level's pace
    args.backend_budget_s = 60.0 + len(args.levels) * (10 * args.window_s + 30.0)
    args.soak_budget_s = 60.0
    results: dict = {"errors": {}, "settings": {k: v for k, v in vars(args).items() if k != "out"},
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


if __name__ == "__main__":
    sys.exit(main())
