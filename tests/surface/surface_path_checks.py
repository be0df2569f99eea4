"""Surface checks of whole code paths: builds, precision plans, the runner, inspection and the parser pre-flight.

Builds and runs use trtkit's fake backend imitating the version, with every TensorRT name checked against the real
module (a name the fake lacks is a gap that fails the check too); precision plans run on the real module.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from surface_base import Context, check, fail_on_gaps, raise_surface_problem, tiny_conv_model

# --- the builder's code paths on the fake backend, every name checked against the real module ----------------------


def _calibration(algorithm: str = "entropy", cache_path=None):
    import numpy as np

    from trtkit.builder.config import CalibrationSettings

    rng = np.random.default_rng(1)
    feeds = [{"x": rng.standard_normal((1, 3, 8, 8)).astype("float32")} for _ in range(4)]
    return CalibrationSettings(source=feeds, algorithm=algorithm, max_samples=4, batch_size=1,
                               cache_path=None if cache_path is None else str(cache_path))


def build_config(path: str, cache_path=None):
    """The BuildConfig of one build path (name as in :data:`BUILD_PATHS`, ``+mode`` adding precision constraints);
    INT8 calibration data is random."""
    import dataclasses

    from trtkit.builder.config import BuildConfig

    path, _, constraint = path.partition("+")
    if constraint:
        return dataclasses.replace(build_config(path, cache_path), precision_constraints=constraint)
    own = ("EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS")
    precision, _, mode = path.partition("_")
    if precision == "all-options":
        return BuildConfig(tactic_sources=own, workspace_bytes=1 << 24, optimization_level=2,
                           hardware_compatibility="AMPERE_PLUS", version_compatible=True, max_aux_streams=1)
    if precision in ("fp32", "fp16", "bf16"):
        return BuildConfig(precision=precision, fp16_mode=mode or "auto", tactic_sources=own)
    mode, _, algorithm = mode.partition("-")
    return BuildConfig(precision="int8", int8_mode=mode or "auto", tactic_sources=own,
                       calibration=_calibration(algorithm or "entropy", cache_path))


@dataclass(frozen=True)
class Refuse:
    """An allowed refusal: an UnsupportedError matching every regex (and naming the version, if asked)."""

    patterns: tuple
    names_version: bool = True


# Per build path and TensorRT major: the outcomes allowed. OK = it builds; a tuple of regexes = trtkit refuses it
# with an UnsupportedError naming this version and matching each regex (the versions that have it, what to use).
OK = "ok"
HAS_10 = r"\b10(\.x)?\b"
BUILD_PATHS = {
    "fp32": {8: [OK], 10: [OK], 11: [OK]},
    "all-options": {8: [OK], 10: [OK], 11: [OK]},
    "fp16": {8: [OK], 10: [OK], 11: [OK]},
    "fp16_flag": {8: [OK], 10: [OK], 11: [(HAS_10, "cast")]},
    "fp16_cast": {8: [OK, (r"\b(9\.1|10)",)], 10: [OK], 11: [OK]},
    "bf16": {8: [(r"\b(9\.0|10)",)], 10: [OK], 11: [OK, (HAS_10,)]},
    "int8": {8: [OK], 10: [OK], 11: [OK]},
    "int8_calibrator": {8: [OK], 10: [OK], 11: [(HAS_10, "qdq")]},
    "int8_calibrator-minmax": {8: [OK], 10: [OK], 11: [(HAS_10, "qdq")]},
    "int8_qdq": {8: [OK], 10: [OK], 11: [OK]},
    # precision constraints: layer precisions and PREFER/OBEY_PRECISION_CONSTRAINTS (flag paths only)
    "fp16_flag+prefer": {8: [OK], 10: [OK], 11: [(HAS_10, "cast")]},
    "int8_calibrator+obey": {8: [OK], 10: [OK], 11: [(HAS_10, "qdq")]},
}


def expected_plan(path: str, major: int) -> dict:
    """What a successful build must have decided: flags it must / must not set, strong typing, a calibrator."""
    path = path.partition("+")[0]  # constraints change layers, not the plan
    fp16, int8 = path.startswith("fp16"), path.startswith("int8")
    if path in ("fp16", "fp16_flag") and major < 11:
        return {"flags": {"FP16"}, "strongly_typed": False, "calibrator": False}
    if path == "fp16_cast" and major >= 10 or fp16 and major >= 11:
        return {"no_flags": {"FP16"}, "strongly_typed": True, "calibrator": False}
    if path == "bf16" and major == 10:
        return {"flags": {"BF16"}, "strongly_typed": False, "calibrator": False}
    if path.startswith("int8_calibrator") or path == "int8" and major < 11:
        return {"flags": {"INT8"}, "strongly_typed": False, "calibrator": True}
    if int8 and major >= 11:
        return {"no_flags": {"INT8"}, "strongly_typed": True, "calibrator": False}
    if path == "int8_qdq":
        return {"flags": {"INT8"} if major < 10 else set(), "calibrator": False}
    return {}


def check_plan(plan, want: dict, where: str) -> None:
    flags = set(plan.flags)
    assert want.get("flags", set()) <= flags, f"{where}: flags {sorted(flags)} lack {sorted(want['flags'])}"
    assert not (want.get("no_flags", set()) & flags), f"{where}: flags {sorted(flags)} must not hold {want['no_flags']}"
    if "strongly_typed" in want:
        assert plan.strongly_typed == want["strongly_typed"], f"{where}: strongly_typed is {plan.strongly_typed}"
    if "calibrator" in want:
        assert (plan.calibrator is not None) == want["calibrator"], f"{where}: calibrator {plan.calibrator!r}"


def _refusal_matches(exc, version: str, allowed) -> bool:
    from trtkit.errors import UnsupportedError

    refuse = allowed if isinstance(allowed, Refuse) else Refuse(tuple(allowed))
    text = str(exc)
    return (isinstance(exc, UnsupportedError) and (f"TensorRT {version}" in text or not refuse.names_version)
            and all(re.search(p, text) for p in refuse.patterns))


def _check_refusal(exc, log, allowed, path: str, verb: str, version: str) -> None:
    """``exc`` is a surface problem (raised as such) or one of the ``allowed`` refusals for this version."""
    raise_surface_problem(exc, log)
    refusals = [a for a in allowed if a != OK]
    assert refusals, f"{path} should {verb} on TensorRT {version}: {type(exc).__name__}: {exc}"
    assert any(_refusal_matches(exc, version, p) for p in refusals), (
        f"{path} on TensorRT {version}: expected an UnsupportedError naming this version and matching "
        f"{refusals}; got {type(exc).__name__}: {exc}")


def _capture_plans(plans: list):
    """Patch ``plan_precision`` (looked up at call time by the builder) to keep each plan it returns."""
    from trtkit.builder import precision

    original = precision.plan_precision

    def recording(*args, **kwargs):
        plan = original(*args, **kwargs)
        plans.append(plan)
        return plan

    precision.plan_precision = recording
    return lambda: setattr(precision, "plan_precision", original)


def run_build_path(ctx: Context, path: str) -> dict:
    """Build the tiny model on the checked fake backend with ``path``'s settings; assert the per-version outcome."""
    from trtkit.builder.builder import build_serialized

    trt, log = ctx.fake_surface()
    major = 8 if ctx.major < 10 else min(ctx.major, 11)
    allowed = BUILD_PATHS[path][major]
    plans: list = []
    restore = _capture_plans(plans)
    try:
        build_serialized(tiny_conv_model(), build_config(path), trt=trt)
    except Exception as exc:  # noqa: BLE001 - sorted out below
        _check_refusal(exc, log, allowed, path, "build", ctx.version)
        return {"outcome": f"refused: {exc}", "features": _path_features(path, False), "used": log.used()}
    finally:
        restore()
    fail_on_gaps(log, "then the build succeeded")
    assert OK in allowed, f"{path} should be refused on TensorRT {ctx.version} ({allowed}), but it built"
    plan = plans[-1]
    check_plan(plan, expected_plan(path, major), f"{path} on TensorRT {ctx.version}")
    supported = plan.strongly_typed if path == "fp16_cast" else True
    facts = {"flags": list(plan.flags), "strongly_typed": plan.strongly_typed,
             "calibrator": type(plan.calibrator).__name__ if plan.calibrator is not None else None}
    return {"outcome": "ok", "plan": facts, "features": _path_features(path, supported), "used": log.used(),
            "by_function": log.by_user()}


def _path_features(path: str, ok: bool) -> dict:
    if "+" in path:
        return {}  # the support table's rows come from the plain paths
    if path.startswith("int8_calibrator"):
        algorithm = path.split("-")[-1] if "-" in path else "entropy"
        return {f"calibrator_{algorithm}": ok, **({"int8_calibrator": ok} if algorithm == "entropy" else {})}
    names = {"fp32": "fp32", "fp16_flag": "fp16_flag", "fp16_cast": "fp16_cast", "bf16": "bf16", "int8_qdq": "int8_qdq"}
    return {names[path]: ok} if path in names else {}


def _register_per_path(prefix: str, runner, doc: str, paths) -> None:
    """One registered check per build-settings path: ``<prefix>_<path>`` calling ``runner(ctx, path)``."""
    for path in paths:
        def run(ctx, _path=path):
            return runner(ctx, _path)

        run.__name__ = f"{prefix}_{path.replace('-', '_').replace('+', '_')}"
        run.__doc__ = doc.format(path=path)
        check(run)


_register_per_path("build", run_build_path,
                   "build_serialized with the {path} settings on the fake backend, names checked on the real one.",
                   BUILD_PATHS)


# --- the runtime's code paths on the fake backend (fake CUDA), every name checked against the real module ---------


def run_runner(ctx: Context, cuda_graph: bool) -> dict:
    """Run the tiny model twice through TrtRunner on the checked fake backend; compare with ONNX's evaluator."""
    import numpy as np
    from onnx.reference import ReferenceEvaluator

    from tests.fakes.fake_cuda import FakeCudart
    from tests.fakes.fake_trt.runtime import serialize_fake_engine
    from trtkit.runtime.cuda import Cuda
    from trtkit.runtime.runner import TrtRunner

    trt, log = ctx.fake_surface()
    model = tiny_conv_model()
    io = [{"name": "x", "mode": "INPUT", "dtype": "float32", "shape": [1, 3, 8, 8]},
          {"name": "y", "mode": "OUTPUT", "dtype": "float32", "shape": [1, 4, 8, 8]}]
    engine = serialize_fake_engine(model.SerializeToString(), io, [], ctx.version)
    rt = FakeCudart()
    x = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype("float32")
    try:
        with TrtRunner(engine, cuda_graph=cuda_graph, check_manifest=False, trt=trt, cuda=Cuda(rt)) as runner:
            outputs = [runner.infer({"x": x})["y"] for _ in range(3)]
    except Exception as exc:  # noqa: BLE001 - a missing name wins over what it caused
        raise_surface_problem(exc, log)
        raise
    fail_on_gaps(log, "then the run succeeded")
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    for out in outputs:
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    launches = rt.calls["cudaGraphLaunch"]
    assert (launches >= 2) == cuda_graph, f"cudaGraphLaunch called {launches} times with cuda_graph={cuda_graph}"
    return {"graph_launches": launches, "used": log.used(), "by_function": log.by_user()}


@check
def runtime_infer(ctx: Context) -> dict:
    """TrtRunner: deserialize, context, shapes, addresses, execute_async_v3, all through real names."""
    return run_runner(ctx, cuda_graph=False)


@check
def runtime_cuda_graphs(ctx: Context) -> dict:
    """TrtRunner with cuda_graph=True captures once and replays (the TensorRT side of CUDA graphs)."""
    facts = run_runner(ctx, cuda_graph=True)
    return {**facts, "features": {"cuda_graphs": True}}


# --- precision planning against the real module (a calibrator subclasses the real TensorRT class) ---------------


def run_plan(ctx: Context, path: str) -> dict:
    """plan_precision on the real module for ``path``'s settings; same per-version expectations as the builds."""
    trt, log = ctx.surface()
    major = 8 if ctx.major < 10 else min(ctx.major, 11)
    allowed = BUILD_PATHS[path][major]
    with tempfile.TemporaryDirectory() as tmp:
        config = build_config(path, Path(tmp) / "calibration.cache")
        if config.calibration is not None:
            _calibrate_on_fake(ctx, config)
        return _plan_on_real(ctx, path, config, trt, log, allowed, major)


def _calibrate_on_fake(ctx: Context, config) -> None:
    """Explicit Q/DQ calibrates by running the model in TensorRT: do that on the fake (same version string), so
    the real module's plan reuses the cache (its provenance matches) instead of needing a GPU."""
    from trtkit import _version_compat as compat
    from trtkit.builder.builder import statistics_engine_builder
    from trtkit.builder.precision import plan_precision
    from trtkit.model import load_model

    fake, _ = ctx.fake_surface()
    try:
        plan_precision(fake, load_model(tiny_conv_model()), config, compat.capabilities(fake),
                       build_statistics_engine=statistics_engine_builder(config, fake))
    except Exception:  # noqa: BLE001 - the real module's run reports what matters
        pass
    ctx.logs.pop()  # the fake's log is not this check's evidence


def _plan_on_real(ctx: Context, path: str, config, trt, log, allowed, major: int) -> dict:
    from trtkit import _version_compat as compat
    from trtkit.builder.precision import plan_precision
    from trtkit.model import load_model

    try:
        plan = plan_precision(trt, load_model(tiny_conv_model()), config, compat.capabilities(trt))
    except Exception as exc:  # noqa: BLE001 - sorted out below
        _check_refusal(exc, log, allowed, path, "be planned", ctx.version)
        return {"outcome": f"refused: {exc}"}
    assert OK in allowed, f"{path} should be refused on TensorRT {ctx.version} ({allowed}), but it was planned"
    check_plan(plan, expected_plan(path, major), f"{path} on TensorRT {ctx.version}")
    if plan.calibrator is not None:
        assert isinstance(plan.calibrator, ctx.real.IInt8Calibrator), type(plan.calibrator).__mro__
    return {"outcome": "ok", "flags": list(plan.flags), "strongly_typed": plan.strongly_typed,
            "calibrator_bases": [c.__name__ for c in type(plan.calibrator).__mro__] if plan.calibrator else None}


_register_per_path("plan", run_plan, "plan_precision with the {path} settings against the real module.",
                   [p for p in BUILD_PATHS if p != "all-options"])


# --- inspection and the parser pre-flight on the fake backend, names checked against the real module ------------


@check
def opcheck_query(ctx: Context) -> dict:
    """`trtkit inspect --check`'s parser query: builder, network flags, parser, supports_model(_v2), operators."""
    from trtkit.builder.opcheck import query_parser

    trt, log = ctx.fake_surface()
    model = tiny_conv_model()
    try:
        answer = query_parser(trt, model.SerializeToString(), None, ["Conv", "Relu"])
    except Exception as exc:  # noqa: BLE001 - a missing name wins over what it caused
        raise_surface_problem(exc, log)
        raise
    fail_on_gaps(log, "then the query succeeded")
    assert answer["trt_version"] == ctx.version and answer["supported"] is True, answer
    return {"answer": answer}


@check
def inspect_engine(ctx: Context) -> dict:
    """`trtkit inspect model.engine`: I/O, profiles, inspector layers, device memory through real names."""
    from tests.fakes.fake_trt.runtime import serialize_fake_engine
    from trtkit.inspection import describe_engine
    from trtkit.log import make_trt_logger

    trt, log = ctx.fake_surface()
    model = tiny_conv_model()
    io = [{"name": "x", "mode": "INPUT", "dtype": "float32", "shape": [-1, 3, 8, 8]},
          {"name": "y", "mode": "OUTPUT", "dtype": "float32", "shape": [-1, 4, 8, 8]}]
    profile = {"x": [[1, 3, 8, 8], [2, 3, 8, 8], [4, 3, 8, 8]]}
    data = serialize_fake_engine(model.SerializeToString(), io, [profile], ctx.version, build_flags=())
    try:
        engine = trt.Runtime(make_trt_logger(trt)).deserialize_cuda_engine(data)
        info = describe_engine(engine, trt)
    except Exception as exc:  # noqa: BLE001 - a missing name wins over what it caused
        raise_surface_problem(exc, log)
        raise
    fail_on_gaps(log, "then the inspection succeeded")
    assert [t["name"] for t in info["io"]] == ["x", "y"] and info["profiles"][0]["x"]["max"] == [4, 3, 8, 8], info
    return {"layers": len(info["layers"]), "device_memory_bytes": info["device_memory_bytes"]}


@check
def bench_layer_profile(ctx: Context) -> dict:
    """`trtkit bench --layers`: IProfiler subclassed from the real class, and profile_layers' context calls
    (profiler, enqueue_emits_profile, report_to_profiler) on the fake backend through real names."""
    from tests.fakes.fake_cuda import FakeCudart
    from tests.fakes.fake_trt.runtime import serialize_fake_engine
    from trtkit.bench.layers import _collector, profile_layers
    from trtkit.runtime.cuda import Cuda

    real = _collector(ctx.real)  # the real binding's trampoline: a Python subclass it will call back
    real.report_layer_time("conv", 0.5)
    assert isinstance(real, ctx.real.IProfiler) and real.times == {"conv": 0.5}, real.times
    trt, log = ctx.fake_surface()
    model = tiny_conv_model()
    io = [{"name": "x", "mode": "INPUT", "dtype": "float32", "shape": [1, 3, 8, 8]},
          {"name": "y", "mode": "OUTPUT", "dtype": "float32", "shape": [1, 4, 8, 8]}]
    engine = serialize_fake_engine(model.SerializeToString(), io, [], ctx.version)
    try:
        profile = profile_layers(engine, runs=2, warmup=1, trt=trt, cuda=Cuda(FakeCudart()))
    except Exception as exc:  # noqa: BLE001 - a missing name wins over what it caused
        raise_surface_problem(exc, log)
        raise
    fail_on_gaps(log, "then the profile succeeded")
    assert [layer.name for layer in profile.layers], profile
    return {"layers": len(profile.layers), "used": log.used()}
