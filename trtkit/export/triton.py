"""A Triton Inference Server model from a TensorRT engine: its I/O and batch limits, and a model repository.

    model = triton_model("resnet50.engine")                    # inputs, outputs, max batch from profile 0
    write_repository("resnet50.engine", "models/")             # models/resnet50/{config.pbtxt, 1/model.plan}

Triton batches along the first dimension: an engine whose every I/O tensor has a dynamic first dimension is served
with ``max_batch_size`` = the profile's largest batch, and dims without that dimension. An engine with a fixed first
dimension is served unbatched (``max_batch_size: 0``, full dims).

Triton's TensorRT backend loads a plan only with the TensorRT it was built with: :data:`TRITON_TENSORRT` says which
Triton releases carry which TensorRT, and :func:`triton_releases_for` which ones can load a given engine.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trtkit._atomic import write_bytes_atomic, write_text_atomic
from trtkit.errors import ProfileError, TrtkitError

logger = logging.getLogger("trtkit")

# Triton container release -> (Triton server version, TensorRT major.minor.patch it ships).
# Source: the "NVIDIA Triton Inference Server Container Versions" tables of Triton's release notes
# (docs.nvidia.com/deeplearning/triton-inference-server/release-notes/rel-YY-MM.html) and the Frameworks Support
# Matrix. The 22.x, 24.05 and 24.12 rows were read there again for this table; the others follow the same notes and
# should be re-read there when a row matters.
TRITON_TENSORRT = {
    "22.02": ("2.19.0", "8.2.3"),
    "22.05": ("2.22.0", "8.2.5"),
    "22.08": ("2.25.0", "8.4.2"),
    "22.11": ("2.28.0", "8.5.1"),
    "23.04": ("2.33.0", "8.6.1"),
    "23.05": ("2.34.0", "8.6.1"),
    "23.06": ("2.35.0", "8.6.1"),
    "23.07": ("2.36.0", "8.6.1"),
    "23.08": ("2.37.0", "8.6.1"),
    "23.09": ("2.38.0", "8.6.1"),
    "23.10": ("2.39.0", "8.6.1"),
    "23.11": ("2.40.0", "8.6.1"),
    "23.12": ("2.41.0", "8.6.1"),
    "24.01": ("2.42.0", "8.6.1"),
    "24.05": ("2.46.0", "10.0.1"),
    "24.12": ("2.53.0", "10.7.0"),
}

# numpy dtype name -> Triton's model-config data type
_TRITON_DTYPES = {
    "float32": "TYPE_FP32",
    "float16": "TYPE_FP16",
    "int8": "TYPE_INT8",
    "int32": "TYPE_INT32",
    "int64": "TYPE_INT64",
    "uint8": "TYPE_UINT8",
    "bool": "TYPE_BOOL",
}


@dataclass(frozen=True)
class TritonTensor:
    """One input or output as Triton sees it: ``dims`` leave out the batch dimension of a batched model."""

    name: str
    dtype: np.dtype
    dims: tuple

    @property
    def triton_dtype(self) -> str:
        return _TRITON_DTYPES[np.dtype(self.dtype).name]


@dataclass(frozen=True)
class TritonModel:
    """What Triton needs to know about an engine to serve it.

    Attributes:
        name: the model's name on the server.
        inputs / outputs: the engine's I/O tensors.
        max_batch_size: the profile's largest batch (0: the engine is not batched along its first dimension).
        preferred_batch_sizes: the profile's opt and max batch, for the dynamic batcher.
        tensorrt: the TensorRT version the engine was built with (from its manifest), when known.
    """

    name: str
    inputs: tuple
    outputs: tuple
    max_batch_size: int
    preferred_batch_sizes: tuple = ()
    tensorrt: str | None = None
    profile_max: dict = field(default_factory=dict)

    def tensor(self, name: str) -> TritonTensor:
        for t in self.inputs + self.outputs:
            if t.name == name:
                return t
        raise TrtkitError(f"Model '{self.name}' has no tensor '{name}'")


def model_name_of(engine_path) -> str:
    """A Triton model name from an engine file name: the stem, with anything but letters, digits, ``-_.`` as ``_``."""
    stem = Path(engine_path).name.split(".")[0] or "model"
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in stem)


def triton_model(engine, *, name: str | None = None, profile: int = 0, trt=None) -> TritonModel:
    """Describe an engine file for Triton from its I/O tensors and optimization ``profile``.

    Args:
        engine: the engine file.
        name: the model's name on the server (default: from the file name).
        profile: the optimization profile whose batch range is served.
        trt: the ``tensorrt`` module (tests pass a fake).

    Raises:
        EngineError: the file is not an engine TensorRT can load.
        ProfileError: the profile's smallest batch is above 1 (Triton may send a batch of 1), or the inputs'
            batch ranges differ.
    """
    from trtkit.manifest import read_manifest
    from trtkit.runtime.engine import io_specs, load_engine

    path = Path(engine)
    loaded = load_engine(path, check_manifest=False, trt=trt)
    specs = io_specs(loaded, trt=trt)
    if profile >= max(1, loaded.num_optimization_profiles):
        raise ProfileError(
            f"Engine '{path}' has {loaded.num_optimization_profiles} optimization profile(s); "
            f"profile {profile} does not exist"
        )
    manifest = read_manifest(path)
    version = manifest.environment.tensorrt if manifest is not None else None
    return _describe(name or model_name_of(path), list(specs.values()), profile, version, str(path))


def _describe(name: str, specs: list, profile: int, version, where: str) -> TritonModel:
    batched = all(s.shape and s.shape[0] == -1 for s in specs)
    inputs = [s for s in specs if s.is_input]
    if not batched:
        tensors = [TritonTensor(s.name, s.dtype, tuple(s.shape)) for s in specs]
        return TritonModel(
            name,
            tuple(t for t, s in zip(tensors, specs) if s.is_input),
            tuple(t for t, s in zip(tensors, specs) if not s.is_input),
            0,
            (),
            version,
            {s.name: tuple(s.profile_range(profile)[2]) for s in inputs},
        )
    ranges = {s.name: s.profile_range(profile) for s in inputs}
    batches = {(r[0][0], r[1][0], r[2][0]) for r in ranges.values()}
    if len(batches) != 1:
        listed = ", ".join(f"'{n}' {r[0][0]}..{r[2][0]}" for n, r in ranges.items())
        raise ProfileError(
            f"Engine '{where}': the inputs' batch ranges in profile {profile} differ ({listed}); "
            f"Triton batches every input alike: rebuild with one batch range"
        )
    lo, opt, hi = batches.pop()
    if lo > 1:
        raise ProfileError(
            f"Engine '{where}': profile {profile} takes batches {lo}..{hi}, but Triton sends any "
            f"batch from 1; rebuild with a smallest batch of 1 (e.g. profiles=[parse_shapes("
            f"'x:1x...,{opt}x...,{hi}x...')])"
        )
    tensors = [TritonTensor(s.name, s.dtype, tuple(s.shape[1:])) for s in specs]
    return TritonModel(
        name,
        tuple(t for t, s in zip(tensors, specs) if s.is_input),
        tuple(t for t, s in zip(tensors, specs) if not s.is_input),
        int(hi),
        tuple(sorted({int(opt), int(hi)})),
        version,
        {n: tuple(r[2]) for n, r in ranges.items()},
    )


def triton_releases_for(tensorrt_version: str | None) -> list:
    """The Triton container releases (``"YY.MM"``) whose TensorRT is ``tensorrt_version`` (major.minor.patch)."""
    if not tensorrt_version:
        return []
    wanted = ".".join(str(tensorrt_version).split(".")[:3])
    return [release for release, (_, trt) in TRITON_TENSORRT.items() if trt == wanted]


def check_triton_version(model: TritonModel, triton_version: str | None) -> list:
    """Warnings about serving ``model`` on ``triton_version`` (a container release ``YY.MM`` or server ``2.X.Y``)."""
    warnings = []
    releases = triton_releases_for(model.tensorrt)
    if model.tensorrt is None:
        warnings.append(
            f"Model '{model.name}': the engine has no manifest naming its TensorRT version; Triton's "
            f"TensorRT backend loads it only with the TensorRT it was built with"
        )
    elif not releases:
        warnings.append(
            f"Model '{model.name}': no Triton release in trtkit's table carries TensorRT {model.tensorrt} "
            f"(the engine's); Triton will refuse the plan unless the engine is rebuilt with the "
            f"TensorRT of the Triton you deploy on"
        )
    if triton_version and model.tensorrt:
        release = _release_of(triton_version)
        if release is None:
            warnings.append(
                f"Triton {triton_version} is not in trtkit's table; it cannot say which TensorRT it has "
                f"(known: {', '.join(TRITON_TENSORRT)})"
            )
        elif release not in releases:
            carried = TRITON_TENSORRT[release][1]
            fits = ", ".join(releases) or "none in trtkit's table"
            warnings.append(
                f"Model '{model.name}' was built with TensorRT {model.tensorrt}, but Triton "
                f"{triton_version} carries TensorRT {carried}: it will refuse the plan. Releases with "
                f"TensorRT {model.tensorrt}: {fits}"
            )
    return warnings


def _release_of(version: str) -> str | None:
    if version in TRITON_TENSORRT:
        return version
    for release, (server, _) in TRITON_TENSORRT.items():
        if server == version or server.rsplit(".", 1)[0] == version:
            return release
    return None


def config_pbtxt(
    model: TritonModel, *, instances: int = 1, gpus: tuple = (), max_queue_delay_us: int = 100, cuda_graphs: bool = True
) -> str:
    """The ``config.pbtxt`` of ``model`` for Triton's TensorRT backend (``platform: "tensorrt_plan"``)."""
    lines = [f'name: "{model.name}"', 'platform: "tensorrt_plan"', f"max_batch_size: {model.max_batch_size}"]
    for section, tensors in (("input", model.inputs), ("output", model.outputs)):
        items = [
            f'  {{ name: "{t.name}" data_type: {t.triton_dtype} dims: [ {", ".join(map(str, t.dims))} ] }}'
            for t in tensors
        ]
        lines.append(f"{section} [\n" + ",\n".join(items) + "\n]")
    if model.max_batch_size > 0:
        sizes = ", ".join(map(str, model.preferred_batch_sizes))
        lines.append(
            f"dynamic_batching {{\n  preferred_batch_size: [ {sizes} ]\n"
            f"  max_queue_delay_microseconds: {int(max_queue_delay_us)}\n}}"
        )
    gpu_list = f" gpus: [ {', '.join(map(str, gpus))} ]" if gpus else ""
    lines.append(f"instance_group [ {{ count: {int(instances)} kind: KIND_GPU{gpu_list} }} ]")
    if cuda_graphs:
        lines.append("optimization { cuda { graphs: true } }")
    return "\n".join(lines) + "\n"


@dataclass
class ExportResult:
    """What :func:`write_repository` wrote: the model folder, its config text and any version warnings."""

    model: TritonModel
    folder: Path
    config: str
    warnings: list


def write_repository(
    engine,
    repo,
    *,
    name: str | None = None,
    instances: int = 1,
    gpus: tuple = (),
    max_queue_delay_us: int = 100,
    cuda_graphs: bool = True,
    triton_version: str | None = None,
    force: bool = False,
    trt=None,
) -> ExportResult:
    """Write ``repo/<name>/config.pbtxt`` and ``repo/<name>/1/model.plan`` for Triton's TensorRT backend.

    The model folder is assembled beside the repository and moved in whole, so Triton polling the repository never
    sees half a model.

    Args:
        engine: the engine file.
        repo: the model repository folder (created if missing).
        name: the model's name (default: from the engine's file name).
        instances: model instances per GPU (``instance_group`` count).
        gpus: GPU indices for the instances (default: every GPU).
        max_queue_delay_us: the dynamic batcher's longest wait for a fuller batch.
        cuda_graphs: ask the TensorRT backend to capture CUDA graphs.
        triton_version: the Triton you deploy on (``24.01`` or ``2.42.0``): warns if its TensorRT differs.
        force: write into a repository that exists and is not empty (replacing a model of the same name).
        trt: the ``tensorrt`` module (tests pass a fake).

    Raises:
        TrtkitError: the repository exists and is not empty and ``force`` is false; ``instances`` below 1.
        EngineError / ProfileError: see :func:`triton_model`.
    """
    if int(instances) < 1:
        raise TrtkitError(f"instances must be 1 or more, not {instances}")
    repo = Path(repo)
    if repo.exists() and not repo.is_dir():
        raise TrtkitError(f"Model repository '{repo}' is a file; give a folder")
    if repo.is_dir() and any(repo.iterdir()) and not force:
        raise TrtkitError(
            f"Model repository '{repo}' exists and is not empty; pass force=True to add or "
            f"replace the model there, or give an empty or new folder"
        )
    model = triton_model(engine, name=name, trt=trt)
    warnings = check_triton_version(model, triton_version)
    for text in warnings:
        logger.warning("%s", text)
    text = config_pbtxt(
        model, instances=instances, gpus=tuple(gpus), max_queue_delay_us=max_queue_delay_us, cuda_graphs=cuda_graphs
    )
    folder = _place_model(repo, model.name, Path(engine).read_bytes(), text)
    return ExportResult(model, folder, text, warnings)


def _place_model(repo: Path, name: str, plan: bytes, config: str) -> Path:
    try:
        repo.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=repo))
        staging.chmod(0o755)  # mkdtemp makes it private; the server may run as another user
    except OSError as exc:
        raise TrtkitError(f"Cannot write model repository '{repo}': {exc.strerror or exc}") from exc
    try:
        (staging / "1").mkdir()
        write_bytes_atomic(staging / "1" / "model.plan", plan)
        write_text_atomic(staging / "config.pbtxt", config)
        for path in (staging / "1", staging / "1" / "model.plan", staging / "config.pbtxt"):
            path.chmod(0o755 if path.is_dir() else 0o644)  # temp files are private; Triton may run as another user
        target = repo / name
        if target.exists():
            old = repo / f".{name}.replaced"
            shutil.rmtree(old, ignore_errors=True)
            target.rename(old)
            staging.rename(target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target
