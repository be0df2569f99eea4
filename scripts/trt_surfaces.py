#!/usr/bin/env python3
"""Prepare importable ``tensorrt`` API surfaces of several TensorRT versions on a CPU-only machine.

Every TensorRT release's Python bindings are on PyPI as a small wheel (``tensorrt-bindings==8.6.1``,
``tensorrt-cu12-bindings==10.0.1 ... 11.x``; the package inside is ``tensorrt_bindings``). They cannot load without
TensorRT's libraries, but they import only a handful of entry points from them. For each version this tool

1. downloads the bindings wheel for the running Python (``pip download --no-deps --only-binary=:all:``),
2. reads the libraries the binding needs (``readelf -d`` / ``objdump -p``) and the symbols it leaves undefined
   (``nm -D --undefined-only``), keeping those no system library or Python provides,
3. generates C stubs exporting exactly those symbols (each returns NULL/0; C++ names through ``asm`` labels) and
   compiles them with gcc into ``libnvinfer.so.N`` etc., each with its SONAME,
4. lays out ``<root>/<version>/`` holding ``tensorrt_bindings/``, the stubs and a ``tensorrt`` shim package that
   preloads the stubs and then *is* ``tensorrt_bindings`` (``sys.modules`` alias), so that
   ``PYTHONPATH=<root>/<version> python -c "import tensorrt"`` gives the real enums, classes and methods.
   Creating a ``Builder`` or ``Runtime`` raises, exactly as on a machine without a GPU.

A finished surface holds ``surface.json``; a second run for the same version and Python does nothing.

Usage::

    python scripts/trt_surfaces.py                      # the CI versions, into .trt-surfaces/
    python scripts/trt_surfaces.py 10.8.0.43 11.4.0.106 --root /tmp/surfaces
    python scripts/trt_surfaces.py --available          # which versions PyPI has for this Python
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

CI_VERSIONS = ("8.6.1", "10.0.1", "10.8.0.43", "10.16.1.11", "11.0.0.114", "11.4.0.106")
DEFAULT_ROOT = Path(__file__).resolve().parent.parent / ".trt-surfaces"
MARKER = "surface.json"
# Bump when the layout or the stubs change, so cached surfaces are rebuilt.
FORMAT = 1
TRT_LIBRARIES = ("libnvinfer", "libnvinfer_plugin", "libnvonnxparser", "libnvparsers")


class SurfaceError(Exception):
    """A surface cannot be prepared; the message says why and what to do."""


# --- which wheel -------------------------------------------------------------------------------------------------


def python_tag() -> str:
    return f"cp{sys.version_info.major}{sys.version_info.minor}"


def wheel_requirement(version: str, cuda: str = "12") -> str:
    """The pip requirement of the bindings wheel of one TensorRT version.

    8.x bindings are published as ``tensorrt-bindings``; 10.x and later per CUDA major (``tensorrt-cu12-bindings``).
    """
    if version.split(".")[0] in ("8", "9"):
        return f"tensorrt-bindings=={version}"
    return f"tensorrt-cu{cuda}-bindings=={version}"


def available_versions(cuda: str = "12") -> dict[str, list[str]]:
    """Versions of the bindings wheels that pip can see for the running Python."""
    found = {}
    for package in ("tensorrt-bindings", f"tensorrt-cu{cuda}-bindings"):
        result = _run([sys.executable, "-m", "pip", "index", "versions", package], check=False)
        match = re.search(r"Available versions:\s*(.+)", result.stdout)
        found[package] = [v.strip() for v in match.group(1).split(",")] if match else []
    return found


def download_wheel(version: str, wheels: Path, cuda: str = "12") -> Path:
    """The bindings wheel of ``version`` for this Python, downloaded into ``wheels`` unless already there."""
    requirement = wheel_requirement(version, cuda)
    existing = _find_wheel(wheels, requirement, version)
    if existing:
        return existing
    wheels.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
               "-d", str(wheels), requirement]
    result = _run(command, check=False)
    found = _find_wheel(wheels, requirement, version)
    if result.returncode != 0 or not found:
        raise SurfaceError(
            f"No wheel {requirement} for Python {python_tag()} could be downloaded "
            f"(`{' '.join(command)}` said: {_last_lines(result.stderr or result.stdout)}). "
            f"Check the version with `python {Path(__file__).name} --available`; "
            "tensorrt-bindings 8.6.1 exists for cp36 to cp311 only."
        )
    return found


def _find_wheel(wheels: Path, requirement: str, version: str) -> Path | None:
    stem = requirement.split("==")[0].replace("-", "_")
    for wheel in sorted(wheels.glob(f"{stem}-{version}-*.whl")):
        if f"-{python_tag()}-" in wheel.name:
            return wheel
    return None


# --- what the binding imports -------------------------------------------------------------------------------------


def needed_libraries(so: Path) -> list[str]:
    """The ``NEEDED`` entries of a shared object (``readelf -d``, or ``objdump -p`` where readelf is missing)."""
    if shutil.which("readelf"):
        out = _run(["readelf", "-d", str(so)]).stdout
        return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
    if shutil.which("objdump"):
        out = _run(["objdump", "-p", str(so)]).stdout
        return re.findall(r"^\s*NEEDED\s+(\S+)", out, flags=re.MULTILINE)
    raise SurfaceError("Neither readelf nor objdump is installed; install binutils (e.g. `apt-get install binutils`).")


def undefined_symbols(so: Path) -> list[str]:
    """Strongly undefined, unversioned dynamic symbols of ``so`` (weak ones may stay unresolved)."""
    out = _run(["nm", "-D", "--undefined-only", str(so)]).stdout
    symbols = []
    for line in out.splitlines():
        parts = line.split()
        # Versioned names (foo@GLIBC_2.2.5, @GLIBCXX_3.4) come from the C/C++ runtime, never from TensorRT.
        if len(parts) == 2 and parts[0] == "U" and "@" not in parts[1]:
            symbols.append(parts[1])
    return symbols


def trt_symbols(so: Path, needed: list[str]) -> list[str]:
    """The undefined symbols of ``so`` that neither Python nor its non-TensorRT libraries provide."""
    providers = [ctypes.CDLL(None)]
    for name in needed:
        if not _is_trt_library(name):
            try:
                providers.append(ctypes.CDLL(name))
            except OSError:
                pass  # a missing system library shows up as an import error later, with the loader's message
    return [sym for sym in undefined_symbols(so) if not any(hasattr(lib, sym) for lib in providers)]


def _is_trt_library(soname: str) -> bool:
    return soname.split(".so")[0] in TRT_LIBRARIES


def library_of(symbol: str, trt_libs: list[str]) -> str:
    """Which of the binding's TensorRT libraries exports ``symbol``.

    The dynamic loader resolves symbols across every loaded library, so a wrong guess still imports; the
    split only keeps each stub looking like the library it stands in for.
    """
    by_stem = {name.split(".so")[0]: name for name in trt_libs}
    if "nvuffparser" in symbol or "nvcaffeparser" in symbol:
        stem = "libnvparsers"
    elif "OnnxParser" in symbol or "NvOnnx" in symbol or "nvonnxparser" in symbol:
        stem = "libnvonnxparser"
    elif symbol == "initLibNvInferPlugins" or "N8nvinfer16plugin" in symbol:
        stem = "libnvinfer_plugin"
    else:
        stem = "libnvinfer"
    return by_stem.get(stem) or by_stem.get("libnvinfer") or trt_libs[0]


# --- stubs ---------------------------------------------------------------------------------------------------------


def stub_source(soname: str, symbols: list[str]) -> str:
    """C source exporting each symbol as a function returning NULL (``asm`` labels carry C++ mangled names)."""
    lines = [f"/* Generated by scripts/trt_surfaces.py: stand-in for {soname}; every entry point returns NULL. */"]
    for i, symbol in enumerate(sorted(symbols)):
        lines.append(f'void *trt_stub_{i}(void) __asm__("{symbol}");')
        lines.append(f"void *trt_stub_{i}(void) {{ return 0; }}")
    return "\n".join(lines) + "\n"


def compile_stub(soname: str, symbols: list[str], out_dir: Path) -> Path:
    """Compile a stub library named ``soname`` (with that SONAME) into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    source = out_dir / (soname.split(".so")[0] + "_stub.c")
    source.write_text(stub_source(soname, symbols))
    target = out_dir / soname
    command = ["gcc", "-shared", "-fPIC", "-O0", f"-Wl,-soname,{soname}", "-o", str(target), str(source)]
    result = _run(command, check=False)
    if result.returncode != 0:
        raise SurfaceError(f"gcc could not compile the stub {soname}: {_last_lines(result.stderr)}")
    return target


SHIM = '''"""Generated by scripts/trt_surfaces.py: TensorRT {version}'s real Python bindings over stub libraries.

Enums, classes, methods and properties are the real ones; the libraries behind them are stubs returning NULL,
so creating a Builder, Runtime or OnnxParser raises, as on a machine without a GPU.
"""
import ctypes as _ctypes
import os as _os
import sys as _sys

_STUBS = _os.path.join(_os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))), "_stubs")
# Loaded first so the binding's NEEDED entries match these already-loaded SONAMEs instead of a search path.
for _name in {libraries!r}:
    _ctypes.CDLL(_os.path.join(_STUBS, _name), mode=_ctypes.RTLD_GLOBAL)

import tensorrt_bindings as _bindings  # noqa: E402

if not getattr(_bindings, "__version__", None):
    _bindings.__version__ = {version!r}
# `import tensorrt` yields the bindings module itself, so attribute access is exactly the real surface.
_sys.modules[__name__] = _bindings
'''


def write_shim(target: Path, version: str, libraries: list[str]) -> None:
    package = target / "tensorrt"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(SHIM.format(version=version, libraries=libraries))


# --- one version ---------------------------------------------------------------------------------------------------


def prepared(target: Path, version: str) -> dict | None:
    """The marker of a finished surface for this version and Python, else None."""
    try:
        marker = json.loads((target / MARKER).read_text())
    except (OSError, ValueError):
        return None
    same = (marker.get("version"), marker.get("python"), marker.get("format")) == (version, python_tag(), FORMAT)
    return marker if same else None


def prepare(version: str, root: Path = DEFAULT_ROOT, *, cuda: str = "12", force: bool = False) -> dict:
    """Prepare ``<root>/<version>/`` (cached) and return its marker.

    Raises:
        SurfaceError: a tool or the wheel is missing, a stub does not compile, or the result does not import.
    """
    target = root / version
    marker = None if force else prepared(target, version)
    if marker:
        return marker
    check_tools()
    root.mkdir(parents=True, exist_ok=True)
    wheel = download_wheel(version, root / "_wheels", cuda)
    with tempfile.TemporaryDirectory(dir=root, prefix=f".{version}-") as tmp:
        staging = Path(tmp) / version
        marker = _build(version, wheel, staging)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    return marker


def _build(version: str, wheel: Path, staging: Path) -> dict:
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(staging, [n for n in archive.namelist() if n.startswith("tensorrt_bindings/")])
    binding = _binding_library(staging / "tensorrt_bindings")
    needed = needed_libraries(binding)
    trt_libs = [name for name in needed if _is_trt_library(name)]
    if not trt_libs:
        raise SurfaceError(f"{binding.name} of {wheel.name} needs no TensorRT library; is this a bindings wheel?")
    symbols = {name: [] for name in trt_libs}
    for symbol in trt_symbols(binding, needed):
        symbols[library_of(symbol, trt_libs)].append(symbol)
    for soname, names in symbols.items():
        compile_stub(soname, names, staging / "_stubs")
    write_shim(staging, version, trt_libs)
    marker = {"version": version, "python": python_tag(), "format": FORMAT, "wheel": wheel.name,
              "binding": binding.name, "stubs": symbols}
    marker["imported_version"] = _check_import(staging, version)
    (staging / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    return marker


def _binding_library(package: Path) -> Path:
    candidates = sorted(package.glob("tensorrt*.so"))
    if not candidates:
        raise SurfaceError(f"No tensorrt*.so in {package}; the wheel's layout is not the expected one.")
    return candidates[0]


def _check_import(path: Path, version: str) -> str:
    """Import the surface in a fresh Python (TensorRT bindings cannot be unloaded) and return its __version__."""
    code = "import tensorrt; print(tensorrt.__version__); print(len(tensorrt.BuilderFlag.__members__))"
    env = dict(os.environ, PYTHONPATH=str(path))
    result = _run([sys.executable, "-c", code], check=False, env=env)
    if result.returncode != 0:
        raise SurfaceError(f"TensorRT {version}'s surface does not import: {_last_lines(result.stderr)}")
    return result.stdout.split()[0]


def check_tools() -> None:
    """Raise SurfaceError naming what to install when gcc, nm or readelf/objdump is missing."""
    missing = [tool for tool in ("gcc", "nm") if not shutil.which(tool)]
    if not (shutil.which("readelf") or shutil.which("objdump")):
        missing.append("readelf (or objdump)")
    if missing:
        raise SurfaceError(
            f"Missing tools: {', '.join(missing)}. Install a C compiler and binutils "
            "(e.g. `apt-get install gcc binutils`) to build the stub libraries."
        )


# --- helpers and CLI -----------------------------------------------------------------------------------------------


def _run(command: list[str], *, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    try:
        result = subprocess.run(command, capture_output=True, text=True, env=env)
    except FileNotFoundError as exc:
        raise SurfaceError(f"`{command[0]}` is not installed ({exc}).") from exc
    if check and result.returncode != 0:
        raise SurfaceError(f"`{' '.join(command)}` failed: {_last_lines(result.stderr)}")
    return result


def _last_lines(text: str, n: int = 3) -> str:
    lines = [line for line in (text or "").strip().splitlines() if "is ignored: it is neither" not in line]
    return " | ".join(lines[-n:]) or "(no output)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("versions", nargs="*", default=list(CI_VERSIONS),
                        help=f"TensorRT versions (default: {' '.join(CI_VERSIONS)})")
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="cache folder (default: .trt-surfaces/)")
    parser.add_argument("--cuda", default="12", choices=("12", "13"), help="CUDA flavour of 10.x+ wheels")
    parser.add_argument("--force", action="store_true", help="rebuild even when cached")
    parser.add_argument("--available", action="store_true", help="list the versions pip can download, then exit")
    args = parser.parse_args(argv)
    if args.available:
        for package, versions in available_versions(args.cuda).items():
            print(f"{package} ({python_tag()}): {', '.join(versions) or 'none'}")
        return 0
    args.root.mkdir(parents=True, exist_ok=True)
    failed = 0
    for version in args.versions:
        start = time.perf_counter()
        try:
            marker = prepare(version, args.root.resolve(), cuda=args.cuda, force=args.force)
        except SurfaceError as exc:
            failed += 1
            print(f"{version}: FAILED: {exc}", file=sys.stderr)
            continue
        libs = ", ".join(f"{name} ({len(syms)})" for name, syms in marker["stubs"].items())
        print(f"{version}: ready in {time.perf_counter() - start:.1f}s at {args.root / version} [{libs}]")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
