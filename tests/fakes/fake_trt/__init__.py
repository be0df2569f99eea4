"""A fake ``tensorrt`` module for CPU tests, shaped like a given TensorRT version's real Python API.

``make_fake_trt("8.6.0")`` (or ``"10.8.0"``, ``"11.4.0"``) returns a module object with that version's enums
(members as in the real bindings), the builder classes (:mod:`.builder`) and the runtime classes (:mod:`.runtime`).
Contract with :mod:`.runtime` (the runtime side): it provides ``make_runtime_classes(trt) -> dict`` (``Runtime``,
``ICudaEngine``, ``IExecutionContext``, ``IEngineInspector`` ... bound to the fake module ``trt``) and
``serialize_fake_engine(onnx_bytes, io_specs, profiles, version, build_flags=()) -> bytes``, where ``io_specs`` is a
list of ``{"name", "mode": "INPUT"|"OUTPUT", "dtype": numpy dtype name, "shape": dims with -1 for dynamic}``,
``profiles`` a list of ``{input name: [min, opt, max]}`` and ``build_flags`` the builder flag names set (the fake
inspector reports layer precisions from them: FP16/INT8 flags → those precisions, else FP32).
``trt.calls`` counts the calls that cost time with the real TensorRT (:mod:`.trace`).
The ``surface`` test tier checks that every public name here exists in the real bindings of the same version.
"""

from __future__ import annotations

import types
from collections import Counter
from typing import Any

from tests.fakes.fake_trt import builder as _builder
from tests.fakes.fake_trt import enums as _enums
from tests.fakes.fake_trt import trace as _trace


def make_fake_trt(version: str = "8.6.0", *, fail_cuda_init: bool = False) -> types.ModuleType:
    """A fresh fake ``tensorrt`` module imitating ``version``.

    Args:
        version: the TensorRT version to imitate (8.6.x, 10.x or 11.x).
        fail_cuda_init: make ``Builder``/``Runtime`` creation fail as on a machine without a GPU.
    """
    from tests.fakes.fake_trt import runtime as _runtime

    trt: Any = types.ModuleType("tensorrt")
    trt.__version__ = version
    trt.fail_cuda_init = fail_cuda_init
    # Test-only names: the surface tier's parity check skips them (everything else must exist in the real module).
    trt.__fake_only__ = (
        "fail_cuda_init",
        "ICudaEngine.evaluate",
        "ICudaEngine.has_dynamic_shapes",
        "ICudaEngine.output_shapes",
        "ICudaEngine.profile_sharing",
        "plugin_inits",
        "calls",
    )
    trt.plugin_inits = []  # the namespaces init_libnvinfer_plugins was called with
    trt.calls = Counter()  # heavy calls (builders, runtimes, parses ...): trace.py
    _trace.record(trt, "import")

    def init_libnvinfer_plugins(logger, namespace):
        trt.plugin_inits.append(namespace)
        return True

    trt.init_libnvinfer_plugins = init_libnvinfer_plugins
    for name, enum_cls in _enums.common_enums(version).items():
        setattr(trt, name, enum_cls)
    trt.ILogger = _builder.ILogger
    trt.Logger = _builder.Logger
    trt.nptype = _runtime.nptype
    trt.ITimingCache = _builder.ITimingCache
    trt.IOptimizationProfile = _builder.IOptimizationProfile
    trt.INetworkDefinition = _builder.INetworkDefinition
    for name, cls in _builder.make_builder_classes(trt).items():
        setattr(trt, name, cls)
    for name, obj in _runtime.make_runtime_classes(trt).items():
        setattr(trt, name, obj)
    if int(version.split(".")[0]) < 11:  # calibrators were removed in 11
        for name, cls in _builder.make_calibrator_classes().items():
            setattr(trt, name, cls)
    return trt
