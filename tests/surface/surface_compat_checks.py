"""Surface checks of the compat layer against the real module, and of the fake backend's names.

trtkit's version-dependent functions run on the real bindings (wrapped by :mod:`surface_proxy`); TensorRT objects
that cannot exist without a GPU are :class:`surface_base.Recorder` stand-ins checked against the real class.
"""

from __future__ import annotations

import inspect

from surface_base import Context, check, raises, unsupported

# --- compat layer against the real module --------------------------------------------------------------------------


@check
def capabilities(ctx: Context) -> dict:
    """capabilities() detects what each version has (expectations from trt-api-facts.md)."""
    from trtkit import _version_compat as compat

    trt, log = ctx.surface()
    caps = compat.capabilities(trt)
    assert caps.version[: 2] == tuple(int(p) for p in ctx.version.split(".")[:2]), caps.version
    expect = {
        "fp16_flag": ctx.major < 11, "int8_flag": ctx.major < 11, "strongly_typed": ctx.major >= 10,
        "has_calibrators": ctx.major < 11,
    }
    got = {name: getattr(caps, name) for name in expect}
    wrong = {name: got[name] for name in expect if got[name] != expect[name]}
    assert not wrong, f"capabilities() wrong for TensorRT {ctx.version}: {wrong}"
    return {"capabilities": got, "used": log.used()}


@check
def int64_io(ctx: Context) -> dict:
    """INT64 engine I/O (DataType.INT64) from 10, not on 8.6: the INT64 rewrite runs exactly where it is needed."""
    from trtkit import _version_compat as compat
    from trtkit.builder.rewrites import ParserTarget

    trt, log = ctx.surface()
    assert compat.has_int64_io(trt) == (ctx.major >= 10), compat.has_int64_io(trt)
    assert ParserTarget.from_trt(trt).int64_io == (ctx.major >= 10)
    return {"int64_io": compat.has_int64_io(trt), "used": log.used()}


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
    own_sources = ("EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS")
    own = compat.tactic_source_mask(trt, own_sources)
    members = ctx.real.TacticSource.__members__
    assert own == sum(1 << int(members[n]) for n in own_sources), own
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
    """The inspector's JSON format enum exists; a layer's precision is read from its output format."""
    from trtkit import _version_compat as compat

    trt, log = ctx.surface()
    assert trt.LayerInformationFormat.JSON is not None
    assert hasattr(trt.ICudaEngine, "create_engine_inspector") and hasattr(trt.EngineInspector,
                                                                          "get_engine_information")
    old = '{"Layers": [{"Name": "conv", "Outputs": [{"Format/Datatype": "Half"}]}], "Bindings": ["x", "y"]}'
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

    The fake module's ``__fake_only__`` lists test-only names to skip (``"fail_cuda_init"``,
    ``"ICudaEngine.evaluate"``).
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
    from tests.fakes.fake_trt import make_fake_trt

    fake = make_fake_trt(ctx.version)
    extras = fake_extras(fake, ctx.real)
    assert not extras, (
        f"The fake backend imitating TensorRT {ctx.version} has names the real one lacks: {', '.join(extras)} "
        "(fix tests/fakes/fake_trt, or list test-only module attributes in its __fake_only__)"
    )
    return {"checked": sorted(n for n in dir(fake) if not n.startswith("_"))}


@check
def shape_tensor_io(ctx: Context) -> dict:
    """Shape-tensor inputs: ITensor.is_shape_tensor and IOptimizationProfile.set_shape_input in every version; their
    profile values from get_tensor_profile_values (10+, profile index first) or get_profile_shape_input (8.6 only)."""
    from trtkit import _version_compat as compat
    from trtkit.builder.profiles import parse_shapes

    trt, log = ctx.surface()
    calls = []
    engine = ctx.stand_in(
        "ICudaEngine", log,
        get_tensor_profile_values=lambda *a: calls.append(("get_tensor_profile_values", a)) or [[1, 2], [2, 2], [3, 4]],
        get_profile_shape_input=lambda *a: calls.append(("get_profile_shape_input", a)) or [[1, 2], [2, 2], [3, 4]])
    assert compat.profile_shape_values(engine, "shape", 0) == ((1, 2), (2, 2), (3, 4))
    wanted = "get_tensor_profile_values" if ctx.major >= 10 else "get_profile_shape_input"
    assert calls == [(wanted, (0, "shape"))], calls
    inputs = [ctx.stand_in("ITensor", log, name="x", is_shape_tensor=False),
              ctx.stand_in("ITensor", log, name="shape", is_shape_tensor=True)]
    network = ctx.stand_in("INetworkDefinition", log, num_inputs=2, get_input=lambda i: inputs[i])
    assert compat.shape_tensor_inputs(network) == ["shape"]
    profile = ctx.stand_in("IOptimizationProfile", log)
    builder = ctx.stand_in("Builder", log, create_optimization_profile=lambda: profile)
    parse_shapes("x:1x4,2x4,4x4 shape:1x2,2x2,3x4").to_trt(builder, ["shape"])
    recorded = object.__getattribute__(profile, "_target").calls
    assert recorded == [("set_shape", ("x", (1, 4), (2, 4), (4, 4))),
                        ("set_shape_input", ("shape", (1, 2), (2, 2), (3, 4)))], recorded
    return {"profile_values": wanted, "used": log.used()}
