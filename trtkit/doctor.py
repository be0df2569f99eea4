"""Checks of the TensorRT / cuda-python / driver / GPU setup, each with the fix for its usual failure (data only)."""

from __future__ import annotations

import platform
from dataclasses import dataclass

from trtkit._device import device_info, package_version
from trtkit._lazy import cudart
from trtkit.log import make_trt_logger


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


def run_checks() -> list:
    """Run every check; never raises."""
    checks = [Check("python", True, platform.python_version())]
    trt, trt_check = _check_tensorrt()
    checks.append(trt_check)
    rt, cp_check = _check_cuda_python()
    checks.append(cp_check)
    if rt is not None:
        checks.extend(_check_driver_and_gpu(rt))
    if trt is not None and all(c.ok for c in checks):
        checks.append(_check_builder(trt))
    return checks


def _check_tensorrt():
    try:
        import tensorrt as trt
    except ImportError as exc:
        missing_lib = "libnvinfer" in str(exc)
        fix = (
            "TensorRT's libraries are not found: install the full wheel (`pip install tensorrt`) or add its lib "
            "folder to LD_LIBRARY_PATH"
            if missing_lib
            else "`pip install tensorrt` (the build matching your CUDA major: tensorrt-cu12 / tensorrt-cu13)"
        )
        return None, Check("tensorrt", False, f"not importable: {exc}", fix)
    return trt, Check("tensorrt", True, str(getattr(trt, "__version__", "?")))


def _check_cuda_python():
    version = package_version("cuda-python") or package_version("cuda-bindings") or "?"
    try:
        rt = cudart()
    except Exception as exc:  # noqa: BLE001 - report any import failure
        return None, Check(
            "cuda-python",
            False,
            f"not importable: {exc}",
            f"{cuda_python_command(12)} for a CUDA 12 driver, {cuda_python_command(13)} for a CUDA 13 "
            "driver (`nvidia-smi` shows which: 'CUDA Version' in its header)",
        )
    return rt, Check("cuda-python", True, version)


def _check_driver_and_gpu(rt) -> list:
    err, driver = rt.cudaDriverGetVersion()
    if int(err) != 0 or driver == 0:
        return [
            Check(
                "CUDA driver",
                False,
                "no NVIDIA driver found",
                "install the NVIDIA driver, or run on a machine with an NVIDIA GPU",
            )
        ]
    driver_major = driver // 1000
    checks = [Check("CUDA driver", True, f"supports CUDA {driver // 1000}.{(driver % 1000) // 10}")]
    cp_major = _major(package_version("cuda-python") or package_version("cuda-bindings"))
    if cp_major and cp_major > driver_major:
        checks.append(
            Check(
                "cuda-python vs driver",
                False,
                f"cuda-python {cp_major}.x needs a CUDA {cp_major} driver; this driver supports CUDA {driver_major}",
                cuda_python_command(driver_major),
            )
        )
    err, count = rt.cudaGetDeviceCount()
    if int(err) != 0 or count == 0:
        name = getattr(err, "name", str(err))
        checks.append(
            Check(
                "GPU",
                False,
                f"no CUDA device ({name})",
                "check `nvidia-smi`, CUDA_VISIBLE_DEVICES and that the driver matches the kernel",
            )
        )
        return checks
    info = device_info()
    checks.append(
        Check(
            "GPU",
            True,
            f"{count} device(s); 0: {info.get('name')} (compute capability {info.get('compute_capability')})",
        )
    )
    return checks


def _check_builder(trt) -> Check:
    try:
        builder = trt.Builder(make_trt_logger(trt))
    except Exception as exc:  # noqa: BLE001
        return Check(
            "TensorRT builder",
            False,
            f"cannot be created: {exc}",
            "TensorRT and the driver disagree: install a TensorRT built for this driver's CUDA major",
        )
    fast = getattr(builder, "platform_has_fast_fp16", None)
    return Check("TensorRT builder", True, "created" + ("" if fast is None else f"; fast FP16: {bool(fast)}"))


# the cuda-python range trtkit supports for each CUDA driver major (12.6 is the first with cuda.bindings)
CUDA_PYTHON_RANGES = {12: ">=12.6,<13", 13: ">=13,<14"}


def cuda_python_command(driver_major: int) -> str:
    """The exact command that installs the cuda-python matching a CUDA ``driver_major`` (the pins the README gives)."""
    spec = CUDA_PYTHON_RANGES.get(driver_major)
    if spec is None:
        return f"a driver for CUDA 12 or 13 (this one is CUDA {driver_major}), then {cuda_python_command(12)}"
    return f"`pip install --force-reinstall 'cuda-python{spec}'`"


def _major(version: str | None) -> int | None:
    try:
        return int(str(version).split(".")[0])
    except (TypeError, ValueError):
        return None
