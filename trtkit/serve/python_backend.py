"""``trtkit serve --backend python``: each model instance one TrtRunner inside Triton's Python backend.

:func:`write_repository` writes a model repository whose models are Triton Python-backend models (``backend:
"python"``, :mod:`trtkit.serve.python_backend_model` as ``model.py``, the engine path and each instance's GPU as
parameters); :class:`~trtkit.serve.tritonserver.TritonProcess` runs the pytriton wheel's ``tritonserver`` on it.
Triton starts one backend stub process per instance, and each stub holds its runner: a batch goes from Triton to its
stub and back, nowhere else.

The stub loads ``libpython3.X.so.1.0``, which must be this interpreter's own (another patch release's C core under
this standard library fails in ``initialize``; none at all, and the model never becomes ready):
:func:`backend_environment` puts this interpreter's library folder first on ``LD_LIBRARY_PATH`` for the server.
pytriton's stubs are built against numpy 1; under numpy 2 they answer every request with no data, so
:func:`check_numpy` refuses to start then.
"""

from __future__ import annotations

import os
import re
import sys
import sysconfig
from pathlib import Path

from trtkit._atomic import write_text_atomic
from trtkit._version_compat import version_parts
from trtkit.errors import DependencyError
from trtkit.serve import python_backend_model

# a requirement string: its name, then (after any extras) its version clauses up to the environment marker
_REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?([^;]*)")


def numpy_ceiling(requirements) -> tuple | None:
    """The numpy versions a package's requirements exclude from above: ``(version text, inclusive)`` of the
    tightest ``numpy<X`` or ``numpy<=X`` (e.g. ``("2.0.0", False)`` for ``numpy<2.0.0,>=1.21``), or None when they
    set no upper bound.

    Args:
        requirements: requirement strings as ``importlib.metadata.requires`` gives them.
    """
    best = None
    for match in _numpy_requirements(requirements):
        for clause in match.group(2).strip(" ()").split(","):
            clause = clause.strip()
            if clause.startswith("<"):
                inclusive = clause.startswith("<=")
                text = clause[2 if inclusive else 1 :].strip()
                if best is None or _padded(text) < _padded(best[0]):
                    best = (text, inclusive)
    return best


def _numpy_requirements(requirements) -> list:
    """The matches of :data:`_REQUIREMENT` that name numpy."""
    matches = [_REQUIREMENT.match(r) for r in requirements or ()]
    return [m for m in matches if m is not None and m.group(1).lower() == "numpy"]


def _padded(text) -> tuple:
    """A version's numeric parts padded to four, so ``"2.0"`` and ``"2.0.0"`` compare equal."""
    parts = version_parts(text)
    return parts + (0,) * (4 - len(parts))


def check_numpy(numpy_version=None, requirements=None, pytriton_version=None) -> None:
    """Refuse a numpy that nvidia-pytriton's requirements exclude (its Python backend stub is built against numpy 1
    and returns empty outputs under numpy 2).

    Args:
        numpy_version / requirements / pytriton_version: default: the installed numpy, nvidia-pytriton's declared
            requirements and its version (tests pass others).

    Raises:
        DependencyError: numpy is at or above nvidia-pytriton's ceiling (naming both versions, the pin and the fix).
    """
    if numpy_version is None:
        import numpy

        numpy_version = numpy.__version__
    if requirements is None or pytriton_version is None:
        from importlib import metadata

        try:
            requirements = metadata.requires("nvidia-pytriton") if requirements is None else requirements
            pytriton_version = metadata.version("nvidia-pytriton") if pytriton_version is None else pytriton_version
        except metadata.PackageNotFoundError:  # pytriton without its metadata: nothing declared to check against
            return
    ceiling = numpy_ceiling(requirements)
    if ceiling is None:
        return
    text, inclusive = ceiling
    have, limit = _padded(numpy_version), _padded(text)
    if have > limit or (have == limit and not inclusive):
        pin = ", ".join(m.group(0).strip() for m in _numpy_requirements(requirements))
        raise DependencyError(
            f"trtkit serve cannot run with numpy {numpy_version}: nvidia-pytriton {pytriton_version} requires "
            f"{pin}, and under numpy {'.'.join(map(str, have[:1]))} its Python backend stub (built against numpy 1) "
            "hands Triton every output with no data (clients fail with 'cannot reshape array of size 0'); install a "
            f'numpy it accepts in this environment (pip install "numpy{"<=" if inclusive else "<"}{text}"), or '
            "serve from an environment that has one"
        )


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


def backend_stub() -> Path:
    """The Python backend stub the pytriton wheel ships for this Python.

    Raises:
        DependencyError: pytriton is missing or has no stub for this Python.
    """
    from trtkit.serve.tritonserver import require_pytriton

    return check_backend_stub(Path(require_pytriton().__file__).parent)


def backend_environment(environ=None) -> dict:
    """Environment variables for the Triton server process: ``LD_LIBRARY_PATH`` with this interpreter's library
    folder first, so the backend stub loads this interpreter's ``libpython``.

    Raises:
        DependencyError: pytriton is missing, has no stub for this Python, numpy is one pytriton excludes, or this
            Python has no shared library.
    """
    environ = os.environ if environ is None else environ
    check_numpy()
    backend_stub()
    libdir = str(python_library().parent)
    rest = [p for p in environ.get("LD_LIBRARY_PATH", "").split(":") if p and p != libdir]
    return {"LD_LIBRARY_PATH": ":".join([libdir, *rest])}


def model_config(model, settings) -> str:
    """The ``config.pbtxt`` of one :class:`~trtkit.serve.server.LoadedModel` for Triton's Python backend."""
    import json

    from trtkit.export.triton import io_and_batching_lines

    lines = [f'name: "{model.name}"', 'backend: "python"']
    lines += io_and_batching_lines(
        model.spec, model.max_batch, model.preferred_batch_sizes, settings.max_queue_delay_us
    )
    groups = [
        f'  {{ name: "{python_backend_model.GROUP_PREFIX}{gpu}" count: {int(settings.instances)} kind: KIND_CPU }}'
        for gpu in settings.gpus
    ]
    lines.append("instance_group [\n" + ",\n".join(groups) + "\n]")
    params = {"engine": str(Path(model.engine).resolve()), "cuda_graph": "1" if settings.cuda_graph else "0"}
    lines += [f'parameters {{ key: "{k}" value: {{ string_value: {json.dumps(v)} }} }}' for k, v in params.items()]
    return "\n".join(lines) + "\n"


def write_repository(models: list, settings, repo: Path) -> Path:
    """``repo/<name>/config.pbtxt`` and ``repo/<name>/1/model.py`` for each model (``repo`` made when missing)."""
    model_py = Path(python_backend_model.__file__).read_text()
    for model in models:
        folder = Path(repo) / model.name
        (folder / "1").mkdir(parents=True, exist_ok=True)
        write_text_atomic(folder / "config.pbtxt", model_config(model, settings))
        write_text_atomic(folder / "1" / "model.py", model_py)
    return Path(repo)
