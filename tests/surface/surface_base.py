"""What the surface checks share: the registry, the per-version context, stand-ins and failure helpers.

Imports neither tensorrt nor trtkit at import time (the pytest side reads check names only).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

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

        from tests.fakes.fake_trt import make_fake_trt

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
    """The exception ``func`` raised, or None; a missing name or a bad call on the surface is re-raised (it fails
    the check)."""
    from surface_proxy import find_missing

    try:
        func(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - returned for the check to assert on
        missing = find_missing(exc)
        if missing is not None:
            raise missing from exc
        return exc
    return None


def unsupported(exc, *words: str) -> None:
    """Assert ``exc`` is trtkit's UnsupportedError and its message contains every word."""
    from trtkit.errors import UnsupportedError

    assert isinstance(exc, UnsupportedError), f"expected UnsupportedError, got {exc!r}"
    for word in words:
        assert word in str(exc), f"message lacks {word!r}: {exc}"


def tiny_conv_model():
    """x[1,3,8,8] -> Conv(4 filters, 3x3) -> Relu -> y: small, but has weights for casts and Q/DQ."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    weights = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype("float32"), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "tiny_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [weights])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def fail_on_gaps(log, outcome: str) -> None:
    """Fail for calls no real signature accepts (even if trtkit caught the TypeError), then for every name the fake
    lacked (``outcome``: what happened next, on the fake's answers)."""
    if log.call_errors:
        raise AssertionError("; ".join(dict.fromkeys(log.call_errors)) + f" ({outcome})")
    if log.fake_gaps:
        raise AssertionError(
            f"The fake backend imitating TensorRT {log.version} lacks names the real one has: "
            f"{'; '.join(dict.fromkeys(log.fake_gaps))}. Add them to tests/fakes/fake_trt "
            f"(trtkit went on with the fake's answers; {outcome})."
        )


def raise_surface_problem(exc, log) -> None:
    """Fail for a call the real signature refuses; then for gaps in the fake (they steer trtkit's feature
    detection, and so may cause what follows); then for a name the real module lacks."""
    from surface_proxy import CallMismatch, MissingOnSurface, find_missing

    missing = find_missing(exc)
    if isinstance(missing, CallMismatch):  # read off the real signature: no gap in the fake can cause it
        raise missing
    cause = missing if missing is not None else exc
    fail_on_gaps(log, f"then: {type(cause).__name__}: {cause}")
    if isinstance(missing, MissingOnSurface):
        raise missing
