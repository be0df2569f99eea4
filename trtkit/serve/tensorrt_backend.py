"""``trtkit serve --backend tensorrt``: the engines on Triton's own TensorRT backend, no Python in the request path.

The pytriton wheel ships ``tritonserver`` with the Python backend only. Given a folder that holds Triton's TensorRT
backend (``tensorrt/libtriton_tensorrt.so``, built for that wheel's Triton and this environment's TensorRT:
``scripts/build_triton_trt_backend.sh``), :func:`write_repository` writes each engine as a ``platform: "tensorrt_plan"``
model (``trtkit export triton``'s config), and :class:`~trtkit.serve.tritonserver.TritonProcess` runs ``tritonserver``
with that backend, which loads the engines with this environment's TensorRT libraries (on ``LD_LIBRARY_PATH``).
"""

from __future__ import annotations

import os
from pathlib import Path

from trtkit._atomic import write_text_atomic
from trtkit.errors import DependencyError, ServeError

BACKEND_LIBRARY = "libtriton_tensorrt.so"
_BUILD_HINT = (
    "build it for this Triton and TensorRT with scripts/build_triton_trt_backend.sh, or take the backends folder "
    "of NVIDIA's Triton container of the same release"
)


def tensorrt_backend(folder) -> Path:
    """The ``tensorrt`` backend folder inside ``folder`` (Triton's backend directory layout).

    Raises:
        DependencyError: ``folder`` is not given, missing, or has no ``tensorrt/libtriton_tensorrt.so``.
    """
    if not folder:
        raise DependencyError(
            "The tensorrt backend needs Triton's TensorRT backend, which the pytriton wheel does not carry: give "
            f"triton_backends, the folder that holds tensorrt/{BACKEND_LIBRARY}; {_BUILD_HINT}",
            field="triton_backends",
        )
    path = Path(folder) / "tensorrt"
    if not (path / BACKEND_LIBRARY).is_file():
        what = "does not exist" if not Path(folder).is_dir() else f"has no tensorrt/{BACKEND_LIBRARY}"
        raise DependencyError(f"Triton backends folder '{folder}' {what}; {_BUILD_HINT}", field="triton_backends")
    return path


def tensorrt_library_dir(trt=None) -> Path:
    """The folder of this environment's ``libnvinfer.so.N`` (the pip wheel's: beside the ``tensorrt`` module, or in
    ``tensorrt_libs``), which Triton's TensorRT backend must load to read engines trtkit built.

    Raises:
        DependencyError: TensorRT is not importable, or its libraries are not next to it (a system install: put
            their folder on LD_LIBRARY_PATH yourself and pass ``trt`` a module whose folder holds them).
    """
    if trt is None:
        from trtkit._lazy import tensorrt

        trt = tensorrt()
    here = Path(trt.__file__).resolve().parent
    for folder in (here, here.parent / "tensorrt_libs"):
        if any(folder.glob("libnvinfer.so.*")):
            return folder
    raise DependencyError(
        f"No libnvinfer.so.* next to the tensorrt module ({here}) or in tensorrt_libs; Triton's TensorRT backend "
        "needs the TensorRT libraries the engines were built with: install TensorRT from pip in this environment"
    )


def model_config(model, settings) -> str:
    """The ``config.pbtxt`` of one :class:`~trtkit.serve.server.LoadedModel` for Triton's TensorRT backend."""
    from trtkit.export.triton import TENSORRT_CONFIG_OPTIONS, config_pbtxt, graph_batch_sizes, tensorrt_options

    return config_pbtxt(
        model.spec,
        instances=int(settings.instances),
        gpus=tuple(settings.gpus),
        max_queue_delay_us=int(settings.max_queue_delay_us),
        cuda_graphs=settings.cuda_graph,
        max_batch=model.max_batch,
        preferred=model.preferred_batch_sizes,
        graph_batch_sizes=graph_batch_sizes(model.max_batch, settings.graph_batches),
        options=tuple(n for n in tensorrt_options(settings.tensorrt_options) if n in TENSORRT_CONFIG_OPTIONS),
    )


def backend_config(settings) -> dict:
    """tritonserver's ``--backend-config`` for the TensorRT backend: ``execution-policy=BLOCKING`` (an instance per
    thread) when ``blocking`` is among the settings' ``tensorrt_options``, else nothing (DEVICE_BLOCKING)."""
    from trtkit.export.triton import tensorrt_options

    return (
        {"backend-config": "tensorrt,execution-policy=BLOCKING"}
        if "blocking" in tensorrt_options(settings.tensorrt_options)
        else {}
    )


def write_repository(models: list, settings, repo: Path) -> Path:
    """``repo/<name>/config.pbtxt`` and ``repo/<name>/1/model.plan`` (a link to the engine) for each model.

    Raises:
        ServeError: the repository cannot be written.
    """
    for model in models:
        folder = Path(repo) / model.name
        try:
            (folder / "1").mkdir(parents=True, exist_ok=True)
            plan = folder / "1" / "model.plan"
            if plan.is_symlink() or plan.exists():
                plan.unlink()
            os.symlink(Path(model.engine).resolve(), plan)
            write_text_atomic(folder / "config.pbtxt", model_config(model, settings))
        except OSError as exc:
            raise ServeError(f"Cannot write the model repository '{repo}': {exc.strerror or exc}") from exc
    return Path(repo)


def backend_environment(trt=None, environ=None) -> dict:
    """Environment variables for the Triton server process: this environment's TensorRT libraries first on
    ``LD_LIBRARY_PATH``.

    Raises:
        DependencyError: pytriton is missing, or TensorRT's libraries are not found (:func:`tensorrt_library_dir`).
    """
    from trtkit.serve.tritonserver import require_pytriton

    require_pytriton()
    environ = os.environ if environ is None else environ
    libs = str(tensorrt_library_dir(trt))
    rest = [p for p in environ.get("LD_LIBRARY_PATH", "").split(":") if p and p != libs]
    return {"LD_LIBRARY_PATH": ":".join([libs, *rest])}
