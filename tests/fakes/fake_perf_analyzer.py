"""A stand-in for NVIDIA's perf_analyzer binary: ``python fake_perf_analyzer.py ARGS`` (the tests put a wrapper
script named ``perf_analyzer`` around it, see :func:`install`).

For ``--concurrency-range C:C`` it writes perf_analyzer's CSV report (the header of its report_writer.cc, with the
server's columns) to ``-f``: C x 300 + 0.5 inferences/s and latencies growing with C, in microseconds; or, with
``$FAKE_PA_CSV`` naming a file, that file's text. It appends its arguments as one JSON line to ``$FAKE_PA_ARGV``
where set. At the concurrency in ``$FAKE_PA_FAIL`` it exits 99 with perf_analyzer's error for a server it cannot
reach; in ``$FAKE_PA_UNSTABLE`` it writes no CSV, says why and exits 2, as perf_analyzer 2.51 does when its windows
never agree.
``--version`` prints its version line.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

HEADER = (
    "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,"
    "Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency"
)


def install(folder: Path, environ) -> Path:
    """A ``perf_analyzer`` script in ``folder`` running this stand-in with this interpreter, set as
    ``$PERF_ANALYZER`` in ``environ`` (a dict, or pytest's monkeypatch); returns its path."""
    binary = Path(folder) / "perf_analyzer"
    binary.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).resolve()}" "$@"\n')
    binary.chmod(0o755)
    if hasattr(environ, "setenv"):
        environ.setenv("PERF_ANALYZER", str(binary))
    else:
        environ["PERF_ANALYZER"] = str(binary)
    return binary


def main(argv: list) -> int:
    if argv == ["--version"]:
        print("Perf Analyzer Version 2.60.0 (commit 0123abc)", file=sys.stderr)
        return 0
    if os.environ.get("FAKE_PA_ARGV"):
        with open(os.environ["FAKE_PA_ARGV"], "a") as f:
            f.write(json.dumps(argv) + "\n")
    c = int(argv[argv.index("--concurrency-range") + 1].split(":")[0])
    print(f"*** Measurement Settings ***\n  Batch size: {argv[argv.index('-b') + 1]}")
    if str(c) == os.environ.get("FAKE_PA_FAIL"):
        print("error: failed to get model metadata: failed to connect to all addresses", file=sys.stderr)
        return 99
    if str(c) == os.environ.get("FAKE_PA_UNSTABLE"):
        print(f"Failed to obtain stable measurement within 10 measurement windows for concurrency {c}. Please try to "
              "increase the --measurement-interval.\nFailed to obtain stable measurement.", file=sys.stderr)
        return 2
    canned = os.environ.get("FAKE_PA_CSV")
    text = Path(canned).read_text() if canned else (
        f"{HEADER}\n{c},{300 * c + 0.5},20,1000,400,130,1180,190,9,{1500 + 30 * c},{1600 + 30 * c},{1700 + 30 * c},"
        f"{2000 + 40 * c}\n")
    Path(argv[argv.index("-f") + 1]).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
