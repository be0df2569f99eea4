"""The checks the ``surface`` tier runs against one TensorRT version's real Python bindings.

Each check runs a trtkit code path against :class:`surface_proxy.Surface` (the real module, or the fake backend
with every name checked against the real module) and returns facts; an exception or a failed assertion fails it.
``features`` in the facts feed ``docs/support-matrix.md`` (``scripts/support_matrix.py``).

This module imports neither tensorrt nor trtkit at import time: the pytest side reads :data:`CHECKS` for names only;
``driver.py`` runs them in a child process with one version's surface on ``sys.path``.
"""

from __future__ import annotations

import inspect
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

CHECKS: dict = {}


def check(func):
    """Register a check under its function name."""
    CHECKS[func.__name__] = func
    return func


@dataclass
class Context:
    """What a check needs: the real module of one version and ways to wrap it or a fake of it."""

    real: object
    version: str
    logs: list = field(default_factory=list)

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    def at_least(self, *version: int) -> bool:
        return tuple(int(p) for p in re.findall(r"\d+", self.version)[: len(version)]) >= version

    def surface(self):
        """The real module, every name trtkit touches checked and logged."""
        from surface_proxy import make_surface

        return self._logged(make_surface(self.real, self.real, self.version))

    def fake_surface(self):
        """trtkit's fake backend imitating this version, with every name checked against the real module."""
        from surface_proxy import make_surface

        from trtkit.testing.fake_trt import make_fake_trt

        return self._logged(make_surface(make_fake_trt(self.version), self.real, self.version))

    def _logged(self, surface_and_log):
        self.logs.append(surface_and_log[1])
        return surface_and_log

    def stand_in(self, cls_name: str, log, **attrs):
        """A :class:`Recorder` posing as an instance of the real ``cls_name`` (names checked against it)."""
        from surface_proxy import InstanceProxy

        return InstanceProxy(Recorder(**attrs), getattr(self.real, cls_name), cls_name, log)


class Recorder:
    """Stands in for a TensorRT object that cannot be created on a CPU: records calls and assignments."""

    def __init__(self, **attrs):
        object.__setattr__(self, "calls", [])
        object.__setattr__(self, "assigned", {})
        for name, value in attrs.items():
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)

        def method(*args, **kwargs):
            self.calls.append((name, args))
            return True

        return method

    def __setattr__(self, name, value):
        self.assigned[name] = value


def raises(func, *args, **kwargs) -> Exception | None:
    """The exception ``func`` raised, or None; a missing name on the surface is re-raised (it fails the check)."""
    from surface_proxy import find_missing

    try:
        func(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - returned for the check to assert on
        missing = find_missing(exc)
        if missing is not None:
            raise missing
        return exc
    return None


def unsupported(exc, *words: str) -> None:
    """Assert ``exc`` is trtkit's UnsupportedError and its message contains every word."""
    from trtkit.errors import UnsupportedError

    assert isinstance(exc, UnsupportedError), f"expected UnsupportedError, got {exc!r}"
    for word in words:
        assert word in str(exc), f"message lacks {word!r}: {exc}"


# --- compat layer against the real module --------------------------------------------------------------------------


@check
def capabilities(ctx: Context) -> dict:
    """capabilities() detects what each version has (expectations from trt-api-facts.md)."""
    from trtkit import _version_compat as compat

    trt, log = ctx.surface()
    caps = compat.capabilities(trt)
    assert caps.version[: 2] == tuple(int(p) for p in ctx.version.split(".")[:2]), caps.version
    expect = {
        "fp16_flag": ctx.major < 11, "int8_flag": ctx.major < 11, "bf16_flag": ctx.major == 10,
        "strongly_typed": ctx.major >= 10, "always_strongly_typed": ctx.major >= 11,
        "has_calibrators": ctx.major < 11, "has_platform_fast_precision": ctx.major < 11,
        "has_device_memory_v2": ctx.at_least(10, 1), "has_supports_model_v2": ctx.at_least(10, 1),
        "has_execution_context_strategy": ctx.major >= 10,
    }
    got = {name: getattr(caps, name) for name in expect}
    wrong = {name: got[name] for name in expect if got[name] != expect[name]}
    assert not wrong, f"capabilities() wrong for TensorRT {ctx.version}: {wrong}"
    return {"capabilities": got, "used": log.used()}


@check
def network_flags(ctx: Context) -> dict:
    """EXPLICIT_BATCH on 8.6 only; STRONGLY_TYPED from 10 (9.1); refused with a version hint before that."""
    from trtkit import _version_compat as compat

    trt, log = ctx.surface()
    flags = compat.network_flags(trt)
    members = ctx.real.NetworkDefinitionCreationFlag.__members__
    expected = 1 << int(members["EXPLICIT_BATCH"]) if ctx.major < 10 else 0
    assert flags == expected, f"network_flags() = {flags}, expected {expected}"
    error = raises(compat.network_flags, trt, strongly_typed=True)
    if ctx.major < 10:
        unsupported(error, f"TensorRT {ctx.version}", "9.1")
        typed = False
    else:
        assert error is None, error
        typed = compat.network_flags(trt, strongly_typed=True)
        assert typed == 1 << int(members["STRONGLY_TYPED"]), typed
        typed = True
    return {"plain": flags, "features": {"strongly_typed": typed}, "used": log.used()}


@check
def tactic_sources(ctx: Context) -> dict:
    """Masks from names with the version's values; cuBLAS refused on 11 with the version and the valid names."""
    from trtkit import _version_compat as compat

    trt, log = ctx.surface()
    own = compat.tactic_source_mask(trt, compat.TRT_OWN_TACTIC_SOURCES)
    members = ctx.real.TacticSource.__members__
    assert own == sum(1 << int(members[n]) for n in compat.TRT_OWN_TACTIC_SOURCES), own
    assert compat.tactic_source_mask(trt, ["jit-convolutions"]) == 1 << int(members["JIT_CONVOLUTIONS"])
    error = raises(compat.tactic_source_mask, trt, ["CUBLAS"])
    if ctx.major >= 11:
        unsupported(error, "'CUBLAS'", f"TensorRT {ctx.version}", "EDGE_MASK_CONVOLUTIONS, JIT_CONVOLUTIONS")
    else:
        assert error is None, error
    return {"own_mask": own, "cublas": error is None, "used": log.used()}


FLAG_WHERE = {"FP16": "8.6 to 10.x", "INT8": "8.6 to 10.x", "BF16": "9.0 to 10.x"}


@check
def builder_flags(ctx: Context) -> dict:
    """set_builder_flag sets real members on 8.6/10 and names the versions that have a removed flag."""
    from trtkit import _version_compat as compat

    trt, log = ctx.surface()
    expect = {"FP16": ctx.major < 11, "INT8": ctx.major < 11, "BF16": ctx.major == 10, "TF32": True,
              "VERSION_COMPATIBLE": True}
    found = {}
    for name, present in expect.items():
        config = ctx.stand_in("IBuilderConfig", log)
        error = raises(compat.set_builder_flag, trt, config, name)
        found[name] = error is None
        if present:
            assert error is None, f"{name}: {error}"
            calls = object.__getattribute__(config, "_target").calls
            assert calls == [("set_flag", (getattr(ctx.real.BuilderFlag, name),))], calls
        else:
            unsupported(error, f"BuilderFlag.{name}", f"TensorRT {ctx.version}", FLAG_WHERE[name])
    return {"flags": found, "used": log.used()}


@check
def config_setters(ctx: Context) -> dict:
    """Workspace, profiling verbosity and hardware compatibility go to real IBuilderConfig members."""
    from trtkit import _version_compat as compat

    trt, log = ctx.surface()
    config = ctx.stand_in("IBuilderConfig", log)
    compat.set_workspace(trt, config, 1 << 20)
    compat.set_profiling_verbosity(trt, config, "DETAILED")
    compat.set_hardware_compatibility(trt, config, "ampere-plus")
    error = raises(compat.set_hardware_compatibility, trt, config, "VOLTA_PLUS")
    unsupported(error, "'VOLTA_PLUS'", "AMPERE_PLUS")
    recorder = object.__getattribute__(config, "_target")
    assert recorder.calls == [("set_memory_pool_limit", (ctx.real.MemoryPoolType.WORKSPACE, 1 << 20))]
    assert recorder.assigned == {
        "profiling_verbosity": ctx.real.ProfilingVerbosity.DETAILED,
        "hardware_compatibility_level": ctx.real.HardwareCompatibilityLevel.AMPERE_PLUS,
    }, recorder.assigned
    return {"used": log.used()}


class _FakeParserError:
    def code(self):
        return type("ErrorCode", (), {"name": "UNSUPPORTED_NODE"})()

    def desc(self):
        return "No importer registered for op: Foo"

    def node(self):
        return 3

    def node_name(self):
        return "foo_3"

    def node_operator(self):
        return "Foo"


@check
def parser_errors(ctx: Context) -> dict:
    """Parser errors name the node and its operator where the version reports them (10+), the index on 8.6."""
    from trtkit import _version_compat as compat

    trt, log = ctx.surface()
    parser = ctx.stand_in("OnnxParser", log, num_errors=1, get_error=lambda i: _FakeParserError())
    issues = compat.parser_errors(parser)
    assert len(issues) == 1, issues
    text = str(issues[0])
    if ctx.major >= 10:
        assert text == "node 'foo_3' (Foo): No importer registered for op: Foo [UNSUPPORTED_NODE]", text
    else:
        assert text == "node #3: No importer registered for op: Foo [UNSUPPORTED_NODE]", text
    return {"issue": text, "used": log.used(), "probed_missing": log.probed_missing()}


@check
def device_memory(ctx: Context) -> dict:
    """device_memory_size_v2 from 10.1, device_memory_size before (gone in 11)."""
    from trtkit import _version_compat as compat

    trt, log = ctx.surface()
    engine = ctx.stand_in("ICudaEngine", log, device_memory_size=111, device_memory_size_v2=222)
    got = compat.device_memory_size(engine)
    assert got == (222 if ctx.at_least(10, 1) else 111), got
    return {"call": "device_memory_size_v2" if got == 222 else "device_memory_size", "used": log.used()}


@check
def parser_support_queries(ctx: Context) -> dict:
    """supports_model_v2 + subgraph queries from 10.1 (only form in 11), supports_model before; supports_operator."""
    from trtkit import _version_compat as compat

    trt, log = ctx.surface()
    calls = []
    parser = ctx.stand_in(
        "OnnxParser", log, num_subgraphs=1,
        supports_model_v2=lambda *a: calls.append("supports_model_v2") or True,
        get_subgraph_nodes=lambda k: [0, 1], is_subgraph_supported=lambda k: True,
        supports_model=lambda *a: calls.append("supports_model") or (True, [([0, 1], True)]),
        supports_operator=lambda op: op == "Conv")
    assert compat.parser_supports_model(parser, b"onnx") == (True, [([0, 1], True)])
    assert calls == ["supports_model_v2" if ctx.at_least(10, 1) else "supports_model"], calls
    assert compat.parser_supports_operator(parser, "Conv") is True
    return {"call": calls[0]}


@check
def execution_contexts(ctx: Context) -> dict:
    """Contexts own their memory (10+ passes ExecutionContextAllocationStrategy.STATIC); profile sharing 10+."""
    from trtkit import _version_compat as compat

    trt, log = ctx.surface()
    engine = ctx.stand_in("ICudaEngine", log, create_execution_context=lambda *args: args)
    args = compat.create_execution_context(trt, engine)
    if ctx.major >= 10:
        assert args == (ctx.real.ExecutionContextAllocationStrategy.STATIC,), args
    else:
        assert args == (), args
    shared = compat.contexts_share_profiles(trt)
    assert shared is (ctx.major >= 10), shared
    return {"strategy_arg": bool(args), "contexts_share_profiles": shared}


@check
def int8_calibrator_attach(ctx: Context) -> dict:
    """set_int8_calibrator sets the real config property (< 11) and names where calibrators exist on 11."""
    from trtkit import _version_compat as compat

    trt, log = ctx.surface()
    config = ctx.stand_in("IBuilderConfig", log)
    calibrator, profile = object(), object()
    error = raises(compat.set_int8_calibrator, trt, config, calibrator, profile)
    if ctx.major >= 11:
        unsupported(error, f"TensorRT {ctx.version}", "8.6 to 10.x", "qdq")
        return {"attached": False}
    assert error is None, error
    recorder = object.__getattribute__(config, "_target")
    assert recorder.assigned == {"int8_calibrator": calibrator}, recorder.assigned
    assert recorder.calls == [("set_calibration_profile", (profile,))], recorder.calls
    return {"attached": True}


@check
def runtime_and_builder_queries(ctx: Context) -> dict:
    """platform_has_fast_* (None on 11) and engine_host_code_allowed resolve to real members."""
    from trtkit import _version_compat as compat

    trt, log = ctx.surface()
    builder = ctx.stand_in("Builder", log, platform_has_fast_fp16=True, platform_has_fast_int8=True)
    fast = compat.platform_has_fast(builder, "fp16")
    assert fast is (None if ctx.major >= 11 else True), fast
    runtime = ctx.stand_in("Runtime", log)
    compat.allow_host_code(runtime, True)
    assert object.__getattribute__(runtime, "_target").assigned == {"engine_host_code_allowed": True}
    return {"platform_has_fast_fp16": fast, "used": log.used()}


@check
def logger(ctx: Context) -> dict:
    """trtkit's logger subclasses the real ILogger and maps the real severities."""
    from trtkit.log import make_trt_logger

    trt, log = ctx.surface()
    seen = []
    trt_logger = make_trt_logger(trt, min_severity="INFO", sink=lambda s, m: seen.append((s, m)))
    assert isinstance(trt_logger, ctx.real.ILogger), type(trt_logger).__mro__
    trt_logger.log(ctx.real.ILogger.Severity.WARNING, "careful")
    trt_logger.log(ctx.real.ILogger.Severity.VERBOSE, "noise")
    assert seen == [("WARNING", "careful")], seen
    return {"used": log.used()}


@check
def inspector_formats(ctx: Context) -> dict:
    """The inspector's JSON format enum exists; both I/O layouts (8.6/10 "Bindings", 11 "I/O Tensors") parse."""
    from trtkit import _version_compat as compat

    trt, log = ctx.surface()
    assert trt.LayerInformationFormat.JSON is not None
    assert hasattr(trt.ICudaEngine, "create_engine_inspector") and hasattr(trt.EngineInspector,
                                                                          "get_engine_information")
    old = '{"Layers": [{"Name": "conv", "Outputs": [{"Format/Datatype": "Half"}]}], "Bindings": ["x", "y"]}'
    new = '{"Layers": ["conv"], "I/O Tensors": [{"Name": "x"}, {"Name": "y"}]}'
    assert compat.inspector_io_names(old) == ["x", "y"] == compat.inspector_io_names(new)
    assert compat.inspector_layers(old)[0].precision == "FP16"
    return {"used": log.used()}


# --- the fake backend presents only real names ---------------------------------------------------------------------


def _class_names(cls) -> list[str]:
    """Public names a fake class defines itself (enum members for enums), not those of object/int/Enum."""
    import enum

    if isinstance(cls, enum.EnumMeta):
        return list(cls.__members__)
    names = set()
    for klass in cls.__mro__:
        if klass.__module__.startswith("trtkit"):
            names.update(n for n in vars(klass) if not n.startswith("_"))
    return sorted(names)


def fake_extras(fake, real, prefix: str = "", depth: int = 0, fake_only=frozenset()) -> list[str]:
    """Names the fake exposes (module attributes, class members, nested classes) that ``real`` lacks, and
    members that are a property on one side and a method on the other.

    The fake module's ``__fake_only__`` lists test-only names to skip (``"fail_cuda_init"``, ``"ICudaEngine.evaluate"``).
    """
    skip = set(getattr(fake, "__fake_only__", ())) if depth == 0 else fake_only
    names = [n for n in dir(fake) if not n.startswith("_")] if depth == 0 else _class_names(fake)
    extras = []
    for name in names:
        if prefix + name in skip:
            continue
        if not hasattr(real, name):
            extras.append(prefix + name)
            continue
        value = inspect.getattr_static(fake, name) if depth else getattr(fake, name)
        real_value = inspect.getattr_static(real, name) if depth else getattr(real, name)
        if depth and _kind(value) and _kind(real_value) and _kind(value) != _kind(real_value):
            extras.append(f"{prefix}{name} (a {_kind(real_value)} in TensorRT, a {_kind(value)} in the fake)")
        if isinstance(value, type) and depth < 2:
            extras += fake_extras(value, getattr(real, name), f"{prefix}{name}.", depth + 1, skip)
    return extras


def _kind(attr) -> str | None:
    if isinstance(attr, property):
        return "property"
    if inspect.isfunction(attr) or type(attr).__name__ == "instancemethod":
        return "method"
    return None


@check
def fake_matches_real(ctx: Context) -> dict:
    """Every public name of make_fake_trt(version) (enums, members, classes, methods) exists in the real module."""
    from trtkit.testing.fake_trt import make_fake_trt

    fake = make_fake_trt(ctx.version)
    extras = fake_extras(fake, ctx.real)
    assert not extras, (
        f"The fake backend imitating TensorRT {ctx.version} has names the real one lacks: {', '.join(extras)} "
        "(fix trtkit/testing/fake_trt, or list test-only module attributes in its __fake_only__)"
    )
    return {"checked": sorted(n for n in dir(fake) if not n.startswith("_"))}


# --- the builder's code paths on the fake backend, every name checked against the real module ----------------------


def tiny_conv_model():
    """x[1,3,8,8] -> Conv(4 filters, 3x3) -> Relu -> y: small, but has weights for casts and Q/DQ."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype("float32"), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "tiny_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [weights])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _calibration(algorithm: str = "entropy", cache_path=None):
    import numpy as np

    from trtkit.build.config import CalibrationSettings

    rng = np.random.default_rng(1)
    feeds = [{"x": rng.standard_normal((1, 3, 8, 8)).astype("float32")} for _ in range(4)]
    return CalibrationSettings(source=feeds, algorithm=algorithm, max_samples=4, batch_size=1,
                               cache_path=None if cache_path is None else str(cache_path))


def build_config(path: str, cache_path=None):
    """The BuildConfig of one build path (name as in :data:`BUILD_PATHS`); INT8 calibration data is random."""
    from trtkit.build.config import BuildConfig

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
# TensorRT has no native percentile calibrator: trtkit may refuse it anywhere, pointing to Q/DQ.
NO_NATIVE = Refuse(("qdq",), names_version=False)
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
    "int8_calibrator-percentile": {8: [OK, NO_NATIVE], 10: [OK, NO_NATIVE], 11: [(HAS_10, "qdq"), NO_NATIVE]},
    "int8_qdq": {8: [OK], 10: [OK], 11: [OK]},
}


def expected_plan(path: str, major: int) -> dict:
    """What a successful build must have decided: flags it must / must not set, strong typing, a calibrator."""
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


def _capture_plans(plans: list):
    """Patch ``plan_precision`` (looked up at call time by the builder) to keep each plan it returns."""
    from trtkit.build import precision

    original = precision.plan_precision

    def recording(*args, **kwargs):
        plan = original(*args, **kwargs)
        plans.append(plan)
        return plan

    precision.plan_precision = recording
    return lambda: setattr(precision, "plan_precision", original)


def run_build_path(ctx: Context, path: str) -> dict:
    """Build the tiny model on the checked fake backend with ``path``'s settings; assert the per-version outcome."""
    from trtkit.build.builder import build_serialized

    trt, log = ctx.fake_surface()
    major = 8 if ctx.major < 10 else min(ctx.major, 11)
    allowed = BUILD_PATHS[path][major]
    plans: list = []
    restore = _capture_plans(plans)
    try:
        build_serialized(tiny_conv_model(), build_config(path), trt=trt)
    except Exception as exc:  # noqa: BLE001 - sorted out below
        _raise_surface_problem(exc, log)
        refusals = [a for a in allowed if a != OK]
        assert refusals, f"{path} should build on TensorRT {ctx.version}: {type(exc).__name__}: {exc}"
        assert any(_refusal_matches(exc, ctx.version, p) for p in refusals), (
            f"{path} on TensorRT {ctx.version}: expected an UnsupportedError naming this version and matching "
            f"{refusals}; got {type(exc).__name__}: {exc}")
        return {"outcome": f"refused: {exc}", "features": _path_features(path, False), "used": log.used()}
    finally:
        restore()
    _fail_on_gaps(log, "then the build succeeded")
    assert OK in allowed, f"{path} should be refused on TensorRT {ctx.version} ({allowed}), but it built"
    plan = plans[-1]
    check_plan(plan, expected_plan(path, major), f"{path} on TensorRT {ctx.version}")
    supported = plan.strongly_typed if path == "fp16_cast" else True
    facts = {"flags": list(plan.flags), "strongly_typed": plan.strongly_typed,
             "calibrator": type(plan.calibrator).__name__ if plan.calibrator is not None else None}
    return {"outcome": "ok", "plan": facts, "features": _path_features(path, supported), "used": log.used(),
            "by_function": log.by_user()}


def _fail_on_gaps(log, outcome: str) -> None:
    if log.fake_gaps:
        raise AssertionError(
            f"The fake backend imitating TensorRT {log.version} lacks names the real one has: "
            f"{'; '.join(dict.fromkeys(log.fake_gaps))}. Add them to trtkit/testing/fake_trt "
            f"(trtkit went on with the fake's answers; {outcome})."
        )


def _path_features(path: str, ok: bool) -> dict:
    if path.startswith("int8_calibrator"):
        algorithm = path.split("-")[-1] if "-" in path else "entropy"
        return {f"calibrator_{algorithm}": ok, **({"int8_calibrator": ok} if algorithm == "entropy" else {})}
    names = {"fp32": "fp32", "fp16_flag": "fp16_flag", "fp16_cast": "fp16_cast", "bf16": "bf16", "int8_qdq": "int8_qdq"}
    return {names[path]: ok} if path in names else {}


def _register_build_paths() -> None:
    for path in BUILD_PATHS:
        def run(ctx, _path=path):
            return run_build_path(ctx, _path)

        run.__name__ = f"build_{path.replace('-', '_')}"
        run.__doc__ = f"build_serialized with the {path} settings on the fake backend, names checked on the real one."
        check(run)


_register_build_paths()


# --- the runtime's code paths on the fake backend (fake CUDA), every name checked against the real module ---------


def run_runner(ctx: Context, cuda_graph: bool) -> dict:
    """Run the tiny model twice through TrtRunner on the checked fake backend; compare with ONNX's evaluator."""
    import numpy as np
    from onnx.reference import ReferenceEvaluator

    from trtkit.runtime.cuda import Cuda
    from trtkit.runtime.runner import TrtRunner
    from trtkit.testing.fake_cuda import FakeCudart
    from trtkit.testing.fake_trt.runtime import serialize_fake_engine

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
        _raise_surface_problem(exc, log)
        raise
    _fail_on_gaps(log, "then the run succeeded")
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    for out in outputs:
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    launches = rt.calls["cudaGraphLaunch"]
    assert (launches >= 2) == cuda_graph, f"cudaGraphLaunch called {launches} times with cuda_graph={cuda_graph}"
    return {"graph_launches": launches, "used": log.used(), "by_function": log.by_user()}


def _raise_surface_problem(exc, log) -> None:
    """Fail for gaps in the fake first (they steer trtkit's feature detection), then for a name the real lacks."""
    from surface_proxy import MissingOnSurface, find_missing

    missing = find_missing(exc)
    cause = missing if missing is not None else exc
    _fail_on_gaps(log, f"then: {type(cause).__name__}: {cause}")
    if isinstance(missing, MissingOnSurface):
        raise missing


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
    from trtkit.build.onnx_model import load_model
    from trtkit.build.precision import plan_precision

    fake, _ = ctx.fake_surface()
    try:
        plan_precision(fake, load_model(tiny_conv_model()), config, compat.capabilities(fake))
    except Exception:  # noqa: BLE001 - the real module's run reports what matters
        pass
    ctx.logs.pop()  # the fake's log is not this check's evidence


def _plan_on_real(ctx: Context, path: str, config, trt, log, allowed, major: int) -> dict:
    from trtkit import _version_compat as compat
    from trtkit.build.onnx_model import load_model
    from trtkit.build.precision import plan_precision

    try:
        plan = plan_precision(trt, load_model(tiny_conv_model()), config, compat.capabilities(trt))
    except Exception as exc:  # noqa: BLE001 - sorted out below
        _raise_surface_problem(exc, log)
        refusals = [a for a in allowed if a != OK]
        assert refusals, f"{path} should be planned on TensorRT {ctx.version}: {type(exc).__name__}: {exc}"
        assert any(_refusal_matches(exc, ctx.version, p) for p in refusals), (
            f"{path} on TensorRT {ctx.version}: expected an UnsupportedError naming this version and matching "
            f"{refusals}; got {type(exc).__name__}: {exc}")
        return {"outcome": f"refused: {exc}"}
    assert OK in allowed, f"{path} should be refused on TensorRT {ctx.version} ({allowed}), but it was planned"
    check_plan(plan, expected_plan(path, major), f"{path} on TensorRT {ctx.version}")
    if plan.calibrator is not None:
        assert isinstance(plan.calibrator, ctx.real.IInt8Calibrator), type(plan.calibrator).__mro__
    return {"outcome": "ok", "flags": list(plan.flags), "strongly_typed": plan.strongly_typed,
            "calibrator_bases": [c.__name__ for c in type(plan.calibrator).__mro__] if plan.calibrator else None}


def _register_plans() -> None:
    for path in BUILD_PATHS:
        if path == "all-options":
            continue

        def run(ctx, _path=path):
            return run_plan(ctx, _path)

        run.__name__ = f"plan_{path.replace('-', '_')}"
        run.__doc__ = f"plan_precision with the {path} settings against the real module."
        check(run)


_register_plans()


# --- inspection and the parser pre-flight on the fake backend, names checked against the real module ------------


@check
def opcheck_query(ctx: Context) -> dict:
    """`trtkit inspect --check`'s parser query: builder, network flags, parser, supports_model(_v2), operators."""
    from trtkit.build.opcheck import query_parser

    trt, log = ctx.fake_surface()
    model = tiny_conv_model()
    try:
        answer = query_parser(trt, model.SerializeToString(), None, ["Conv", "Relu"])
    except Exception as exc:  # noqa: BLE001 - a missing name wins over what it caused
        _raise_surface_problem(exc, log)
        raise
    _fail_on_gaps(log, "then the query succeeded")
    assert answer["trt_version"] == ctx.version and answer["supported"] is True, answer
    return {"answer": answer}


@check
def inspect_engine(ctx: Context) -> dict:
    """`trtkit inspect model.engine`: I/O, profiles, inspector layers, device memory through real names."""
    from trtkit.inspection import describe_engine
    from trtkit.log import make_trt_logger
    from trtkit.testing.fake_trt.runtime import serialize_fake_engine

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
        _raise_surface_problem(exc, log)
        raise
    _fail_on_gaps(log, "then the inspection succeeded")
    assert [t["name"] for t in info["io"]] == ["x", "y"] and info["profiles"][0]["x"]["max"] == [4, 3, 8, 8], info
    return {"layers": len(info["layers"]), "device_memory_bytes": info["device_memory_bytes"]}
