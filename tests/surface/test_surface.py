"""The ``surface`` tier: trtkit's version-dependent code run against real TensorRT 8.6 / 10.x / 11.x bindings.

Prepare the surfaces first (cached), then run the tier::

    python scripts/trt_surfaces.py            # the CI versions into .trt-surfaces/
    pytest -m surface

Each version runs in its own child process (``driver.py``; TensorRT's bindings cannot be unloaded) once per
session; its JSON results land in ``.trt-surfaces/results/<version>.json`` for ``scripts/support_matrix.py``.
A version whose surface is not prepared is skipped, saying how to prepare it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.surface

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


surfaces = _load("trt_surfaces", REPO / "scripts" / "trt_surfaces.py")
checks = _load("surface_checks", HERE / "surface_checks.py")
ROOT = Path(os.environ.get("TRTKIT_SURFACES", surfaces.DEFAULT_ROOT))


def _versions() -> list[str]:
    """The CI versions plus any other version prepared under the root."""
    found = [p.parent.name for p in ROOT.glob(f"*/{surfaces.MARKER}")]
    extra = sorted(set(found) - set(surfaces.CI_VERSIONS), key=lambda v: [int(x) for x in v.split(".") if x.isdigit()])
    return list(surfaces.CI_VERSIONS) + extra


_RESULTS: dict = {}


def results_for(version: str) -> dict:
    """Run the driver for ``version`` once per session and return its JSON."""
    if version in _RESULTS:
        return _RESULTS[version]
    if not surfaces.prepared(ROOT / version, version):
        pytest.skip(f"TensorRT {version}'s surface is not prepared: run `python scripts/trt_surfaces.py {version}`")
    out = ROOT / "results" / f"{version}.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / version), str(REPO)]))
    proc = subprocess.run(
        [sys.executable, str(HERE / "driver.py"), "--version", version, "--out", str(out)],
        capture_output=True, text=True, env=env, timeout=240,
    )
    if proc.returncode != 0:
        pytest.fail(f"The surface driver for TensorRT {version} crashed (rc {proc.returncode}):\n{proc.stderr[-3000:]}")
    _RESULTS[version] = json.loads(out.read_text())
    return _RESULTS[version]


@pytest.mark.parametrize("name", list(checks.CHECKS))
@pytest.mark.parametrize("version", _versions())
def test_surface(version: str, name: str) -> None:
    result = results_for(version)["checks"][name]
    if not result["ok"]:
        pytest.fail(f"TensorRT {version}, check '{name}': {result['error']}\n{result.get('traceback', '')}",
                    pytrace=False)
