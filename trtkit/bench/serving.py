"""Load on a running Triton server (``trtkit bench --server URL --model NAME``), sent by NVIDIA's perf_analyzer.

perf_analyzer, the load generator Triton ships, runs once per concurrency level with random inputs of the model's
shapes and types, over HTTP or gRPC, the tensors in the requests or in shared memory (``"system"`` or ``"cuda"``: the
server on this host). It measures windows of ``duration_s`` until three in a row agree within 10% (at most
:data:`MAX_WINDOWS`), or one window of ``iterations`` requests, and writes CSV that :func:`parse_csv` reads into a
:class:`LoadResult`; a level it could not measure carries why in ``error``, and the next level still runs.

The binary: ``$PERF_ANALYZER``, else the perf-analyzer wheel's (``pip install "trtkit[serve]"``; glibc 2.38 and later:
elsewhere pip installs an empty placeholder), else ``perf_analyzer`` on ``PATH`` (NVIDIA's Triton SDK container).
"""

from __future__ import annotations

import csv
import importlib.util
import io
import os
import re
import shutil
import socket
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from trtkit import _check
from trtkit.errors import DependencyError, ServeError, UsageError

ENV = "PERF_ANALYZER"
INSTALL_HINT = 'pip install "trtkit[serve]"'
# where requests carry their inputs and outputs: in the request, in system shared memory, in device memory (CUDA IPC)
SHARED_MEMORY = ("none", "system", "cuda")
MAX_WINDOWS = 10  # perf_analyzer's --max-trials default: windows a level may take before it is called unstable
START_S = 30.0  # a perf_analyzer process's start, connection and model metadata, besides its windows
# perf_analyzer's CSV columns (report_writer.cc) -> LoadResult's; latencies in microseconds
LATENCIES = {"p50 latency": "p50_ms", "p90 latency": "p90_ms", "p95 latency": "p95_ms", "p99 latency": "p99_ms"}
SERVER = {
    "Server Queue": "queue",
    "Server Compute Input": "compute_input",
    "Server Compute Infer": "compute_infer",
    "Server Compute Output": "compute_output",
    "Network+Server Send/Recv": "network_misc",
}


@dataclass(frozen=True)
class LoadSettings:
    """How perf_analyzer loads the server: concurrency levels, rows per request, protocol, shared memory, windows."""

    concurrency: tuple = (1, 8, 64)
    batch: int = 1
    grpc: bool = False
    streaming: bool = False  # gRPC only: every request over one bidirectional stream
    shared_memory: str = "none"  # or "system"/"cuda" (a server on this host)
    duration_s: float = 5.0  # each measurement window (perf_analyzer's --measurement-interval)
    iterations: int | None = None  # one window of exactly this many requests (--request-count) instead

    def check(self) -> None:
        """Raises UsageError for settings perf_analyzer could not run."""
        if not self.concurrency or any(int(c) < 1 for c in self.concurrency):
            raise UsageError(
                f"concurrency {','.join(map(str, self.concurrency))}: give levels of 1 or more, e.g. 1,8,64",
                field="concurrency",
                accepted="levels of 1 or more",
            )
        if self.streaming and not self.grpc:
            raise UsageError(
                "streaming needs gRPC (Triton streams inference over gRPC only): ask for gRPC, or leave streaming off",
                field="streaming",
                accepted="with gRPC",
            )
        _check.choice("shared_memory", self.shared_memory, SHARED_MEMORY)
        for name, ok, accepted in (
            ("batch", int(self.batch) >= 1, "1 or more"),
            ("duration_s", self.duration_s * 1000 >= 1, "1 ms or more"),
            ("iterations", self.iterations is None or int(self.iterations) >= 1, "1 or more"),
        ):
            if not ok:
                raise UsageError(f"{name} must be {accepted}, not {getattr(self, name)}", field=name, accepted=accepted)


@dataclass
class LoadResult:
    """One concurrency level: inferences/s (rows), requests/s, latency percentiles in ms from send to answer; where
    the server reports statistics, ``server_us``: its mean queue and compute times per request and what is left of
    the client's wait (``network_misc``: the network and Triton's front end); ``error``: why there are no figures."""

    concurrency: int
    ips: float | None = None
    rps: float | None = None
    p50_ms: float | None = None
    p90_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    server_us: dict = field(default_factory=dict)
    error: str | None = None

    def to_json(self) -> dict:
        return asdict(self)


def find_perf_analyzer(environ=os.environ) -> str:
    """The perf_analyzer binary: ``$PERF_ANALYZER``, else the perf-analyzer wheel's, else ``perf_analyzer`` on PATH.

    Raises:
        DependencyError: none found (naming the install), or ``$PERF_ANALYZER`` is not an executable file.
    """
    given = environ.get(ENV)
    if given:
        if Path(given).is_file() and os.access(given, os.X_OK):
            return given
        raise DependencyError(f"{ENV}={given} is not an executable file; point it at a perf_analyzer binary")
    spec = importlib.util.find_spec("perf_analyzer")
    for folder in (spec.submodule_search_locations or ()) if spec else ():
        # the wheel's binary itself: its perf_analyzer command is a Python wrapper that drops the exit code
        binary = Path(folder) / "bin" / "perf_analyzer"
        if binary.is_file() and os.access(binary, os.X_OK):
            return str(binary)
    found = shutil.which("perf_analyzer", path=environ.get("PATH"))
    if found:
        return found
    raise DependencyError(
        f"Load on a server is sent by NVIDIA's perf_analyzer, which is not installed: {INSTALL_HINT} (the "
        f"perf-analyzer wheel, built for glibc 2.38 and later), or set {ENV} to a perf_analyzer binary"
    )


def perf_analyzer_version(binary: str, timeout_s: float = 30.0) -> str | None:
    """What ``perf_analyzer --version`` says its version is (``2.60.0``), or None where it says none."""
    try:
        proc = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"Version\s+(\S+)", proc.stdout + proc.stderr)
    return match.group(1) if match else None


def address(url: str, grpc: bool) -> tuple:
    """``(host, port)`` of a server URL (``host:port``, ``http://host:port``, ``grpc://[::1]:8001``); no port: Triton's
    default for the protocol (8000 HTTP, 8001 gRPC).

    Raises:
        UsageError: the URL names no host or a port that is not a number.
    """
    parts = urlsplit(url if "//" in url else f"//{url}")
    try:
        port = parts.port
    except ValueError:
        port = -1
    if not parts.hostname or port == -1 or parts.path not in ("", "/"):
        raise UsageError(f"server {url!r}: give HOST:PORT, e.g. localhost:8000 (HTTP) or localhost:8001 (gRPC)")
    return parts.hostname, port or (8001 if grpc else 8000)


def check_server(url: str, grpc: bool, timeout_s: float = 5.0) -> None:
    """Raises ServeError: nothing accepts connections at ``url`` (a TCP connection only: perf_analyzer speaks
    Triton's protocol and says what the server answers)."""
    host, port = address(url, grpc)
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as exc:
        raise ServeError(
            f"No server answers at {url} ({exc.strerror or exc}); start one (trtkit serve ENGINE) or give its "
            f"{'gRPC' if grpc else 'HTTP'} address"
        ) from None


def command(binary: str, url: str, model: str, concurrency: int, settings: LoadSettings, csv_path) -> list:
    """perf_analyzer's command line for one level."""
    host, port = address(url, settings.grpc)
    options = {  # perf_analyzer's own long options (its command line, not trtkit's); None: a switch
        "concurrency-range": f"{int(concurrency)}:{int(concurrency)}",
        "input-data": "random",
        "shared-memory": settings.shared_memory,
        "measurement-interval": max(1, round(settings.duration_s * 1000)),
        "max-trials": MAX_WINDOWS,
        **({"request-count": int(settings.iterations)} if settings.iterations else {}),
        **({"streaming": None} if settings.streaming else {}),
    }
    server = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    protocol = "grpc" if settings.grpc else "http"
    short = ["-m", model, "-u", server, "-i", protocol, "-b", str(int(settings.batch)), "-f", str(csv_path)]
    return [
        binary,
        *short,
        *(part for k, v in options.items() for part in (f"--{k}", *(() if v is None else [str(v)]))),
    ]


def parse_csv(text: str, concurrency: int, batch: int = 1) -> LoadResult:
    """The figures of perf_analyzer's CSV report (``-f``) for one concurrency level.

    Raises:
        ValueError: the CSV has no row of figures (perf_analyzer writes one only for a measured level) or lacks a
            column.
    """
    rows = list(csv.DictReader(io.StringIO(text)))
    if not rows:
        raise ValueError("perf_analyzer wrote no figures")
    row = rows[-1]
    try:
        ips = float(row["Inferences/Second"])
        latencies = {key: round(float(row[col]) / 1e3, 3) for col, key in LATENCIES.items()}
    except KeyError as exc:
        raise ValueError(f"perf_analyzer's CSV has no column {exc} (columns: {', '.join(row)})") from None
    server = {key: int(float(row[col])) for col, key in SERVER.items()} if SERVER.keys() <= row.keys() else {}
    result = LoadResult(concurrency, round(ips, 2), round(ips / max(int(batch), 1), 2), server_us=server)
    for key, value in latencies.items():
        setattr(result, key, value)
    return result


def level_timeout_s(settings: LoadSettings) -> float | None:
    """The longest one level may take: every window perf_analyzer may take and its start (None: a request count,
    which takes as long as the server needs)."""
    return None if settings.iterations else MAX_WINDOWS * settings.duration_s + START_S


def measure_level(binary: str, url: str, model: str, concurrency: int, settings: LoadSettings) -> LoadResult:
    """One concurrency level: perf_analyzer's figures, or a result whose ``error`` says why there are none."""
    with tempfile.TemporaryDirectory(prefix="trtkit-perf-analyzer-") as tmp:
        csv_path, log_path = Path(tmp) / "level.csv", Path(tmp) / "level.log"
        cmd = command(binary, url, model, concurrency, settings, csv_path)
        timeout = level_timeout_s(settings)
        try:
            with open(log_path, "w") as log:
                code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            return LoadResult(concurrency, error=f"perf_analyzer gave no figures in {timeout:.0f} s: {_tail(log_path)}")
        except OSError as exc:
            return LoadResult(concurrency, error=f"could not run {binary}: {exc}")
        try:
            if code != 0:
                raise ValueError(f"perf_analyzer exited {code}")
            return parse_csv(csv_path.read_text() if csv_path.exists() else "", concurrency, settings.batch)
        except ValueError as exc:
            why = _tail(log_path)
            if "stable measurement" in why:  # perf_analyzer's own advice names its flag, not trtkit's
                why = (
                    f"its {MAX_WINDOWS} windows of {settings.duration_s:g} s never agreed within 10%; longer "
                    f"windows steady it (try windows of {2 * settings.duration_s:g} s)"
                )
            return LoadResult(concurrency, error=f"{exc}: {why}")


def _tail(path: Path, chars: int = 600) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return " | ".join(line.strip() for line in text[-chars:].splitlines() if line.strip())


def load_test(url: str, model: str, settings: LoadSettings | None = None, *, binary: str | None = None) -> list:
    """perf_analyzer's figures for ``model`` at ``url`` at each concurrency; one :class:`LoadResult` per level.

    Raises:
        UsageError: settings perf_analyzer could not run, or a URL that is not ``HOST:PORT``.
        DependencyError: no perf_analyzer binary (``binary`` not given and none found).
        ServeError: nothing accepts connections at ``url``.
    """
    settings = settings or LoadSettings()
    settings.check()
    binary = binary or find_perf_analyzer()
    check_server(url, settings.grpc)
    return [measure_level(binary, url, model, int(c), settings) for c in settings.concurrency]


def render(results: list, console, *, title: str) -> None:
    """The results as a rich table (the server's columns: its mean queue and compute_infer times per request); under
    it, each level's error."""
    from rich import box
    from rich.table import Table

    t = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("in flight", "infer/s", "p50 ms", "p90 ms", "p99 ms", "queue us", "compute us"):
        t.add_column(col, justify="right")
    for r in results:
        latencies = ["-" if v is None else f"{v:,.3f}" for v in (r.p50_ms, r.p90_ms, r.p99_ms)]
        server = [f"{r.server_us[k]:,}" if r.server_us else "-" for k in ("queue", "compute_infer")]
        t.add_row(str(r.concurrency), "-" if r.ips is None else f"{r.ips:,.1f}", *latencies, *server)
    console.print(t)
    for r in results:
        if r.error:
            console.print(f"[red]concurrency {r.concurrency}:[/] {r.error}")
