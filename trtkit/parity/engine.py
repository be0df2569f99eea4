"""The engine side of a parity run: a callable ``feed -> outputs``, its profile shapes and its precision.

An engine path or bytes is opened with :class:`trtkit.runtime.runner.TrtRunner` (TensorRT itself is imported only
once an engine is opened); anything callable is used as it is.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from trtkit.errors import EngineError
from trtkit.manifest import Manifest, read_manifest
from trtkit.parity.tolerance import precision_from_manifest
from trtkit.runtime.runner import TrtRunner


@dataclass
class EngineSession:
    """What a parity run needs from an engine.

    Attributes:
        infer: ``feed -> {name: array}``.
        profile: {input name: (min, opt, max)} of the profile in use, or None when unknown.
        precision: the precision the engine was built for (from its manifest), or None.
        input_dtypes: {input name: numpy dtype} the engine takes, or None when unknown.
        shape_values: {shape-tensor input name: the profile's opt values}, or None when it has none (random values
            would rarely make a valid shape, so random feeds give these).
        runner: the :class:`TrtRunner` behind ``infer``, when there is one (its stream and device buffers).
    """

    infer: Callable
    profile: dict | None = None
    precision: str | None = None
    input_dtypes: dict | None = None
    shape_values: dict | None = None
    runner: TrtRunner | None = None


def describe_engine(engine) -> str:
    """A short description of an engine argument for reports."""
    if isinstance(engine, (str, os.PathLike)):
        return str(engine)
    if isinstance(engine, (bytes, bytearray, memoryview)):
        return "<engine bytes>"
    return getattr(engine, "name", None) or getattr(engine, "__name__", None) or type(engine).__name__


@contextlib.contextmanager
def open_engine(engine, *, profile_index: int = 0, runner_options: dict | None = None):
    """Yield an :class:`EngineSession` for ``engine``; a path or bytes is opened (and closed) here.

    Args:
        engine: a callable, an object with ``infer`` (an open ``TrtRunner``), an engine path, or engine bytes.
        profile_index: the optimization profile to run in when the engine is opened here.
        runner_options: extra keyword arguments for ``TrtRunner`` when the engine is opened here (e.g.
            ``allow_mismatch=True``, ``cuda_graph=True``; tests pass ``trt=`` and ``cuda=`` fakes).

    Raises:
        EngineError: the path does not exist, or the argument is none of the above.
    """
    if isinstance(engine, (str, os.PathLike, bytes, bytearray, memoryview)):
        with _open_runner(engine, profile_index, runner_options or {}) as session:
            yield session
        return
    infer = engine if callable(engine) and not hasattr(engine, "infer") else getattr(engine, "infer", None)
    if infer is None:
        raise EngineError(
            f"Cannot use {type(engine).__name__} as an engine: pass an engine file, its bytes, a TrtRunner, or a "
            f"callable taking {{input name: array}} and returning {{output name: array}}."
        )
    # An open runner already runs in its own profile.
    index = getattr(engine, "profile", profile_index)
    index = index if isinstance(index, int) else profile_index
    yield EngineSession(
        infer=_casting(infer, engine),
        profile=runner_profile(engine, index),
        input_dtypes=input_dtypes(engine),
        shape_values=shape_values(engine, index),
        runner=engine if isinstance(engine, TrtRunner) else None,
    )


@contextlib.contextmanager
def _open_runner(engine, profile_index: int, runner_options: dict):
    manifest = None
    if not isinstance(engine, (bytes, bytearray, memoryview)):
        path = Path(os.fspath(engine))
        if not path.is_file():
            raise EngineError(f"Engine file '{path}' does not exist; build one with `trtkit build MODEL.onnx`.")
        manifest = read_manifest(path)
        engine = str(path)
    with TrtRunner(engine, profile=profile_index, **runner_options) as runner:
        profile = runner_profile(runner, profile_index) or _manifest_profile(manifest, profile_index)
        yield EngineSession(
            infer=_casting(runner.infer, runner),
            profile=profile,
            precision=precision_from_manifest(manifest),
            input_dtypes=input_dtypes(runner),
            shape_values=shape_values(runner, profile_index),
            runner=runner,
        )


def runner_profile(runner, index: int) -> dict | None:
    """{input name: (min, opt, max)} of profile ``index`` from a runner's ``input_specs``, or None.

    Works with trtkit's ``TrtRunner`` (its input specs carry ``profiles``: (min, opt, max) per profile) and quietly
    gives None for plain callables and runners of static engines without profile data.
    """
    profile = {}
    for spec in getattr(runner, "input_specs", None) or ():
        ranges = getattr(spec, "profiles", None) or ()
        if 0 <= index < len(ranges):
            profile[spec.name] = tuple(tuple(int(d) for d in dims) for dims in ranges[index])
    return profile or None


def shape_values(runner, index: int) -> dict | None:
    """{shape-tensor input name: opt values} of profile ``index`` from a runner's ``shape_input_specs``, or None."""
    found = {
        spec.name: tuple(spec.values[index][1])
        for spec in getattr(runner, "shape_input_specs", None) or ()
        if 0 <= index < len(spec.values)
    }
    return found or None


def _manifest_profile(manifest: Manifest | None, index: int) -> dict | None:
    profiles = manifest.build.profiles if manifest is not None and manifest.build is not None else []
    if not 0 <= index < len(profiles):
        return None
    values = set(manifest.model.shape_inputs) if manifest is not None else set()  # their entries are values
    return {
        n: (tuple(s["min"]), tuple(s["opt"]), tuple(s["max"])) for n, s in profiles[index].items() if n not in values
    }


def input_dtypes(runner) -> dict | None:
    """{input name: numpy dtype} from a runner's ``input_specs`` and ``shape_input_specs``, or None for plain
    callables."""
    specs = tuple(getattr(runner, "input_specs", None) or ()) + tuple(getattr(runner, "shape_input_specs", None) or ())
    dtypes = {s.name: np.dtype(s.dtype) for s in specs if hasattr(s, "dtype")}
    return dtypes or None


def _casting(infer: Callable, runner) -> Callable:
    """Wrap ``infer`` so feeds match the engine's declared inputs: their dtypes, and only those names.

    The same values go to both sides, in the type each expects: an engine built from an FP16-cast model may take
    FP16 inputs where the ONNX model takes FP32, TensorRT 8.6 takes INT32 where ONNX says INT64, and TensorRT drops
    inputs the network does not use.
    """
    dtypes = input_dtypes(runner)
    if not dtypes:
        return infer

    def cast_and_infer(feed):
        # device arrays go as they are (the runner checks their dtype)
        return infer(
            {
                n: a if hasattr(a, "__cuda_array_interface__") else a.astype(dtypes[n], copy=False)
                for n, a in feed.items()
                if n in dtypes
            }
        )

    return cast_and_infer
