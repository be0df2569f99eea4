"""The engine side of a parity run: a callable ``feed -> outputs``, its profile shapes and its precision.

An engine path or bytes is opened with :class:`trtkit.runtime.runner.TrtRunner` (imported only then, so CPU code
paths never touch TensorRT); anything callable is used as it is.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from trtkit.errors import EngineError
from trtkit.parity.tolerance import precision_from_manifest


@dataclass
class EngineSession:
    """What a parity run needs from an engine.

    Attributes:
        infer: ``feed -> {name: array}``.
        profile: {input name: (min, opt, max)} of the profile in use, or None when unknown.
        precision: the precision the engine was built for (from its manifest), or None.
    """

    infer: Callable
    profile: dict | None = None
    precision: str | None = None


def describe_engine(engine) -> str:
    """A short description of an engine argument for reports."""
    if isinstance(engine, (str, os.PathLike)):
        return str(engine)
    if isinstance(engine, (bytes, bytearray, memoryview)):
        return "<engine bytes>"
    return getattr(engine, "name", None) or getattr(engine, "__name__", None) or type(engine).__name__


@contextlib.contextmanager
def open_engine(engine, *, profile_index: int = 0):
    """Yield an :class:`EngineSession` for ``engine``; a path or bytes is opened (and closed) here.

    Args:
        engine: a callable, an object with ``infer`` (an open ``TrtRunner``), an engine path, or engine bytes.
        profile_index: the optimization profile to run in when the engine is opened here.

    Raises:
        EngineError: the path does not exist, or the argument is none of the above.
    """
    if isinstance(engine, (str, os.PathLike, bytes, bytearray, memoryview)):
        with _open_runner(engine, profile_index) as session:
            yield session
        return
    infer = engine if callable(engine) and not hasattr(engine, "infer") else getattr(engine, "infer", None)
    if infer is None:
        raise EngineError(
            f"Cannot use {type(engine).__name__} as an engine: pass an engine file, its bytes, a TrtRunner, or a "
            f"callable taking {{input name: array}} and returning {{output name: array}}."
        )
    yield EngineSession(infer=_casting(infer, engine), profile=runner_profile(engine, profile_index))


@contextlib.contextmanager
def _open_runner(engine, profile_index: int):
    from trtkit.runtime.runner import TrtRunner

    manifest = None
    if not isinstance(engine, (bytes, bytearray, memoryview)):
        path = Path(os.fspath(engine))
        if not path.is_file():
            raise EngineError(f"Engine file '{path}' does not exist; build one with `trtkit build MODEL.onnx`.")
        from trtkit.build.manifest import read_manifest

        manifest = read_manifest(path)
        engine = str(path)
    with TrtRunner(engine, profile_index=profile_index) as runner:
        profile = runner_profile(runner, profile_index) or _manifest_profile(manifest, profile_index)
        yield EngineSession(infer=_casting(runner.infer, runner), profile=profile,
                            precision=precision_from_manifest(manifest))


def runner_profile(runner, index: int) -> dict | None:
    """{input name: (min, opt, max)} of profile ``index`` from a runner's engine introspection, or None.

    Works with anything exposing ``profile_shapes(index)`` (trtkit's TrtRunner) and quietly gives None for plain
    callables.
    """
    getter = getattr(runner, "profile_shapes", None)
    if getter is None:
        return None
    shapes = getter(index) or {}
    return {name: tuple(tuple(int(d) for d in s) for s in triple) for name, triple in dict(shapes).items()} or None


def _manifest_profile(manifest: dict | None, index: int) -> dict | None:
    profiles = ((manifest or {}).get("build") or {}).get("profiles") or []
    if not 0 <= index < len(profiles):
        return None
    return {n: (tuple(s["min"]), tuple(s["opt"]), tuple(s["max"])) for n, s in profiles[index].items()}


def _casting(infer: Callable, runner) -> Callable:
    """Wrap ``infer`` so feeds are cast to the engine's input dtypes where it declares them.

    An engine built from an FP16-cast model may take FP16 inputs while the ONNX model it is compared with takes
    FP32; the same values go to both, in the type each expects.
    """
    dtypes = _input_dtypes(runner)
    if not dtypes:
        return infer

    def cast_and_infer(feed):
        return infer({n: a.astype(dtypes[n], copy=False) if n in dtypes else a for n, a in feed.items()})

    return cast_and_infer


def _input_dtypes(runner) -> dict:
    getter = getattr(runner, "input_dtypes", None)
    if getter is None:
        return {}
    dtypes = getter() if callable(getter) else getter
    return {name: np.dtype(dtype) for name, dtype in dict(dtypes).items()}
