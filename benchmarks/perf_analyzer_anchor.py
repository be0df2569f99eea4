"""NVIDIA's C++ load generator, perf_analyzer, against a running Triton: the anchor for ``benchmarks/serve_h200.py``'s
own Python clients (what a client that costs little CPU per request carries from the same server).

The binary: ``$PERF_ANALYZER``, else ``perf_analyzer`` on ``PATH`` (the tritonclient 2.51.0 wheel ships it as
``tritonclient-2.51.0.data/data/bin/perf_analyzer``; it needs ``libb64.so.0d`` and ``libcudart.so.12``:
scripts/make_serve_parts.sh carries it with a wrapper that puts them on its ``LD_LIBRARY_PATH``, and
scripts/gpu_session.sh's serve step sets ``PERF_ANALYZER`` to that wrapper).

One perf_analyzer process per concurrency level: gRPC, batch 1 per request, random input data of the model's own
type and shape (uint8 pixels for an ``--input-uint8`` engine), shared memory as the main run's clients use it
(perf_analyzer puts the outputs there too). Each level takes time windows of ``interval_ms`` until three in a row
agree within ``STABILITY_PCT`` (at most ``MAX_TRIALS`` windows) and reports their merged figures in its CSV (``-f``):
throughput, the p50/p90/p95/p99 latencies from send to answer (``--percentile`` is not passed: it would only make
the stability check use that percentile instead of the mean; the CSV has these four either way), and where the server
reports statistics, its mean queue and compute times per request. A level whose windows never agree writes no CSV;
that level, like one that exits non-zero or runs past its timeout, is recorded as ``failed`` (why, with the end of
perf_analyzer's output) and the next level still runs.
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess
from pathlib import Path

ENV = "PERF_ANALYZER"
MAX_TRIALS = 6  # windows per level at most (perf_analyzer's default 10 would let one unsteady level take 35 s)
STABILITY_PCT = 15  # three windows in a row within this of each other: a stable measurement (default 10)
MIN_WINDOWS = 3  # perf_analyzer's stability check compares the last three windows
START_S = 2.0  # a perf_analyzer process's start, connection and model metadata, besides its windows
# per output tensor of a batch-1 request, with shared memory: more than ResNet-50's 1 000 float32 scores (4 KB)
OUTPUT_SHM_BYTES = 64 * 1024
# perf_analyzer 2.51's CSV columns (report_writer.cc) -> our keys; latencies in microseconds
LATENCIES = {"p50 latency": "p50_ms", "p90 latency": "p90_ms", "p95 latency": "p95_ms", "p99 latency": "p99_ms"}
SERVER = {"Server Queue": "queue", "Server Compute Input": "compute_input", "Server Compute Infer": "compute_infer",
          "Server Compute Output": "compute_output", "Network+Server Send/Recv": "network_misc"}


def find_binary(environ=os.environ) -> tuple:
    """``(path, None)`` of perf_analyzer, or ``(None, why not)``: ``$PERF_ANALYZER`` where set, else ``PATH``."""
    given = environ.get(ENV)
    if given:
        if Path(given).is_file() and os.access(given, os.X_OK):
            return given, None
        return None, f"{ENV}={given} is not an executable file"
    found = shutil.which("perf_analyzer", path=environ.get("PATH"))
    if found:
        return found, None
    return None, (f"no perf_analyzer: set {ENV} to the binary (the tritonclient 2.51.0 wheel's "
                  "tritonclient-2.51.0.data/data/bin/perf_analyzer) or put it on PATH")


def binary_version(binary: str, timeout_s: float = 20.0) -> str | None:
    """What ``perf_analyzer --version`` says its version is (``2.51.0``), or None where it says none."""
    try:
        proc = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"Version\s+(\S+)", proc.stdout + proc.stderr)
    return match.group(1) if match else None


def command(binary: str, model: str, url: str, concurrency: int, shared_memory: str, interval_ms: int,
            csv_path: Path) -> list:
    """The perf_analyzer command line of one level (``url``: the server's gRPC ``host:port``)."""
    shm = ["--output-shared-memory-size", str(OUTPUT_SHM_BYTES)] if shared_memory != "none" else []
    return [binary, "-m", model, "-u", url, "-i", "grpc", "--concurrency-range", f"{concurrency}:{concurrency}",
            "-b", "1", "--input-data", "random", "--shared-memory", shared_memory, *shm,
            "--measurement-interval", str(interval_ms), "--max-trials", str(MAX_TRIALS),
            "--stability-percentage", str(STABILITY_PCT), "-f", str(csv_path)]


def parse_csv(text: str) -> dict:
    """The figures of perf_analyzer's CSV report (one concurrency level): ``ips``, ``p50_ms`` .. ``p99_ms``,
    ``client_send_us``/``client_recv_us`` and, where the server reported statistics, ``server_us`` (its mean queue
    and compute times per request, and what is left of the client's wait: network and Triton's front end).

    Raises:
        ValueError: no row of figures (perf_analyzer writes one only for a stable measurement), or a column missing.
    """
    rows = list(csv.DictReader(io.StringIO(text)))
    if not rows:
        raise ValueError("perf_analyzer's CSV has no measurement (it writes one only once three windows agree)")
    row = rows[-1]
    try:
        out = {"ips": round(float(row["Inferences/Second"]), 1),
               **{key: round(float(row[col]) / 1e3, 3) for col, key in LATENCIES.items()},
               "client_send_us": int(float(row["Client Send"])), "client_recv_us": int(float(row["Client Recv"]))}
    except KeyError as exc:
        raise ValueError(f"perf_analyzer's CSV has no column {exc} (columns: {', '.join(row)})") from None
    if all(col in row for col in SERVER):
        out["server_us"] = {key: int(float(row[col])) for col, key in SERVER.items()}
    return out


def level_timeout_s(interval_ms: int) -> float:
    """The longest one level may take: every window perf_analyzer may take, its start, and a margin."""
    return MAX_TRIALS * interval_ms / 1e3 + START_S + 15.0


def shortest_level_s(interval_ms: int) -> float:
    """The least one level takes: three windows and the start."""
    return MIN_WINDOWS * interval_ms / 1e3 + START_S


def measure_level(binary: str, model: str, url: str, concurrency: int, shared_memory: str, interval_ms: int,
                  folder: Path, timeout_s: float, stem: str = "perf-analyzer", preexec_fn=None) -> dict:
    """One concurrency level: perf_analyzer's figures, or ``{"failed": why}`` (a non-zero exit, no stable
    measurement, a timeout). Its CSV and output go to ``folder/<stem>-c<N>.csv`` and ``.log``. ``preexec_fn`` runs in
    the child before perf_analyzer starts (to keep it on some CPUs, say)."""
    csv_path = folder / f"{stem}-c{concurrency}.csv"
    log_path = folder / f"{stem}-c{concurrency}.log"
    csv_path.unlink(missing_ok=True)
    cmd = command(binary, model, url, concurrency, shared_memory, interval_ms, csv_path)
    try:
        with open(log_path, "w") as log:
            log.write(" ".join(cmd) + "\n")
            log.flush()
            code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s,
                                  preexec_fn=preexec_fn).returncode
    except subprocess.TimeoutExpired:
        return {"failed": f"no result in {timeout_s:.0f} s (killed): {_tail(log_path)}"}
    except OSError as exc:
        return {"failed": f"could not run {binary}: {exc}"}
    if code != 0:
        return {"failed": f"perf_analyzer exited {code}: {_tail(log_path)}"}
    try:
        return parse_csv(csv_path.read_text() if csv_path.exists() else "")
    except ValueError as exc:
        return {"failed": f"{exc}: {_tail(log_path)}"}


def _tail(path: Path, chars: int = 600) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return " | ".join(line.strip() for line in text[-chars:].splitlines() if line.strip())
