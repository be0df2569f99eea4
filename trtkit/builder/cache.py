"""The ONNX -> engine cache (``trtkit bench model.onnx``): one engine per prepared model, build settings and TensorRT.

The key hashes the *prepared* model (:func:`trtkit.builder.prepare.prepare`: a changed rewrite gives a new key), the
build settings (:meth:`BuildConfig.to_json`) and the TensorRT version. Entries are ``<cache>/<stem>-<key>.engine``
with the manifest beside each, written atomically by :func:`trtkit.builder.api.build`; nothing is ever evicted.
The cache folder is ``engines`` in the user's cache folder (:func:`trtkit.builder.timing_cache.user_cache_dir`),
beside the timing caches.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from trtkit.builder.timing_cache import user_cache_dir


def cache_dir(folder=None) -> Path:
    """``folder``, else ``engines`` in :func:`user_cache_dir` (created)."""
    path = Path(folder or user_cache_dir() / "engines")
    path.mkdir(parents=True, exist_ok=True)
    return path


def cache_key(prepared, config, trt_version: str) -> str:
    digest = hashlib.sha256(prepared.sha256.encode())
    digest.update(json.dumps(config.to_json(), sort_keys=True, default=str).encode())
    digest.update(trt_version.encode())
    return digest.hexdigest()[:20]


def cached_build(
    model, config, *, folder=None, trt=None, isolate: bool = True, on_phase=None, on_progress=None
) -> tuple:
    """The cached engine for ``model`` built with ``config``, building it first when missing.

    Args:
        model: ONNX path (or anything :func:`~trtkit.builder.prepare.prepare` takes).
        config: a :class:`~trtkit.builder.config.BuildConfig`.
        folder: the cache folder (see :func:`cache_dir`).
        trt: a ``tensorrt`` module (tests: the fake; builds in this process).
        isolate: build in a child process (ignored with ``trt``).
        on_phase, on_progress: passed to the build (:func:`trtkit.builder.api.build`).

    Returns:
        ``(path, hit)``: the engine file and whether it was already there.
    """
    from trtkit import _version_compat as compat
    from trtkit._lazy import tensorrt
    from trtkit.builder.api import build
    from trtkit.builder.prepare import prepare

    module = trt or tensorrt()
    prepared = prepare(
        model,
        trt=module,
        sanitize=config.sanitize,
        nms=config.add_nms,
        fold_constants=config.fold_constants,
        input_uint8_nhwc=config.input_uint8_nhwc,
    )
    stem = prepared.loaded.path.stem if prepared.loaded.path else prepared.loaded.name
    path = cache_dir(folder) / f"{stem}-{cache_key(prepared, config, compat.version_string(module))}.engine"
    if path.exists():
        return path, True
    build(model, config, output=path, trt=trt, isolate=isolate, on_phase=on_phase, on_progress=on_progress)
    return path, False
