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
if str(HERE) not in sys.path:  # surface_checks imports its sibling modules by name, as in driver.py
    sys.path.insert(0, str(HERE))
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


def _newest(major: str) -> str:
    prepared = [v for v in _versions() if v.startswith(major + ".") and surfaces.prepared(ROOT / v, v)]
    if not prepared:
        pytest.skip(f"No TensorRT {major}.x surface is prepared: run `python scripts/trt_surfaces.py`")
    return prepared[-1]


def _run_patched_driver(tmp_path: Path, version: str, old: str, new: str, check: str) -> dict:
    """Run ``check`` for ``version`` against a copy of trtkit where builder.py has ``old`` replaced by ``new``."""
    import shutil

    shutil.copytree(REPO / "trtkit", tmp_path / "trtkit", ignore=shutil.ignore_patterns("__pycache__"))
    builder = tmp_path / "trtkit" / "builder" / "builder.py"
    source = builder.read_text()
    assert old in source, f"builder.py no longer contains {old!r}; update this test's patch"
    builder.write_text(source.replace(old, new, 1))
    out = tmp_path / "results.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / version), str(tmp_path), str(REPO)]))
    proc = subprocess.run([sys.executable, str(HERE / "driver.py"), "--version", version, "--out", str(out),
                           "--checks", check], capture_output=True, text=True, env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())["checks"][check]


# The "done when": an API removed in 11, called outside the compat layer, fails the tier naming both.
REMOVED_API_PATCH = ("    if config.workspace_bytes:\n",
                     "    bconfig.set_flag(trt.BuilderFlag.FP16)\n    if config.workspace_bytes:\n")


def test_an_api_removed_in_11_fails_the_tier_naming_version_and_attribute(tmp_path):
    version = _newest("11")
    result = _run_patched_driver(tmp_path, version, *REMOVED_API_PATCH, check="build_fp32")
    assert not result["ok"]
    assert (f"TensorRT {version} has no attribute BuilderFlag.FP16 (used by trtkit.builder.builder.configure)"
            in result["error"]), result["error"]


def test_the_same_call_is_not_reported_where_the_api_exists(tmp_path):
    version = _newest("10")
    result = _run_patched_driver(tmp_path, version, *REMOVED_API_PATCH, check="build_fp32")
    assert "has no attribute" not in (result["error"] or ""), result["error"]


def test_a_version_without_a_wheel_is_refused_clearly(tmp_path):
    with pytest.raises(surfaces.SurfaceError,
                       match=rf"No wheel tensorrt-cu12-bindings==10\.99\.0 for Python {surfaces.python_tag()} "
                             r".*--available"):
        surfaces.download_wheel("10.99.0", tmp_path)
