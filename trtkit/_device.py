"""What GPU, driver and CUDA this machine has (for manifests, manifest checks and ``trtkit doctor``)."""

from __future__ import annotations

from functools import lru_cache

from trtkit._lazy import cudart


@lru_cache(maxsize=None)
def device_info(device: int = 0) -> dict:
    """GPU name, compute capability, driver and runtime versions of ``device``.

    Never raises: on a machine without a driver or cuda-python the dict holds ``"error"`` saying what is missing.
    """
    info: dict = {"device": device}
    try:
        rt = cudart()
    except Exception as exc:  # DependencyError and anything cuda-python raises on import
        info["error"] = str(exc)
        return info
    err, driver = rt.cudaDriverGetVersion()
    info["driver_cuda_version"] = _cuda_version(driver) if int(err) == 0 else None
    err, runtime = rt.cudaRuntimeGetVersion()
    info["runtime_cuda_version"] = _cuda_version(runtime) if int(err) == 0 else None
    err, count = rt.cudaGetDeviceCount()
    if int(err) != 0 or count == 0:
        name = getattr(err, "name", str(err))
        info["error"] = f"no CUDA device ({name}; driver CUDA version {info['driver_cuda_version'] or 'none'})"
        return info
    err, props = rt.cudaGetDeviceProperties(device)
    if int(err) != 0:
        info["error"] = f"cudaGetDeviceProperties failed: {getattr(err, 'name', err)}"
        return info
    raw_name = props.name
    info["name"] = raw_name.decode(errors="replace").rstrip("\x00") if isinstance(raw_name, bytes) else str(raw_name)
    info["compute_capability"] = f"{props.major}.{props.minor}"
    info["total_memory_bytes"] = int(props.totalGlobalMem)
    return info


def _cuda_version(v: int) -> str | None:
    return f"{v // 1000}.{(v % 1000) // 10}" if v else None


def package_version(name: str) -> str | None:
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover
        return None
    try:
        return version(name)
    except PackageNotFoundError:
        return None
