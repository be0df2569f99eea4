"""What Triton's Python backend needs from this interpreter, prepared or refused with the reason.

pytriton runs each model through Triton's Python backend: a stub process, built per Python minor version, that loads
``libpython3.X.so.1.0`` and then this interpreter's standard library. The library must be this interpreter's own. When
the dynamic loader finds another one first (a pyenv Python 3.11.7 on a system whose ``/usr/lib`` has Debian's 3.11.2),
the stub runs 3.11.2's C core under 3.11.7's standard library and fails in ``initialize`` (``'_thread.RLock' object has
no attribute '_recursion_count'``, the first 3.11.7 library call into a C function 3.11.2 lacks). When it finds none,
the model never becomes ready. :func:`backend_environment` puts this interpreter's library folder first on
``LD_LIBRARY_PATH`` for the server's process.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

from trtkit.errors import DependencyError

INSTALL_HINT = 'pip install "trtkit[serve]"'


def require_pytriton():
    """The ``pytriton`` package.

    Raises:
        DependencyError: it is not installed (with the command that installs it).
    """
    try:
        import pytriton
        import pytriton.triton  # noqa: F401  (the server part, which needs tritonclient too)
    except ImportError as exc:
        raise DependencyError(f"trtkit serve needs nvidia-pytriton ({exc}); install it with {INSTALL_HINT}") from exc
    return pytriton


def python_library(config=None, version=None) -> Path:
    """This interpreter's ``libpython3.X.so.1.0``, which the Python backend's stub loads.

    Args:
        config: sysconfig variables (tests pass others); default: this interpreter's.
        version: ``(major, minor)``; default: this interpreter's.

    Raises:
        DependencyError: this Python was built without a shared library (a static build), or it is missing.
    """
    get = (config or {}).get if config is not None else sysconfig.get_config_var
    major, minor = version or sys.version_info[:2]
    soname = get("INSTSONAME") or f"libpython{major}.{minor}.so.1.0"
    libdir = get("LIBDIR")
    if not get("Py_ENABLE_SHARED") or not libdir or not (Path(libdir) / soname).exists():
        raise DependencyError(
            f"Triton's Python backend loads {soname}, but this Python ({sys.executable}) was built without it "
            f"(a static build); use a Python built with --enable-shared (pyenv: env PYTHON_CONFIGURE_OPTS="
            f"--enable-shared pyenv install {major}.{minor}.N; or the distribution's python{major}.{minor}) and "
            f"install trtkit there"
        )
    return Path(libdir) / soname


def check_backend_stub(pytriton_dir, version=None) -> Path:
    """The Python backend stub pytriton ships for this Python minor version.

    Raises:
        DependencyError: pytriton has no stub for this Python (naming the versions it has).
    """
    major, minor = version or sys.version_info[:2]
    stubs = Path(pytriton_dir) / "tritonserver" / "python_backend_stubs"
    stub = stubs / f"{major}.{minor}" / "triton_python_backend_stub"
    if not stub.exists():
        have = sorted(p.name for p in stubs.iterdir()) if stubs.is_dir() else []
        raise DependencyError(
            f"nvidia-pytriton has no Python backend stub for Python {major}.{minor} "
            f"(it has {', '.join(have) or 'none'}); run trtkit serve under one of those"
        )
    return stub


def backend_environment(environ=None) -> dict:
    """Environment variables for the Triton server process: ``LD_LIBRARY_PATH`` with this interpreter's library
    folder first, so the backend stub loads this interpreter's ``libpython``.

    Raises:
        DependencyError: pytriton is missing, has no stub for this Python, or this Python has no shared library.
    """
    pytriton = require_pytriton()
    check_backend_stub(Path(pytriton.__file__).parent)
    libdir = str(python_library().parent)
    environ = os.environ if environ is None else environ
    rest = [p for p in environ.get("LD_LIBRARY_PATH", "").split(":") if p and p != libdir]
    return {"LD_LIBRARY_PATH": ":".join([libdir, *rest])}
