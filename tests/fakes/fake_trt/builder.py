"""The build side of the fake ``tensorrt`` module: Builder, network, ONNX parser, builder config, timing cache.

It checks what the real TensorRT checks that matters to trtkit (parse errors with node detail, profiles covering
dynamic inputs, flags existing in the version) and produces a fake engine that the fake runtime can execute.
"""

from __future__ import annotations

import enum
import hashlib
import json
from typing import Any

from tests.fakes.fake_trt.trace import record

# ops the fake parser refuses; like the real one it also refuses any op outside the standard ONNX domains
UNSUPPORTED_OPS = frozenset({"NotARealOp", "FakeUnsupportedOp"})
_KNOWN_DOMAINS = ("", "ai.onnx", "trt")
# the real parser's importers of these ops assert the model's opset is at least 7 (the old `broadcast` attribute)
_BROADCAST_OPS = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Gemm", "PRelu", "Sum", "Max", "Min", "Mean"})
_PRE7_BROADCAST = (
    'Assertion failed: ctx->getOpsetVersion() >= 7 && "Pre-opset 7 broadcasting is unsupported in this version of '
    'the ONNX parser"'
)


class Severity(enum.IntEnum):
    INTERNAL_ERROR = 0
    ERROR = 1
    WARNING = 2
    INFO = 3
    VERBOSE = 4


class ILogger:
    Severity = Severity

    def __init__(self):
        pass

    def log(self, severity, msg):  # pragma: no cover - overridden
        pass


class Logger(ILogger):
    """``trt.Logger``: TensorRT's own logger (prints at ``min_severity`` and above)."""

    INTERNAL_ERROR, ERROR, WARNING, INFO, VERBOSE = (
        Severity.INTERNAL_ERROR,
        Severity.ERROR,
        Severity.WARNING,
        Severity.INFO,
        Severity.VERBOSE,
    )

    def __init__(self, min_severity=Severity.WARNING):
        super().__init__()
        self.min_severity = min_severity

    def log(self, severity, msg):
        pass


class ParserError:
    def __init__(self, code, desc: str, node: int, node_name: str, node_op: str):
        self._code, self._desc, self._node, self._node_name, self._node_op = code, desc, node, node_name, node_op

    def code(self):
        return self._code

    def desc(self):
        return self._desc

    def node(self):
        return self._node


class ParserError10(ParserError):
    """TensorRT 10+ parser errors also name the node and its operator."""

    def node_name(self):
        return self._node_name

    def node_operator(self):
        return self._node_op


# ONNX op → the TensorRT layer type the parser would make (others count as ELEMENTWISE here).
_LAYER_TYPES = {
    "Conv": "CONVOLUTION",
    "ConvTranspose": "DECONVOLUTION",
    "MatMul": "MATRIX_MULTIPLY",
    "Gemm": "MATRIX_MULTIPLY",
    "Relu": "ACTIVATION",
    "Sigmoid": "ACTIVATION",
    "MaxPool": "POOLING",
    "AveragePool": "POOLING",
    "GlobalAveragePool": "REDUCE",
    "Reshape": "SHUFFLE",
    "Flatten": "SHUFFLE",
    "QuantizeLinear": "QUANTIZE",
    "DequantizeLinear": "DEQUANTIZE",
    "Softmax": "SOFTMAX",
}


class ILayer:
    """One layer per ONNX node; ``precision`` records what the builder code asked for."""

    def __init__(self, node, layer_type):
        self.name = node.name or node.op_type
        self.type = layer_type
        self.precision = None


class INetworkDefinition:
    def __init__(self, flags: int, trt=None):
        self.flags = flags
        self.model: Any = None  # the onnx.ModelProto once parsed
        self._trt = trt
        self._layers: list | None = None

    def get_layer(self, index: int):
        if self._layers is None:
            types = self._trt.LayerType
            self._layers = [ILayer(n, types[_LAYER_TYPES.get(n.op_type, "ELEMENTWISE")]) for n in self.model.graph.node]
        return self._layers[index]

    @property
    def num_inputs(self):
        return len(_graph_inputs(self.model)) if self.model is not None else 0

    def get_input(self, index: int):
        value = _graph_inputs(self.model)[index]
        dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in value.type.tensor_type.shape.dim)
        return ITensor(value.name, dims, value.name in shape_tensor_names(self.model))

    @property
    def num_layers(self):
        return len(self.model.graph.node) if self.model is not None else 0


class ITensor:
    def __init__(self, name: str, shape: tuple, is_shape_tensor: bool = False):
        self.name, self.shape, self.is_shape_tensor = name, shape, is_shape_tensor


# ONNX op → the positions of its inputs whose values are a shape (the parser makes a graph input there a shape tensor)
_SHAPE_OPERANDS = {"Expand": (1,), "Reshape": (1,), "ConstantOfShape": (0,), "Tile": (1,), "Resize": (3,)}


def shape_tensor_names(model) -> set:
    """Graph inputs of rank 0/1 and integer type used as a shape operand directly or through Cast/Identity (the real
    parser also follows them through shape arithmetic)."""
    import onnx

    ints = {onnx.TensorProto.INT32, onnx.TensorProto.INT64}
    candidates = {
        v.name
        for v in _graph_inputs(model)
        if v.type.tensor_type.elem_type in ints and len(v.type.tensor_type.shape.dim) <= 1
    }
    used = {n.input[i] for n in model.graph.node for i in _SHAPE_OPERANDS.get(n.op_type, ()) if i < len(n.input)}
    for node in reversed(model.graph.node):  # through the Casts trtkit puts at INT64 inputs on 8.6
        if node.op_type in ("Cast", "Identity") and node.output[0] in used:
            used.add(node.input[0])
    return candidates & used


class ITimingCache:
    """A set of entries, one per layer the fake builder timed (``{"entries": [...]}`` serialized)."""

    def __init__(self, data: bytes):
        found = json.loads(data.decode()) if data else {"entries": []}
        if not isinstance(found, dict) or not isinstance(found.get("entries"), list):
            raise ValueError("not a timing cache")
        self.entries = set(found["entries"])

    def serialize(self):
        return json.dumps({"entries": sorted(self.entries)}).encode()

    def combine(self, input_cache, ignore_mismatch):
        self.entries |= input_cache.entries
        return True


class IOptimizationProfile:
    def __init__(self):
        self.shapes = {}
        self.values = {}  # shape-tensor input name -> (min, opt, max) values

    def set_shape(self, name, min, opt, max):
        self.shapes[name] = (tuple(min), tuple(opt), tuple(max))

    def get_shape(self, name):
        return list(self.shapes.get(name, ((), (), ())))

    def set_shape_input(self, input, min, opt, max):
        self.values[input] = (tuple(int(v) for v in min), tuple(int(v) for v in opt), tuple(int(v) for v in max))

    def get_shape_input(self, input):
        return [list(v) for v in self.values.get(input, ())]


def _graph_inputs(model) -> list:
    initializers = {t.name for t in model.graph.initializer}
    return [v for v in model.graph.input if v.name not in initializers]


def make_calibrator_classes() -> dict:
    """TensorRT 8.6/10's calibrator base classes (trtkit subclasses them; the fake builder never calls them)."""

    class IInt8Calibrator:
        def __init__(self):
            pass

    return {
        "IInt8Calibrator": IInt8Calibrator,
        "IInt8EntropyCalibrator2": type("IInt8EntropyCalibrator2", (IInt8Calibrator,), {}),
        "IInt8MinMaxCalibrator": type("IInt8MinMaxCalibrator", (IInt8Calibrator,), {}),
    }


def _version_at_least(trt, *wanted: int) -> bool:
    return tuple(int(p) for p in trt.__version__.split(".")[: len(wanted)]) >= wanted


def _parser_support_methods(trt) -> dict:
    """``supports_model_v2`` and the subgraph queries from 10.1 (the only form in 11), ``supports_model`` before."""

    def _subgraphs(parser, model):
        import onnx

        nodes = onnx.load_from_string(bytes(model)).graph.node
        ok = [i for i, n in enumerate(nodes) if n.op_type not in UNSUPPORTED_OPS]
        return [(ok, True)] if ok else []

    def supports_operator(self, op_type):
        return op_type not in UNSUPPORTED_OPS

    if not _version_at_least(trt, 10, 1):

        def supports_model(self, model, path=None):
            record(trt, "supports_model")
            subgraphs = _subgraphs(self, model)
            return all(s for _, s in subgraphs), subgraphs

        return {"supports_model": supports_model, "supports_operator": supports_operator}

    def supports_model_v2(self, model, path=None):
        record(trt, "supports_model")
        self._subgraphs = _subgraphs(self, model)
        return all(s for _, s in self._subgraphs)

    return {
        "supports_model_v2": supports_model_v2,
        "supports_operator": supports_operator,
        "num_subgraphs": property(lambda self: len(getattr(self, "_subgraphs", []))),
        "get_subgraph_nodes": lambda self, index: list(self._subgraphs[index][0]),
        "is_subgraph_supported": lambda self, index: self._subgraphs[index][1],
    }


def make_builder_classes(trt) -> dict:
    """Builder-side classes bound to the fake module ``trt`` (so they see that version's enums)."""
    error_cls = ParserError10 if trt.__version__.split(".")[0] != "8" else ParserError

    class OnnxParser:
        def __init__(self, network, logger):
            self.network, self.logger, self.errors = network, logger, []

        @property
        def num_errors(self):
            return len(self.errors)

        def get_error(self, index):
            return self.errors[index]

        def clear_errors(self):
            self.errors = []

        def parse(self, model, path=None):
            import onnx

            record(trt, "parse")
            try:
                proto = onnx.load_from_string(bytes(model))
            except Exception as exc:  # noqa: BLE001 - the real parser reports, never raises
                self.errors.append(error_cls(trt.ErrorCode.MODEL_DESERIALIZE_FAILED, str(exc), -1, "", ""))
                return False
            opset = max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), default=0)
            refused = _io_type_refused(proto)
            if refused:
                self.errors.append(error_cls(trt.ErrorCode.UNSUPPORTED_GRAPH, refused, -1, "", ""))
                return False
            for i, node in enumerate(proto.graph.node):
                self.logger.log(Severity.VERBOSE, f"Parsing node: {node.name} [{node.op_type}]")
                if opset < 7 and node.op_type in _BROADCAST_OPS and node.domain in ("", "ai.onnx"):
                    code = trt.ErrorCode.UNSUPPORTED_NODE
                    self.errors.append(error_cls(code, _PRE7_BROADCAST, i, node.name, node.op_type))
                    return False  # the real parser stops at a failed assertion
                if node.op_type in UNSUPPORTED_OPS or node.domain not in _KNOWN_DOMAINS:
                    self.errors.append(
                        error_cls(
                            trt.ErrorCode.UNSUPPORTED_NODE,
                            f"No importer registered for op: {node.op_type}",
                            i,
                            node.name,
                            node.op_type,
                        )
                    )
            if self.errors:
                return False
            self.network.model = proto
            return True

        def parse_from_file(self, path):
            with open(path, "rb") as f:
                return self.parse(f.read(), path)

    class IBuilderConfig:
        def __init__(self):
            self.flags = set()
            self.pool_limits = {}
            self.builder_optimization_level = 3
            self.profiling_verbosity = trt.ProfilingVerbosity.LAYER_NAMES_ONLY
            self.tactic_sources = sum(1 << int(s) for s in trt.TacticSource)
            self.profiles = []
            self.timing_cache = None
            self.max_aux_streams = -1
            self.hardware_compatibility_level = trt.HardwareCompatibilityLevel.NONE
            if hasattr(trt, "IInt8Calibrator"):
                self.int8_calibrator = None

        def set_flag(self, flag):
            self.flags.add(trt.BuilderFlag(flag))

        def clear_flag(self, flag):
            self.flags.discard(trt.BuilderFlag(flag))

        def get_flag(self, flag):
            return trt.BuilderFlag(flag) in self.flags

        def set_memory_pool_limit(self, pool, size):
            self.pool_limits[trt.MemoryPoolType(pool)] = int(size)

        def set_tactic_sources(self, mask):
            if mask >> len(trt.TacticSource):
                return False
            self.tactic_sources = mask
            return True

        def add_optimization_profile(self, profile):
            self.profiles.append(profile)
            return len(self.profiles) - 1

        def create_timing_cache(self, data):
            try:
                return ITimingCache(bytes(data))
            except ValueError:
                return None

        def set_timing_cache(self, cache, ignore_mismatch):
            self.timing_cache = cache
            return True

        def set_calibration_profile(self, profile):
            self.calibration_profile = profile
            return True

    class Builder:
        def __init__(self, logger):
            record(trt, "Builder")
            self.logger = logger
            if trt.fail_cuda_init:
                raise TypeError("pybind11::init(): factory function returned nullptr")

        platform_has_fast_fp16 = True
        platform_has_fast_int8 = True

        def create_network(self, flags=0):
            return INetworkDefinition(flags, trt)

        def create_builder_config(self):
            return IBuilderConfig()

        def create_optimization_profile(self):
            return IOptimizationProfile()

        def build_serialized_network(self, network, config):
            return _build(trt, self.logger, network, config)

    for name, method in _parser_support_methods(trt).items():
        setattr(OnnxParser, name, method)
    classes = {"OnnxParser": OnnxParser, "IBuilderConfig": IBuilderConfig, "Builder": Builder}
    if trt.__version__.split(".")[0] == "11":
        del Builder.platform_has_fast_fp16, Builder.platform_has_fast_int8
        del IBuilderConfig.set_calibration_profile
    return classes


def _io_type_refused(model) -> str | None:
    """What the parser says of a graph input/output whose type no TensorRT has (INT16, UINT16, UINT32, UINT64), or
    of an INT8 one in a network without Q/DQ (``None``: every I/O type is one TensorRT takes)."""
    import onnx

    qdq = any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph.node)
    refused = {"INT16", "UINT16", "UINT32", "UINT64"} | (set() if qdq else {"INT8"})
    for value in [*_graph_inputs(model), *model.graph.output]:
        name = onnx.TensorProto.DataType.Name(value.type.tensor_type.elem_type)
        if name in refused:
            return f"Unsupported ONNX data type for network input/output '{value.name}': {name}"
    return None


def _build(trt, logger, network, config):
    """Check the network like TensorRT would, then serialize a fake engine for the fake runtime."""
    from tests.fakes.fake_trt.runtime import serialize_fake_engine

    model = network.model
    if model is None:
        logger.log(Severity.ERROR, "Network must have at least one output")
        return None
    inputs = _graph_inputs(model)
    shape_tensors = shape_tensor_names(model)
    dynamic = [v.name for v in inputs if any(not d.dim_value for d in v.type.tensor_type.shape.dim)]
    if (dynamic or shape_tensors) and not config.profiles:
        logger.log(
            Severity.ERROR,
            f"Network has dynamic or shape inputs, but no optimization profile has been defined. (inputs {dynamic})",
        )
        return None
    inconsistent = _inconsistent_dim_names(inputs, config.profiles)
    if inconsistent:
        logger.log(Severity.ERROR, f"{inconsistent}: Input dimensions with this name are inconsistent")
        return None
    unset = _unset_shape_values(shape_tensors, config.profiles)
    if unset:
        logger.log(Severity.ERROR, unset)
        return None
    int64 = "INT64" in trt.DataType.__members__
    _log_tactic_selection(logger, model)
    if config.timing_cache is not None:  # TensorRT's builder adds an entry per layer it times
        config.timing_cache.entries |= _timing_keys(model)
    io_specs = [_spec(v, "INPUT", int64, v.name in shape_tensors) for v in inputs]
    io_specs += [_spec(v, "OUTPUT", int64) for v in model.graph.output]
    profiles = [{name: [list(s) for s in shapes] for name, shapes in p.shapes.items()} for p in config.profiles]
    values = [{name: [list(v) for v in vals] for name, vals in p.values.items()} for p in config.profiles]
    flags = sorted(f.name for f in config.flags)
    onnx_bytes = model.SerializeToString()
    return serialize_fake_engine(onnx_bytes, io_specs, profiles, trt.__version__, build_flags=flags, values=values)


def _timing_keys(model) -> set:
    """One key per layer: its node and the dims of its weights (like layers of two models share an entry)."""
    dims = {i.name: list(i.dims) for i in model.graph.initializer}
    return {
        hashlib.sha256((n.SerializeToString().hex() + repr([dims.get(i) for i in n.input])).encode()).hexdigest()[:16]
        for n in model.graph.node
    }


def _unset_shape_values(shape_tensors: set, profiles: list) -> str | None:
    """TensorRT's complaint about a shape-tensor input whose values a profile does not set (or sets wrongly)."""
    for index, profile in enumerate(profiles):
        for name in sorted(shape_tensors):
            if name in profile.shapes and name not in profile.values:
                return f"{name}: shape tensor input given dimensions instead of values in optimization profile {index}"
            if name not in profile.values:
                return f"Optimization profile {index}: values of shape input tensor {name} are not set"
    return None


def _log_tactic_selection(logger, model) -> None:
    """The builder's VERBOSE lines that trtkit's progress counts, in TensorRT 8.6's wording."""
    nodes = [n.name or f"node_of_{n.output[0]}" for n in model.graph.node]
    logger.log(Severity.VERBOSE, f"After concat removal: {len(nodes)} layers")
    for name in nodes:
        logger.log(Severity.VERBOSE, f"=============== Computing costs for {name}")
        logger.log(Severity.VERBOSE, f"--------------- Timing Runner: {name} (CaskConvolution)")
        logger.log(Severity.VERBOSE, "Fastest Tactic: 0x0000000000000000 Time: 0.01")
    logger.log(Severity.VERBOSE, "Formats and tactics selection completed in 0.01 seconds.")


def _inconsistent_dim_names(inputs, profiles) -> str | None:
    """TensorRT treats input dimensions sharing a symbolic name as equal: the first name a profile contradicts."""
    for profile in profiles:
        for which in range(3):  # min, opt, max
            seen: dict = {}
            for value in inputs:
                shape = profile.shapes.get(value.name)
                if shape is None:
                    continue
                for dim, size in zip(value.type.tensor_type.shape.dim, shape[which]):
                    if dim.dim_param and seen.setdefault(dim.dim_param, size) != size:
                        return dim.dim_param
    return None


def _spec(value, mode: str, int64_io: bool = True, shape_tensor: bool = False) -> dict:
    import onnx

    dims = [d.dim_value if d.dim_value else -1 for d in value.type.tensor_type.shape.dim]
    dtype = onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type).name
    if dtype == "int64" and not int64_io:  # 8.6's parser casts INT64 graph inputs/outputs down to INT32
        dtype = "int32"
    if dtype == "float64":  # every parser makes DOUBLE graph inputs/outputs FLOAT (TensorRT has no FP64 tensors)
        dtype = "float32"
    spec = {"name": value.name, "mode": mode, "dtype": dtype, "shape": dims}
    if shape_tensor:
        spec["shape_tensor"] = True
    return spec
