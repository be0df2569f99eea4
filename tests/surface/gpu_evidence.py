"""GPU evidence for docs/support-matrix.md: which features passing GPU tests prove.

A GPU test declares what it proves with ``@pytest.mark.proves("fp16_flag", "cuda_graphs")`` (feature keys of
``scripts/support_matrix.py``: fp32, fp16_flag, fp16_cast, bf16, int8_calibrator, int8_qdq, strongly_typed,
cuda_graphs, calibrator_entropy, calibrator_minmax). With ``TRTKIT_GPU_RESULTS`` set,
``pytest -m gpu`` writes::

    {"tensorrt_version": "8.6.0", "device": "NVIDIA H200", "features": {"fp32": true, ...}}

(a feature is true when a test proving it passed and none failed), for ``scripts/support_matrix.py`` to read from
``docs/gpu-results/``. Registered by ``tests/conftest.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

FEATURES = frozenset({"fp32", "fp16_flag", "fp16_cast", "bf16", "int8_calibrator", "int8_qdq", "strongly_typed",
                      "cuda_graphs", "calibrator_entropy", "calibrator_minmax"})
_OUTCOMES: dict = {}


def pytest_configure(config):
    config.addinivalue_line("markers", "proves(*features): support-matrix features a passing GPU test proves "
                                       "(tests/surface/gpu_evidence.py)")


def proved_features(item) -> list:
    """The features ``item`` declares with ``proves`` (unknown names are an error: they would never show)."""
    names = [name for mark in item.iter_markers("proves") for name in mark.args]
    unknown = sorted(set(names) - FEATURES)
    if unknown:
        raise pytest.UsageError(f"{item.nodeid}: unknown feature(s) {unknown} in @pytest.mark.proves; "
                                f"known: {sorted(FEATURES)}")
    return names


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    features = proved_features(item)
    if not features or report.skipped or (report.when != "call" and report.passed):
        return
    for feature in features:
        previous = _OUTCOMES.get(feature, True)
        _OUTCOMES[feature] = previous and report.passed


def pytest_sessionfinish(session, exitstatus):
    target = os.environ.get("TRTKIT_GPU_RESULTS")
    if not target or not _OUTCOMES:
        return
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    Path(target).write_text(json.dumps(evidence(dict(_OUTCOMES)), indent=2) + "\n")


def evidence(outcomes: dict) -> dict:
    """The GPU results document for ``outcomes`` (feature → passed) on this machine's TensorRT and GPU."""
    import tensorrt

    from trtkit._device import device_info

    info = device_info()
    return {"tensorrt_version": tensorrt.__version__, "device": info.get("name", "GPU"),
            "compute_capability": info.get("compute_capability"), "features": dict(sorted(outcomes.items()))}
