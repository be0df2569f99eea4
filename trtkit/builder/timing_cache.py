"""The timing cache file a build reads and merges its timings back into (TensorRT's record of the fastest tactic of
each layer it timed, so the next build of a like layer skips timing it).

By default every build uses one cache per GPU model, compute capability and TensorRT version, in ``timing`` under
the user's cache folder (e.g. ``nvidia-h200-sm90-trt10.9.0.cache``); on TensorRT 8.x, which cannot read another
build's Myelin timings, one per model and build settings (``...-trt8.6.0-<build key>.cache``).
``BuildConfig(timing_cache=FILE)`` names another and ``use_timing_cache=False`` builds without one. The file is
TensorRT's own format (trtexec reads it). Beside it:

- ``<file>.json``, its provenance (GPU name, compute capability, TensorRT version): a cache written for another GPU
  or TensorRT is not used. A default cache of other provenance, or one that does not load, is replaced with a
  warning; a file the user named is an error unless ``timing_cache_reset``.
- ``<file>.lock``: after a successful build, under an exclusive ``flock``, the file as it is then is combined with this
  build's cache and both files are written atomically, so concurrent builds all land (reading needs no lock).
"""

from __future__ import annotations

import json
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from trtkit import _version_compat as compat
from trtkit._atomic import write_files_atomic
from trtkit.errors import BuildError, TrtkitError, UsageError, WriteError
from trtkit.log import logger


@dataclass
class TimingCacheFile:
    """One build's timing cache file.

    Attributes:
        path: the cache file.
        default: the per-GPU default cache (replaced, with a warning, when unusable) rather than a file the user
            named (an error then, unless ``reset``).
        reset: replace a named file that is unusable.
        provenance: ``{"gpu", "compute_capability", "tensorrt"}`` of this build.
        status: after :meth:`load`, ``hit`` (loaded), ``created`` (no file yet) or ``replaced`` (unusable).
    """

    path: Path
    default: bool
    reset: bool
    provenance: dict
    status: str = ""

    @classmethod
    def resolve(cls, config, trt, build_key: str = "") -> TimingCacheFile | None:
        """The file a build with ``config`` uses (``None``: ``use_timing_cache=False``); ``build_key`` names the
        model and settings where TensorRT keeps a cache per build."""
        if not config.use_timing_cache:
            return None
        from trtkit._device import device_info

        info = device_info()
        provenance = {
            "gpu": info.get("name"),
            "compute_capability": info.get("compute_capability"),
            "tensorrt": compat.version_string(trt),
        }
        if config.timing_cache:
            return cls(Path(config.timing_cache), False, config.timing_cache_reset, provenance)
        key = "" if compat.timing_cache_shared_across_builds(trt) else build_key
        return cls(default_path(provenance, key), True, True, provenance)

    @property
    def sidecar(self) -> Path:
        return self.path.with_name(self.path.name + ".json")

    def load(self, bconfig):
        """This build's ``trt.ITimingCache``, from the file when it is usable, set on ``bconfig``.

        Raises:
            BuildError: a named file that does not load or has other provenance (without ``reset``), or that
                TensorRT refused.
            UsageError: the named file is a folder.
        """
        data = _read(self.path)
        why = self._mismatch() if data else None
        cache = _create_timing_cache(bconfig, data) if data and why is None else None
        if data and why is None and cache is None:
            why = "does not load (not a TensorRT timing cache, or one TensorRT cannot read)"
        if why is not None:
            self._refuse(why)
        self.status = "replaced" if why else ("hit" if data else "created")
        cache = cache or bconfig.create_timing_cache(b"")
        if bconfig.set_timing_cache(cache, True) is False:
            raise BuildError(
                f"TensorRT refused the timing cache '{self.path}'; delete it to start a new one", field="timing_cache"
            )
        return cache

    def save(self, bconfig, cache) -> None:
        """Merge ``cache`` (this build's) into the file under the lock and write it back with its provenance.

        Raises:
            WriteError: a named file cannot be written (the default cache only warns).
        """
        try:
            with _locked(self.path.with_name(self.path.name + ".lock")):
                current = _read(self.path)
                other = _create_timing_cache(bconfig, current) if current and self._mismatch() is None else None
                if other is not None:
                    cache.combine(other, True)
                provenance = (json.dumps(self.provenance, indent=2, sort_keys=True) + "\n").encode()
                write_files_atomic({self.sidecar: provenance, self.path: bytes(cache.serialize())})
        except TrtkitError as exc:
            if not self.default:
                raise
            logger.warning("The timing cache '%s' could not be updated: %s", self.path, exc)

    def to_json(self) -> dict:
        """What the manifest records: ``{"path", "default", "status"}``."""
        return {"path": str(self.path.absolute()), "default": self.default, "status": self.status}

    def _mismatch(self) -> str | None:
        """Why the file's provenance is not this build's (``None``: it is, or the file has no sidecar)."""
        try:
            written = json.loads(self.sidecar.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            return f"has an unreadable provenance file '{self.sidecar}' ({exc})"
        if not isinstance(written, dict) or any(written.get(k) != v for k, v in self.provenance.items()):
            return f"was written for {_describe(written)}; this build is for {_describe(self.provenance)}"
        return None

    def _refuse(self, why: str) -> None:
        if not self.reset:
            raise BuildError(
                f"Timing cache '{self.path}' {why}; delete it, give another path, or pass timing_cache_reset to "
                "replace it with a new cache",
                field="timing_cache_reset",
                accepted="a timing cache file of this GPU and TensorRT, or a new path",
            )
        logger.warning("Timing cache '%s' %s; replacing it with a new one", self.path, why)


def user_cache_dir() -> Path:
    """trtkit's cache folder: ``$TRTKIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/trtkit``, else ``~/.cache/trtkit``."""
    if os.environ.get("TRTKIT_CACHE_DIR"):
        return Path(os.environ["TRTKIT_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "trtkit"


def default_path(provenance: dict, build_key: str = "") -> Path:
    """The default cache of a GPU and TensorRT: ``<user cache folder>/timing/<gpu>-sm<cc>-trt<version>.cache``
    (``...-<build_key>.cache`` where one is given)."""
    gpu = re.sub(r"[^a-z0-9.]+", "-", (provenance["gpu"] or "unknown-gpu").lower()).strip("-")
    cc = (provenance["compute_capability"] or "unknown").replace(".", "")
    key = f"-{build_key}" if build_key else ""
    return user_cache_dir() / "timing" / f"{gpu}-sm{cc}-trt{provenance['tensorrt']}{key}.cache"


def build_key(model_sha256: str, config) -> str:
    """A short name for one model built with one set of settings (the timing cache's own settings left out)."""
    import hashlib

    kept_out = ("timing_cache", "timing_cache_reset", "use_timing_cache", "save_qdq_onnx", "save_prepared", "check")
    settings = {k: v for k, v in config.to_json().items() if k not in kept_out}
    text = json.dumps([model_sha256, settings], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _describe(provenance) -> str:
    get = provenance.get if isinstance(provenance, dict) else (lambda key: None)
    return (
        f"GPU {get('gpu') or 'unknown'} (compute capability {get('compute_capability') or 'unknown'}) with "
        f"TensorRT {get('tensorrt') or 'unknown'}"
    )


@contextmanager
def _locked(lock_path: Path):
    """Hold an exclusive ``flock`` on ``lock_path`` (created, with its folder, if missing; never removed: another
    process may be waiting on it)."""
    import fcntl

    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise WriteError(f"Cannot write '{lock_path}': {exc.strerror or exc}", field="timing_cache") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _read(path: Path) -> bytes:
    if path.is_dir():
        raise UsageError(
            f"timing_cache '{path}' is a folder; give a file path", field="timing_cache", accepted="a file path"
        )
    try:
        return path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):  # no such file (yet)
        return b""
    except OSError as exc:
        raise BuildError(f"Cannot read timing cache '{path}': {exc.strerror or exc}", field="timing_cache") from exc


def _create_timing_cache(bconfig, data: bytes):
    """The cache made from ``data``, or ``None`` when ``data`` does not load. Some TensorRT versions raise, some
    return ``None``, and some log an error and return an empty cache: that last case is told apart by comparing with
    a cache made from nothing."""
    try:
        cache = bconfig.create_timing_cache(data)
    except Exception:  # noqa: BLE001 - see above
        return None
    if cache is None or not data:
        return cache
    empty = bconfig.create_timing_cache(b"")
    if empty is not None and data != _serialized(empty) and _serialized(cache) == _serialized(empty):
        return None
    return cache


def _serialized(cache) -> bytes:
    try:
        return bytes(cache.serialize())
    except Exception:  # noqa: BLE001 - a cache that cannot serialize compares as unknown
        return b""
