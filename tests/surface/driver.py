"""Run the surface checks against one TensorRT version and write the results as JSON.

Run in a child process (TensorRT's bindings cannot be unloaded, so one process per version) with the version's
prepared surface first on ``PYTHONPATH``::

    PYTHONPATH=.trt-surfaces/10.8.0.43:. python tests/surface/driver.py --version 10.8.0.43 --out results.json

The JSON: ``{"version", "tensorrt_version", "python", "checks": {name: {"ok", "error", "facts"}}, "features"}``,
where ``features`` merges the ``features`` facts of the checks that passed (what ``scripts/support_matrix.py``
renders).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from surface_checks import CHECKS, Context  # noqa: E402


def run_check(func, ctx: Context) -> dict:
    started = time.perf_counter()
    ctx.logs.clear()
    try:
        facts = func(ctx) or {}
    except Exception as exc:  # noqa: BLE001 - every failure is reported, the next check still runs
        detail = str(exc) if isinstance(exc, AssertionError) and str(exc) else f"{type(exc).__name__}: {exc}"
        tail = traceback.format_exception(type(exc), exc, exc.__traceback__)[-4:]
        return {"ok": False, "error": detail, "traceback": "".join(tail), "seconds": _since(started)}
    swallowed = [e for log in ctx.logs for e in log.call_errors]
    if swallowed:  # trtkit caught the TypeError, but real TensorRT would have refused the call all the same
        return {"ok": False, "error": "; ".join(dict.fromkeys(swallowed)), "seconds": _since(started)}
    return {"ok": True, "error": None, "facts": facts, "api": api_names(ctx.logs), "seconds": _since(started)}


def api_names(logs) -> dict:
    """TensorRT names the check's code touched that exist (``used``) and that it probed but are absent."""
    used = sorted({name for log in logs for name in log.used()})
    missing = sorted({name for log in logs for name in log.probed_missing()})
    return {"used": used, "absent_probed": missing}


def _since(started: float) -> float:
    return round(time.perf_counter() - started, 4)


def merged_features(results: dict) -> dict:
    """``features`` facts of passing checks, and which check proved each."""
    features = {}
    for name, result in results.items():
        if result["ok"]:
            for feature, value in result["facts"].get("features", {}).items():
                features[feature] = {"value": value, "check": name}
    return features


def api_union(results: dict) -> dict:
    """Every TensorRT name the passing checks used, and those they probed and found absent (guarded uses)."""
    passing = [r["api"] for r in results.values() if r["ok"]]
    return {key: sorted({n for api in passing for n in api[key]}) for key in ("used", "absent_probed")}


def install_fake_cuda() -> None:
    """Make ``cuda.bindings.runtime`` trtkit's fake CUDA: there is no driver here, and the runtime and Q/DQ
    calibration paths must still run (their TensorRT side is what this tier checks)."""
    import types

    from tests.fakes.fake_cuda import FakeCudart

    rt = FakeCudart()
    sys.modules["cuda.bindings.runtime"] = rt
    bindings = sys.modules.get("cuda.bindings")
    if bindings is None:
        bindings = sys.modules.setdefault("cuda.bindings", types.ModuleType("cuda.bindings"))
    bindings.runtime = rt


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", required=True, help="the TensorRT version whose surface is on PYTHONPATH")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--checks", help="comma-separated check names (default: all)")
    args = parser.parse_args(argv)
    import tensorrt

    if tensorrt.__version__ != args.version:
        print(f"PYTHONPATH gives TensorRT {tensorrt.__version__}, not {args.version}", file=sys.stderr)
        return 2
    install_fake_cuda()
    names = args.checks.split(",") if args.checks else list(CHECKS)
    ctx = Context(real=tensorrt, version=args.version)
    results = {name: run_check(CHECKS[name], ctx) for name in names}
    report = {"version": args.version, "tensorrt_version": tensorrt.__version__,
              "python": platform.python_version(), "checks": results, "features": merged_features(results),
              "api": api_union(results)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, default=repr) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
