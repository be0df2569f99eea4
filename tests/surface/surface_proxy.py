"""A ``tensorrt`` stand-in that checks every attribute trtkit touches against one version's real API surface.

:class:`Surface` wraps a *target* module (the real bindings, or trtkit's fake backend imitating that version) and
consults the *real* module for every name: a name the real TensorRT lacks raises :class:`MissingOnSurface` (an
``AttributeError``, so ``hasattr`` feature detection keeps working) with the message
``TensorRT 11.4.0.106 has no attribute BuilderFlag.FP16 (used by trtkit.builder.builder._configure)``.

Objects the target returns are wrapped too, with the real class they stand for taken from the real method's pybind11
signature (``create_builder_config(...) -> tensorrt_bindings.tensorrt.IBuilderConfig``), so attribute access on
configs, networks, parsers and engines is checked without a live TensorRT. Every access is recorded in an
:class:`AccessLog`.
"""

from __future__ import annotations

import inspect
import re
import sys
from dataclasses import dataclass, field

_RETURN = re.compile(r"->\s*(?:typing\.Optional\[)?"
                     r"(?:tensorrt(?:_bindings)?\.tensorrt\.|nvinfer1::|nvonnxparser::)(\w+)")


class MissingOnSurface(AttributeError):
    """trtkit touched a name that this TensorRT version does not have."""


class CallMismatch(TypeError):
    """trtkit called a TensorRT function with arguments no overload of that version accepts."""


class FakeIncomplete(AttributeError):
    """The fake backend lacks a name the real TensorRT has.

    An AttributeError so that a ``hasattr`` probe goes on (with the fake's answer); every gap is also kept in
    :attr:`AccessLog.fake_gaps` and fails the check at its end, so a probe cannot hide one.
    """


@dataclass
class Access:
    owner: str
    name: str
    present: bool
    user: str

    @property
    def path(self) -> str:
        return f"{self.owner}.{self.name}" if self.owner else self.name


@dataclass
class AccessLog:
    """Every attribute of the surface that code touched."""

    version: str
    module: object = None
    accesses: list = field(default_factory=list)
    unchecked: set = field(default_factory=set)
    fake_gaps: list = field(default_factory=list)
    call_errors: list = field(default_factory=list)

    def record(self, owner: str, name: str, present: bool) -> Access:
        access = Access(owner, name, present, calling_function())
        self.accesses.append(access)
        return access

    def used(self) -> list[str]:
        return sorted({a.path for a in self.accesses if a.present})

    def probed_missing(self) -> list[str]:
        return sorted({a.path for a in self.accesses if not a.present})

    def by_user(self) -> dict[str, list[str]]:
        users: dict[str, set] = {}
        for access in self.accesses:
            if access.present:
                users.setdefault(access.user, set()).add(access.path)
        return {user: sorted(paths) for user, paths in sorted(users.items())}


def calling_function() -> str:
    """``module.function`` of the innermost trtkit frame on the stack (test code has no other way to name it)."""
    frame = sys._getframe(1)
    fallback = None
    while frame is not None:
        module = str(frame.f_globals.get("__name__", "?"))
        name = f"{module}.{getattr(frame.f_code, 'co_qualname', frame.f_code.co_name)}"
        if module.startswith("trtkit."):
            return name
        if fallback is None and module != __name__:
            fallback = name
        frame = frame.f_back
    return fallback or "?"


class _Proxy:
    """Shared plumbing: the wrapped object, the real thing it stands for, and the log."""

    __slots__ = ("_target", "_real", "_name", "_log")

    def __init__(self, target, real, name: str, log: AccessLog):
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_real", real)
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_log", log)

    def _lookup(self, name: str):
        if name == "__members__":
            # Only members the real enum has: detection must see the real surface even over a fake.
            members = getattr(self._target, name)
            return {k: v for k, v in members.items() if hasattr(self._real, k)}
        if name.startswith("__") and name.endswith("__"):
            return getattr(self._target, name)
        present = hasattr(self._real, name)
        access = self._log.record(self._name, name, present)
        if not present:
            raise MissingOnSurface(
                f"TensorRT {self._log.version} has no attribute {access.path} (used by {access.user})"
            )
        try:
            value = getattr(self._target, name)
        except AttributeError:
            self._log.fake_gaps.append(f"{access.path} (used by {access.user})")
            raise FakeIncomplete(
                f"The fake backend imitating TensorRT {self._log.version} lacks {access.path}, which the real "
                f"one has (used by {access.user}); add it to tests/fakes/fake_trt"
            ) from None
        if isinstance(self, InstanceProxy):
            self._check_kind(name, value, access)
        return self._wrap(name, value)

    def _check_kind(self, name: str, value, access: Access) -> None:
        """A property of the real class must not be a method of the fake, nor the reverse.

        Code written against such a fake (``parser.num_errors()``) runs on CPU tests and fails on real TensorRT.
        """
        real_attr = getattr(self._real, name, None)
        method_like = inspect.ismethod(value) or inspect.isfunction(value) or inspect.isbuiltin(value)
        if isinstance(real_attr, property) and method_like:
            wrong = "a property in the real TensorRT but a method in the fake"
        elif callable(real_attr) and not isinstance(real_attr, (type, property)) and not callable(value):
            wrong = "a method in the real TensorRT but a plain value in the fake"
        else:
            return
        self._log.fake_gaps.append(f"{access.path} is {wrong} (used by {access.user})")

    def _wrap(self, name: str, value):
        real_attr = getattr(self._real, name, None)
        if isinstance(value, type) and isinstance(real_attr, type):
            return ClassProxy(value, real_attr, real_attr.__name__, self._log)
        if callable(value) and not isinstance(value, type):
            where = f"{self._name}.{name}" if self._name else name
            return _wrap_callable(value, _returned_class(real_attr, self._log), self._log,
                                  signatures(real_attr, name), where)
        cls = _returned_class(getattr(real_attr, "fget", None), self._log)
        return wrap_instance(value, cls, self._log)

    def __getattr__(self, name: str):
        return self._lookup(name)

    def __dir__(self):
        return sorted(set(dir(self._target)) & set(dir(self._real)))

    def __repr__(self) -> str:
        return f"<surface {self._log.version} {self._name or 'tensorrt'}: {self._target!r}>"


class Surface(_Proxy):
    """The ``tensorrt`` module as trtkit sees it: ``target``'s values, ``real``'s names."""

    __slots__ = ()

    def __init__(self, target, real, log: AccessLog):
        super().__init__(target, real, "", log)

    @property
    def __version__(self) -> str:
        return self._target.__version__

    def __setattr__(self, name, value):
        raise TypeError("trtkit must not modify the tensorrt module")


class ClassProxy(_Proxy):
    """A class or enum: member and method names are checked; subclassing and isinstance see the target class."""

    __slots__ = ()
    # Read off the class itself (``trt.ILogger.__init__(self)`` in a subclass), not off the proxy.
    _CLASS_DUNDERS = frozenset({"__init__", "__new__", "__doc__", "__name__", "__qualname__", "__module__"})

    def __getattribute__(self, name: str):
        if name in ClassProxy._CLASS_DUNDERS:
            return getattr(object.__getattribute__(self, "_target"), name)
        return object.__getattribute__(self, name)

    def __call__(self, *args, **kwargs):
        init = self._real.__dict__.get("__init__")
        check_call(self._log, signatures(init, "__init__"), self._name, args, kwargs)
        obj = self._target(*_unwrap_all(args), **_unwrap_kwargs(kwargs))
        return wrap_instance(obj, self._real, self._log)

    def __mro_entries__(self, bases):
        return (self._target,)

    def __instancecheck__(self, instance) -> bool:
        return isinstance(unwrap(instance), self._target)

    def __subclasscheck__(self, subclass) -> bool:
        return issubclass(unwrap(subclass), self._target)

    def __eq__(self, other):
        return unwrap(other) is self._target

    def __hash__(self):
        return hash(self._target)

    def __setattr__(self, name, value):
        raise TypeError(f"trtkit must not modify tensorrt.{self._name}")


class InstanceProxy(_Proxy):
    """A TensorRT object (config, network, engine...): reads and writes checked against its real class."""

    __slots__ = ()

    def __setattr__(self, name: str, value) -> None:
        real_attr = getattr(self._real, name, None)
        settable = real_attr is not None and getattr(real_attr, "fset", None) is not None
        access = self._log.record(self._name, name, settable)
        if not settable:
            what = "a read-only attribute" if real_attr is not None else "no attribute"
            raise MissingOnSurface(
                f"TensorRT {self._log.version} has {what} {access.path} to set (used by {access.user})"
            )
        setattr(self._target, name, unwrap(value))

    def __bool__(self):
        return bool(self._target)

    def __len__(self):
        return len(self._target)

    def __iter__(self):
        return iter(self._target)

    def __getitem__(self, key):
        return self._target[key]

    def __eq__(self, other):
        return self._target == unwrap(other)

    def __hash__(self):
        return hash(self._target)

    def __int__(self):
        return int(self._target)

    def __index__(self):
        return int(self._target)

    def __buffer__(self, flags):  # Python 3.12+: memoryview(host_memory)
        return memoryview(self._target)

    def __bytes__(self):
        return bytes(self._target)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def wrap_instance(value, real_cls, log: AccessLog):
    """Wrap ``value`` as an instance of ``real_cls`` when it is a TensorRT object; plain values pass through."""
    if real_cls is None or value is None or isinstance(value, (bool, int, float, str, bytes, tuple, list, dict)):
        return value
    if isinstance(value, _Proxy):
        return value
    if isinstance(value, property) or (isinstance(value, real_cls) and type(value) is not real_cls):
        return value  # a property read off a class, or trtkit's own subclass (logger, calibrator)
    return InstanceProxy(value, real_cls, real_cls.__name__, log)


def _wrap_callable(func, returns, log: AccessLog, sigs=None, where: str = ""):
    def call(*args, **kwargs):
        check_call(log, sigs, where, args, kwargs)
        return wrap_instance(func(*_unwrap_all(args), **_unwrap_kwargs(kwargs)), returns, log)

    call.__name__ = getattr(func, "__name__", "call")
    call.__wrapped__ = func
    return call


def _returned_class(real_attr, log: AccessLog):
    """The real class a pybind11 function returns, read from its signature line(s); None when not a TensorRT class."""
    doc = getattr(real_attr, "__doc__", None) or ""
    for match in _RETURN.finditer(doc):
        cls = getattr(log.module, _ALIASES.get(match.group(1), match.group(1)), None)
        if isinstance(cls, type):
            return cls
    if doc and real_attr is not None:
        log.unchecked.add(doc.splitlines()[0][:120])
    return None


def signatures(real_attr, name: str) -> list | None:
    """Parameter lists ``[(name, has_default), ...]`` (``self`` dropped) of a pybind11 function, one per overload,
    read from its docstring; None when it has none to read (a plain Python function, a property)."""
    doc = getattr(real_attr, "__doc__", None) or ""
    found = []
    for line in doc.splitlines():
        match = re.match(rf"^\s*(?:\d+\.\s+)?{re.escape(name)}\((.*)\)\s*->", line)
        if match and match.group(1) != "*args, **kwargs":
            params = [_param(p) for p in _split_top_level(match.group(1)) if p.strip()]
            found.append([p for p in params if p[0] != "self"])
    return found or None


def _param(text: str) -> tuple:
    """``("name", has_default)`` of ``"name: type = default"``."""
    return text.partition(":")[0].strip(), len(_split_top_level(text, "=")) > 1


def _split_top_level(text: str, sep: str = ",") -> list:
    """Split at ``sep`` outside brackets (types such as ``List[Tuple[int, int]]``, defaults such as ``<X.Y: 0>``)."""
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch in "[(<":
            depth += 1
        elif ch in "])>":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    return parts + [current]


def fits(params: list, n_positional: int, keywords) -> bool:
    """Whether a call with ``n_positional`` arguments and ``keywords`` binds to ``params``."""
    names = [p[0] for p in params]
    if n_positional > len(names) or any(k not in names[n_positional:] for k in keywords):
        return False
    return all(has_default or i < n_positional or name in keywords for i, (name, has_default) in enumerate(params))


def check_call(log: AccessLog, sigs, where: str, args, kwargs) -> None:
    """Raise :class:`CallMismatch` (and log it) when no overload of the real function accepts this call."""
    if not sigs or any(fits(params, len(args), kwargs) for params in sigs):
        return
    user = calling_function()
    shown = " | ".join(f"({', '.join(n + ('=...' if d else '') for n, d in params)})" for params in sigs)
    called = ", ".join(["<arg>"] * len(args) + [f"{k}=" for k in kwargs])
    error = CallMismatch(f"TensorRT {log.version}: {where}({called}) matches none of its signatures {shown} "
                         f"(used by {user})")
    log.call_errors.append(str(error))
    raise error


# C++ names in signatures whose Python class is named differently.
_ALIASES = {"IParserError": "ParserError"}


def make_surface(target, real, version: str) -> tuple[Surface, AccessLog]:
    """A checked ``tensorrt`` over ``target`` (the real module or a fake) for TensorRT ``version``."""
    log = AccessLog(version, real)
    return Surface(target, real, log), log


def unwrap(value):
    return object.__getattribute__(value, "_target") if isinstance(value, _Proxy) else value


def _unwrap_all(values):
    return tuple(unwrap(v) for v in values)


def _unwrap_kwargs(kwargs):
    return {k: unwrap(v) for k, v in kwargs.items()}


def find_missing(exc: BaseException | None) -> BaseException | None:
    """The :class:`MissingOnSurface`, :class:`CallMismatch` or :class:`FakeIncomplete` in ``exc``'s cause/context
    chain, if any."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, (MissingOnSurface, CallMismatch, FakeIncomplete)):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None
