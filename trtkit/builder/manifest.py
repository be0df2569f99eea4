"""The JSON manifest written beside every engine, and the check made when an engine is loaded.

An engine is tied to the TensorRT version and (unless built hardware-compatible) the GPU architecture it was built
for; loading it elsewhere crashes or fails obscurely. The manifest records how it was built so the mismatch is named.
"""

from __future__ import annotations

import json
from pathlib import Path

from trtkit.errors import EngineError

MANIFEST_SUFFIX = ".manifest.json"


def manifest_path(engine_path) -> Path:
    engine_path = Path(engine_path)
    return engine_path.with_name(engine_path.name + MANIFEST_SUFFIX)


def read_manifest(engine_path) -> dict | None:
    """The manifest beside ``engine_path``, or ``None`` when there is none.

    Raises:
        EngineError: the manifest exists but is not valid JSON.
    """
    path = manifest_path(engine_path)
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise EngineError(f"Manifest '{path}' is unreadable ({exc}); delete it or rebuild the engine") from exc


def environment(trt=None) -> dict:
    """Versions and GPU of this machine, as recorded in manifests."""
    from trtkit import __version__
    from trtkit._device import device_info, package_version

    env = {
        "trtkit": __version__,
        "tensorrt": getattr(trt, "__version__", None) if trt is not None else package_version("tensorrt"),
        "cuda_python": package_version("cuda-python") or package_version("cuda-bindings"),
        "onnx": package_version("onnx"),
    }
    dev = device_info()
    env["gpu"] = dev.get("name")
    env["compute_capability"] = dev.get("compute_capability")
    env["driver_cuda_version"] = dev.get("driver_cuda_version")
    return env


def mismatches(manifest: dict, current: dict) -> list:
    """What differs between the machine an engine was built on and ``current``, as readable phrases."""
    built = manifest.get("environment", {})
    out = []
    if built.get("tensorrt") and current.get("tensorrt") and built["tensorrt"] != current["tensorrt"]:
        if not manifest.get("build", {}).get("version_compatible"):
            out.append(f"TensorRT {built['tensorrt']} (this machine has {current['tensorrt']})")
    cc_built, cc_now = built.get("compute_capability"), current.get("compute_capability")
    if cc_built and cc_now and cc_built != cc_now and not manifest.get("build", {}).get("hardware_compatibility"):
        out.append(
            f"GPU {built.get('gpu')} with compute capability {cc_built} "
            f"(this machine has {current.get('gpu')}, compute capability {cc_now})"
        )
    return out


def check_manifest(manifest: dict | None, *, engine_path=None, current: dict | None = None,
                   allow_mismatch: bool = False) -> list:
    """Refuse an engine built for another TensorRT version or GPU architecture.

    Args:
        manifest: the engine's manifest (``None``: nothing to check).
        current: this machine's :func:`environment` (computed when ``None``).
        allow_mismatch: return the mismatches instead of raising.

    Returns:
        The list of mismatches (empty when the engine fits this machine).

    Raises:
        EngineError: something differs and ``allow_mismatch`` is false.
    """
    if not manifest:
        return []
    found = mismatches(manifest, current if current is not None else environment())
    if found and not allow_mismatch:
        name = f"Engine '{engine_path}'" if engine_path else "The engine"
        raise EngineError(
            f"{name} was built for {'; '.join(found)}. Rebuild it on this machine with `trtkit build`, "
            f"or set allow_mismatch=True to try loading it anyway."
        )
    return found
