"""What the fake TensorRT was asked to do that costs time with the real one, counted per module and per process.

Each fake module counts its heavy calls in ``trt.calls`` (a ``Counter``): ``import`` (the module made), ``Builder``,
``Runtime``, ``parse`` (an ONNX parse), ``supports_model`` (a parse of its own in the real parser),
``deserialize_cuda_engine``, ``create_execution_context`` and ``create_engine_inspector``. Where
``$TRTKIT_FAKE_TRT_TRACE`` names a file, every such call also appends ``<pid> <call>`` to it, so a test sees which
process (the caller or a build worker) did what; :func:`read_trace` reads it back. :func:`write_package` makes a
``tensorrt`` package that is the fake, for processes started with ``PYTHONPATH`` (a fresh ``trtkit build``, its
build worker, a raw-API script).
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

TRACE_ENV = "TRTKIT_FAKE_TRT_TRACE"

_PACKAGE = """
import sys
from tests.fakes.fake_trt import make_fake_trt
sys.modules[__name__] = make_fake_trt({version!r})
"""


def record(trt, call: str) -> None:
    """Count ``call`` on the fake module ``trt`` (and append it to the trace file, when one is set)."""
    trt.calls[call] += 1
    path = os.environ.get(TRACE_ENV)
    if path:
        with open(path, "a") as f:
            f.write(f"{os.getpid()} {call}\n")


def read_trace(path) -> dict:
    """``{pid: Counter of calls}`` from a trace file (``{}`` when there is none)."""
    per_process: dict = {}
    if not Path(path).exists():
        return per_process
    for line in Path(path).read_text().splitlines():
        pid, _, call = line.partition(" ")
        per_process.setdefault(int(pid), Counter())[call] += 1
    return per_process


def write_package(folder, version: str = "8.6.0") -> Path:
    """Write ``<folder>/tensorrt/__init__.py``, importing as the fake ``version``; returns ``folder`` (for
    ``PYTHONPATH``)."""
    package = Path(folder) / "tensorrt"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(_PACKAGE.format(version=version))
    return Path(folder)
