"""The runtime side of the fake ``tensorrt`` module: Runtime, ICudaEngine, IExecutionContext, IEngineInspector.

A fake engine is bytes: a magic tag, a JSON header (TensorRT version, I/O tensor specs, profiles, builder flags) and
the ONNX model. ``execute_async_v3`` queues, on the fake CUDA stream of :mod:`tests.fakes.fake_cuda`, a kernel that
reads the inputs from the bound addresses, runs the model with onnx's reference evaluator and writes the outputs to the
bound addresses. Like TensorRT it captures the addresses and shapes when enqueued (so a captured graph replays them),
checks that every shape and address was set, and refuses shapes outside the active profile. Shape-tensor inputs
(``"shape_tensor": true`` in their spec) are read from *host* memory at their bound address, as TensorRT does: when an
output's shape is asked and when the call is enqueued (their values then go into the model run), and values outside
the profile's are refused.

Per version, as in the real bindings: 8.6 has ``device_memory_size`` and contexts that cannot share a profile of an
engine with dynamic shapes (unless built with ``PROFILE_SHARING_0806``); 10.x adds
``ExecutionContextAllocationStrategy`` (and ``device_memory_size_v2`` from 10.1); 11.x drops ``device_memory_size`` and
``create_execution_context_without_device_memory``.
"""

from __future__ import annotations

import enum
import json
import struct
import weakref
from collections import Counter
from typing import Any

import numpy as np

from tests.fakes.fake_trt.trace import record

MAGIC = b"TRTKIT-FAKE-ENGINE\x00"
# TensorRT's own message for a file that is not an engine (8.6 wording).
BAD_MAGIC_MESSAGE = (
    "1: [stdArchiveReader.cpp::StdArchiveReader::32] Error Code 1: Serialization (Serialization "
    "assertion magicTagRead == kMAGIC_TAG failed.Magic tag does not match)"
)
FAKE_DEVICE_MEMORY = 1 << 20
_NP_TO_TRT = {
    "float32": "FLOAT",
    "float16": "HALF",
    "int8": "INT8",
    "int32": "INT32",
    "bool": "BOOL",
    "uint8": "UINT8",
    "int64": "INT64",
}


def serialize_fake_engine(
    onnx_bytes: bytes, io_specs: list, profiles: list, version: str, build_flags=(), values=None
) -> bytes:
    """Bytes of a fake engine that :class:`Runtime` can deserialize.

    Args:
        onnx_bytes: the serialized ONNX model the engine runs.
        io_specs: ``[{"name", "mode": "INPUT"|"OUTPUT", "dtype": numpy dtype name, "shape": dims (-1 dynamic)}]``.
        profiles: ``[{input name: [min, opt, max]}]`` (empty for a static model).
        version: the TensorRT version that "built" it (another version refuses to load it).
        build_flags: names of the builder flags set (the inspector reports precisions from them).
        values: per profile, ``{shape-tensor input name: [min, opt, max] values}`` (None: no shape-tensor inputs).
    """
    header = {
        "version": version,
        "io": io_specs,
        "profiles": [_plain_profile(p) for p in profiles],
        "build_flags": sorted(build_flags),
    }
    if values and any(values):
        header["shape_values"] = [{n: [list(map(int, v)) for v in vals] for n, vals in p.items()} for p in values]
    blob = json.dumps(header).encode()
    return MAGIC + struct.pack("<Q", len(blob)) + blob + bytes(onnx_bytes)


def _plain_profile(profile) -> dict:
    shapes = getattr(profile, "shapes", profile)
    out = {}
    for name, s in shapes.items():
        if hasattr(s, "min"):
            s = (s.min, s.opt, s.max)
        out[name] = [list(map(int, d)) for d in s]
    return out


def parse_fake_engine(data: bytes):
    """``(header, onnx_bytes)`` of fake engine bytes, or ``None`` when they are not a fake engine."""
    data = bytes(data)
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 8:
        return None
    (length,) = struct.unpack("<Q", data[len(MAGIC) : len(MAGIC) + 8])
    start = len(MAGIC) + 8
    try:
        header = json.loads(data[start : start + length].decode())
    except ValueError:
        return None
    onnx_bytes = data[start + length :]
    try:  # a truncated engine: TensorRT refuses it (returns None), as the fake does here
        from onnx import load_from_string

        load_from_string(onnx_bytes)
    except Exception:  # noqa: BLE001 - protobuf's DecodeError and friends
        return None
    return header, onnx_bytes


def make_runtime_classes(trt) -> dict:
    """Runtime-side classes bound to the fake module ``trt`` (its version decides which methods exist)."""
    major = int(trt.__version__.split(".")[0])
    classes = {
        "Runtime": _runtime_class(trt),
        "ICudaEngine": _engine_class(trt, major),
        "IExecutionContext": _FakeContext,
        "EngineInspector": _FakeInspector,
        "IProfiler": IProfiler,
    }
    if major >= 10:
        classes["ExecutionContextAllocationStrategy"] = enum.IntEnum(
            "ExecutionContextAllocationStrategy", {"STATIC": 0, "ON_PROFILE_CHANGE": 1, "USER_MANAGED": 2}
        )
    if major < 10:
        classes["PreviewFeature"] = enum.IntEnum(
            "PreviewFeature",
            {
                "FASTER_DYNAMIC_SHAPES_0805": 0,
                "DISABLE_EXTERNAL_TACTIC_SOURCES_FOR_CORE_0805": 1,
                "PROFILE_SHARING_0806": 2,
            },
        )
    return classes


def _runtime_class(trt):
    class Runtime:
        def __init__(self, logger):
            record(trt, "Runtime")
            if getattr(trt, "fail_cuda_init", False):
                raise TypeError("pybind11::init(): factory function returned nullptr")
            self.logger = logger
            self.engine_host_code_allowed = False

        def deserialize_cuda_engine(self, data):
            record(trt, "deserialize_cuda_engine")
            parsed = parse_fake_engine(bytes(data))
            if parsed is None:
                self.logger.log(_error_severity(trt), BAD_MAGIC_MESSAGE)
                return None
            header, onnx_bytes = parsed
            if header["version"] != trt.__version__:
                self.logger.log(
                    _error_severity(trt),
                    (
                        "1: [stdArchiveReader.cpp::StdArchiveReader::40] Error Code 1: Serialization (Serialization "
                        f"assertion stdVersionRead == serializationVersion failed.Version tag does not match. Note: "
                        f"Current Version: {trt.__version__}, Serialized Engine Version: {header['version']})"
                    ),
                )
                return None
            return trt.ICudaEngine(trt, header, onnx_bytes)

    return Runtime


def _error_severity(trt):
    severity = getattr(getattr(trt, "ILogger", None), "Severity", None)
    return severity.ERROR if severity is not None else "ERROR"


class _EngineBase:
    """What every version's fake ICudaEngine has."""

    def __init__(self, trt, header: dict, onnx_bytes: bytes):
        self._trt = trt
        self.header = header
        self.onnx_bytes = onnx_bytes
        self.io = {spec["name"]: spec for spec in header["io"]}
        self.profiles = header["profiles"]
        self.live_contexts: weakref.WeakSet = weakref.WeakSet()  # a context dropped by Python is gone, as in TensorRT
        self.fail_enqueue_in_capture = False  # tests: an engine whose enqueue cannot be captured
        self._evaluator: Any = None
        self._shape_cache: dict = {}
        self.name = "fake engine"

    # --- I/O description ------------------------------------------------------------------------------------------

    @property
    def num_io_tensors(self) -> int:
        return len(self.header["io"])

    @property
    def num_optimization_profiles(self) -> int:
        return max(len(self.profiles), 1)

    @property
    def num_layers(self) -> int:
        return len(self._model().graph.node)

    def get_tensor_name(self, index: int) -> str:
        return self.header["io"][index]["name"]

    def get_tensor_mode(self, name: str):
        spec = self.io.get(name)
        return self._trt.TensorIOMode[spec["mode"]] if spec else self._trt.TensorIOMode.NONE

    def get_tensor_shape(self, name: str) -> tuple:
        return tuple(self.io[name]["shape"])

    def get_tensor_dtype(self, name: str):
        return self._trt.DataType[_NP_TO_TRT[self.io[name]["dtype"]]]

    def get_tensor_profile_shape(self, name: str, profile_index: int) -> list:
        if self.io.get(name, {}).get("mode") != "INPUT":
            raise RuntimeError(f"get_tensor_profile_shape: '{name}' is not an input tensor")
        if not self.profiles:
            return [self.get_tensor_shape(name)] * 3
        return [tuple(s) for s in self.profiles[profile_index][name]]

    def is_shape_inference_io(self, name: str) -> bool:
        return bool(self.io.get(name, {}).get("shape_tensor"))

    def _profile_values(self, profile_index: int, name: str) -> list:
        if not self.is_shape_inference_io(name) or self.io[name]["mode"] != "INPUT":
            raise RuntimeError(f"'{name}' is not an input shape binding")
        return [list(v) for v in self.header["shape_values"][profile_index][name]]

    @property
    def _shape_tensors(self) -> list:
        return [n for n, spec in self.io.items() if spec.get("shape_tensor")]

    @property
    def _has_dynamic_shapes(self) -> bool:
        inputs = [spec for spec in self.header["io"] if spec["mode"] == "INPUT"]
        return any(-1 in spec["shape"] or spec.get("shape_tensor") for spec in inputs)

    # --- contexts, serialization, inspection ----------------------------------------------------------------------

    def _new_context(self):
        record(self._trt, "create_execution_context")
        context = _FakeContext(self)
        self.live_contexts.add(context)
        return context

    def serialize(self) -> bytes:
        return serialize_fake_engine(
            self.onnx_bytes,
            self.header["io"],
            self.profiles,
            self.header["version"],
            self.header.get("build_flags", ()),
            self.header.get("shape_values"),
        )

    def create_engine_inspector(self):
        record(self._trt, "create_engine_inspector")
        return _FakeInspector(self)

    # --- execution helpers used by the fake context ---------------------------------------------------------------

    def _model(self):
        import onnx

        return onnx.load_from_string(self.onnx_bytes)

    def _evaluate(self, feeds: dict) -> dict:
        from onnx.reference import ReferenceEvaluator

        if self._evaluator is None:
            import onnx

            model = self._model()
            self._output_names = [o.name for o in model.graph.output]
            self._model_dtypes = {
                v.name: onnx.helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type) for v in model.graph.input
            }
            self._evaluator = ReferenceEvaluator(_evaluable(model))
        # an engine whose I/O dtype differs from the model's (INT64 on 8.6) converts at its edge, as TensorRT does
        feeds = {
            n: np.asarray(v).astype(self._model_dtypes.get(n, np.asarray(v).dtype), copy=False)
            for n, v in feeds.items()
        }
        results = self._evaluator.run(None, feeds)
        return {n: np.asarray(r).astype(self.io[n]["dtype"], copy=False) for n, r in zip(self._output_names, results)}

    def _output_shapes(self, input_shapes: dict, values: dict | None = None) -> dict:
        """Output shapes at these input shapes and shape-tensor ``values`` (name -> tuple)."""
        values = values or {}
        key = tuple(sorted((n, tuple(s), values.get(n)) for n, s in input_shapes.items()))
        if key not in self._shape_cache:
            feeds = {
                n: np.array(values[n], self.io[n]["dtype"]).reshape(s)
                if n in values
                else np.zeros(s, dtype=self.io[n]["dtype"])
                for n, s in input_shapes.items()
            }
            self._shape_cache[key] = {n: a.shape for n, a in self._evaluate(feeds).items()}
        return self._shape_cache[key]


def _version(trt) -> tuple:
    return tuple(int(p) for p in trt.__version__.split(".")[:2])


def _engine_class(trt, major: int):
    attrs: dict = {}
    if major < 11:
        attrs["device_memory_size"] = property(lambda self: FAKE_DEVICE_MEMORY)

        def create_execution_context_without_device_memory(self):
            context = self._new_context()
            context.needs_device_memory = True
            return context

        attrs["create_execution_context_without_device_memory"] = create_execution_context_without_device_memory
    if _version(trt) >= (10, 1):
        attrs["device_memory_size_v2"] = property(lambda self: FAKE_DEVICE_MEMORY)
    if major >= 10:  # the bindings name the arguments (name, profile_index) but take the profile index first
        attrs["get_tensor_profile_values"] = lambda self, profile_index, name: self._profile_values(profile_index, name)
    else:
        attrs["get_profile_shape_input"] = lambda self, profile_index, name: self._profile_values(profile_index, name)
    if major >= 10:

        def create_execution_context(self, strategy=None):
            return self._new_context()

        attrs["create_execution_context"] = create_execution_context
    else:

        def create_execution_context_86(self):
            return self._new_context()

        attrs["create_execution_context"] = create_execution_context_86
    attrs["_profile_sharing"] = property(
        lambda self: major >= 10 or "PROFILE_SHARING_0806" in self.header.get("build_flags", ())
    )
    return type("ICudaEngine", (_EngineBase,), attrs)


class IProfiler:
    """Fake ``IProfiler``: a subclass overrides ``report_layer_time``."""

    def report_layer_time(self, layer_name: str, ms: float) -> None:
        raise NotImplementedError("IProfiler.report_layer_time must be overridden")


# the fake GPU time of each layer (one per ONNX node, named as the fake inspector names it): its position, in 1/1000 ms
FAKE_LAYER_MS = 0.001


class _FakeContext:
    """Fake ``IExecutionContext``. ``calls`` counts each method call (tests assert on the hot path's work).

    With a ``profiler`` set, each ``execute_async_v3`` is reported to it (layer ``i`` of the ONNX graph takes
    ``(i + 1) * FAKE_LAYER_MS``): at once with ``enqueue_emits_profile`` (the default), else at ``report_to_profiler``.
    """

    def __init__(self, engine):
        self.engine = engine
        self.profiler = None
        self.enqueue_emits_profile = True
        self._unreported = 0
        self.calls: Counter = Counter()
        self.shapes: dict = {}
        self.addresses: dict = {}
        self.needs_device_memory = False
        self.device_memory = None
        others = [c for c in engine.live_contexts if c.active_optimization_profile == 0]
        self.active_optimization_profile = (
            0 if (engine._profile_sharing or not engine._has_dynamic_shapes or not others) else -1
        )

    def _log_error(self, msg: str) -> None:
        self.engine._trt.last_runtime_error = msg

    def set_optimization_profile_async(self, profile_index: int, stream) -> bool:
        self.calls["set_optimization_profile_async"] += 1
        if not 0 <= profile_index < self.engine.num_optimization_profiles:
            return False
        taken = [
            c for c in self.engine.live_contexts if c is not self and c.active_optimization_profile == profile_index
        ]
        if taken and self.engine._has_dynamic_shapes and not self.engine._profile_sharing:
            self._log_error(f"Profile {profile_index} has been chosen by another IExecutionContext.")
            return False
        self.active_optimization_profile = profile_index
        self.shapes = {}
        return True

    def set_input_shape(self, name: str, shape) -> bool:
        self.calls["set_input_shape"] += 1
        spec = self.engine.io.get(name)
        if spec is None or spec["mode"] != "INPUT" or self.active_optimization_profile < 0:
            return False
        lo, _, hi = self.engine.get_tensor_profile_shape(name, self.active_optimization_profile)
        shape = tuple(int(d) for d in shape)
        if len(shape) != len(lo) or any(not a <= d <= b for a, d, b in zip(lo, shape, hi)):
            self._log_error(f"set_input_shape: {shape} outside profile for '{name}'")
            return False
        self.shapes[name] = shape
        return True

    def _input_shapes(self) -> dict | None:
        out = {}
        for name, spec in self.engine.io.items():
            if spec["mode"] != "INPUT":
                continue
            shape = self.shapes.get(name, tuple(spec["shape"]))
            if -1 in shape:
                return None
            out[name] = shape
        return out

    def get_tensor_shape(self, name: str) -> tuple:
        spec = self.engine.io[name]
        if spec["mode"] == "INPUT":
            return self.shapes.get(name, tuple(spec["shape"]))
        inputs = self._input_shapes()
        values = self._shape_values(inputs) if inputs is not None else None
        if inputs is None or values is None or self._values_refused(values):
            return tuple(spec["shape"])
        try:
            return tuple(self.engine._output_shapes(inputs, values)[name])
        except Exception as exc:  # noqa: BLE001 - values that make no valid shape: TensorRT logs and gives -1s
            self._log_error(f"get_tensor_shape: {exc}")
            return tuple(-1 for _ in spec["shape"])

    def _shape_values(self, inputs: dict) -> dict | None:
        """The shape-tensor inputs' values read from their (host) addresses now; None when one is unbound."""
        from tests.fakes.fake_cuda import view_of

        values = {}
        for name in self.engine._shape_tensors:
            if not self.addresses.get(name):
                return None
            view = view_of(self.addresses[name], inputs[name], self.engine.io[name]["dtype"])
            values[name] = tuple(int(v) for v in view.reshape(-1))
        return values

    def _values_refused(self, values: dict) -> str | None:
        """TensorRT's error for shape-tensor values outside the active profile's, or None."""
        for name, found in values.items():
            lo, _, hi = self.engine._profile_values(max(self.active_optimization_profile, 0), name)
            if len(found) != len(lo) or any(not a <= v <= b for a, v, b in zip(lo, found, hi)):
                return f"{name}: shape tensor values {list(found)} are outside the profile's [{lo}, {hi}]"
        return None

    def set_tensor_address(self, name: str, ptr: int) -> bool:
        self.calls["set_tensor_address"] += 1
        if name not in self.engine.io:
            return False
        self.addresses[name] = int(ptr)
        return True

    def get_tensor_address(self, name: str) -> int:
        return self.addresses.get(name, 0)

    @property
    def all_binding_shapes_specified(self) -> bool:
        return self._input_shapes() is not None

    def infer_shapes(self) -> list:
        return [] if self._input_shapes() is not None else [n for n, s in self.engine.io.items() if -1 in s["shape"]]

    def execute_async_v3(self, stream_handle) -> bool:
        from tests.fakes.fake_cuda import owner_of_stream

        self.calls["execute_async_v3"] += 1
        inputs = self._input_shapes()
        if inputs is None or set(self.addresses) != set(self.engine.io):
            self._log_error("execute_async_v3: not every input shape / tensor address was set")
            return False
        cuda = owner_of_stream(stream_handle)
        if self.engine.fail_enqueue_in_capture and cuda.is_capturing(stream_handle):
            return False
        shape_tensors = self.engine._shape_tensors
        if any(cuda.is_device(self.addresses[n]) for n in shape_tensors):
            self._log_error("execute_async_v3: a shape tensor input's address must be host memory")
            return False
        values = self._shape_values(inputs) or {}  # read on the host at enqueue, as TensorRT does
        refused = self._values_refused(values)
        if refused:
            self._log_error(f"execute_async_v3: {refused}")
            return False
        outputs = self.engine._output_shapes(inputs, values)
        addresses = dict(self.addresses)
        sizes = {
            n: int(np.prod(s)) * np.dtype(self.engine.io[n]["dtype"]).itemsize
            for n, s in {**inputs, **outputs}.items()
            if n not in values
        }
        if any(not cuda.device_range(addresses[n], max(sizes[n], 1)) for n in sizes):
            self._log_error("execute_async_v3: a tensor address is not device memory large enough for it")
            return False
        cuda.enqueue(stream_handle, lambda: self._kernel(inputs, outputs, addresses, values))
        if self.profiler is not None:
            self._unreported += 1
            if self.enqueue_emits_profile:
                self.report_to_profiler()
        return True

    def report_to_profiler(self) -> bool:
        self.calls["report_to_profiler"] += 1
        if self.profiler is None:
            return False
        nodes = self.engine._model().graph.node
        for _ in range(self._unreported):
            for i, node in enumerate(nodes):
                self.profiler.report_layer_time(node.name or node.op_type, (i + 1) * FAKE_LAYER_MS)
        self._unreported = 0
        return True

    def _kernel(self, inputs: dict, outputs: dict, addresses: dict, values: dict) -> None:
        from tests.fakes.fake_cuda import view_of

        io = self.engine.io
        feeds = {
            n: np.array(values[n], io[n]["dtype"]).reshape(s)
            if n in values
            else view_of(addresses[n], s, io[n]["dtype"]).copy()
            for n, s in inputs.items()
        }
        for name, value in self.engine._evaluate(feeds).items():
            view_of(addresses[name], outputs[name], io[name]["dtype"])[...] = value


class _FakeInspector:
    """Fake ``IEngineInspector``: one layer per ONNX node, precision from the builder flags. As TensorRT does, an
    engine with dynamic shapes gets its formats (hence precisions) only through an ``execution_context`` whose
    profile is active and whose every input shape is set; otherwise ``N/A due to dynamic shapes``."""

    def __init__(self, engine):
        self.engine = engine
        self.execution_context = None

    def _precision(self) -> str:
        flags = self.engine.header.get("build_flags", ())
        return "INT8" if "INT8" in flags else "FP16" if "FP16" in flags else "FP32"

    def _shapes_known(self) -> bool:
        if not self.engine._has_dynamic_shapes:
            return True
        context = self.execution_context  # read through TensorRT's own names: a surface proxy may stand in for it
        if context is None or context.active_optimization_profile < 0:
            return False
        inputs = [name for name, spec in self.engine.io.items() if spec["mode"] == "INPUT"]
        return all(-1 not in tuple(context.get_tensor_shape(name)) for name in inputs)

    def _layer(self, node) -> dict:
        fmt = {
            "FP32": "Row major linear FP32",
            "FP16": "Row major linear FP16 format",
            "INT8": "Row major linear Int8 format",
        }[self._precision()]
        if not self._shapes_known():
            fmt = "N/A due to dynamic shapes"
        return {
            "Name": node.name or node.op_type,
            "LayerType": node.op_type,
            "Inputs": [{"Name": i, "Format/Datatype": fmt} for i in node.input],
            "Outputs": [{"Name": o, "Format/Datatype": fmt} for o in node.output],
            "TacticName": "fake_tactic",
        }

    def get_layer_information(self, index: int, fmt) -> str:
        return json.dumps(self._layer(self.engine._model().graph.node[index]))

    def get_engine_information(self, fmt) -> str:
        layers = [self._layer(n) for n in self.engine._model().graph.node]
        names = [spec["name"] for spec in self.engine.header["io"]]
        major = int(self.engine._trt.__version__.split(".")[0])
        io_key = {"I/O Tensors": [{"Name": n} for n in names]} if major >= 11 else {"Bindings": names}
        return json.dumps({"Layers": layers, **io_key})


def nptype(data_type):
    """``trt.nptype``: the numpy type of a ``DataType`` member."""
    names = {v: k for k, v in _NP_TO_TRT.items()}
    return np.dtype(names[data_type.name]).type


def _evaluable(model):
    """``model`` as onnx's reference evaluator can run it: it implements QuantizeLinear/DequantizeLinear only from
    opset 19, while trtkit's rewrites take Q/DQ models down to the opset TensorRT 8.6's parser documents (17)."""
    ops = {n.op_type for n in model.graph.node}
    version = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if not ops & {"QuantizeLinear", "DequantizeLinear"} or version >= 19:
        return model
    from onnx import version_converter

    return version_converter.convert_version(model, 19)
