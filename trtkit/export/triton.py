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

from trtkit import _check
from trtkit._atomic import write_bytes_atomic, write_text_atomic
from trtkit._version_compat import version_parts
from trtkit.errors import ProfileError, TrtkitError

logger = logging.getLogger("trtkit")

# Triton container release -> (Triton server version, the TensorRT it ships, or None where no source names it:
# check_triton_version says so). docs/triton.md gives each row's source. TensorRT versions are written as the source
# gives them (with the build number where it does: Triton 23.04 and 23.05 carry 8.6.1.2 and refuse 8.6.1.6 plans).
TRITON_TENSORRT = {
    "22.02": ("2.19.0", "8.2.3"),
    "22.03": ("2.20.0", "8.2.3"),
    "22.04": ("2.21.0", "8.2.4"),
    "22.05": ("2.22.0", "8.2.5.1"),
    "22.06": ("2.23.0", None),
    "22.07": ("2.24.0", None),
    "22.08": ("2.25.0", "8.4.2.4"),
    "22.09": ("2.26.0", None),
    "22.10": ("2.27.0", None),
    "22.11": ("2.28.0", "8.5.1"),
    "22.12": ("2.29.0", None),
    "23.01": ("2.30.0", None),
    "23.02": ("2.31.0", None),
    "23.03": ("2.32.0", None),
    "23.04": ("2.33.0", "8.6.1.2"),
    "23.05": ("2.34.0", "8.6.1.2"),
    "23.06": ("2.35.0", None),
    "23.07": ("2.36.0", None),
    "23.08": ("2.37.0", None),
    "23.09": ("2.38.0", None),
    "23.10": ("2.39.0", None),
    "23.11": ("2.40.0", None),
    "23.12": ("2.41.0", None),
    "24.01": ("2.42.0", None),
    "24.02": ("2.43.0", "8.6.3.1"),
    "24.03": ("2.44.0", "8.6.3.1"),
    "24.04": ("2.45.0", "8.6.3.1"),
    "24.05": ("2.46.0", None),
    "24.06": ("2.47.0", None),
    "24.07": ("2.48.0", None),
    "24.08": ("2.49.0", "10.3.0.26"),
    "24.09": ("2.50.0", None),
    "24.10": ("2.51.0", "10.5.0.18"),
    "24.11": ("2.52.0", None),
    "24.12": ("2.53.0", "10.7.0.23"),
    "25.01": ("2.54.0", "10.8.0.43"),
    "25.02": ("2.55.0", None),
    "25.03": ("2.56.0", None),
    "25.04": ("2.57.0", None),
    "25.05": ("2.58.0", None),
    "25.06": ("2.59.0", None),
    "25.07": ("2.59.1", None),
    "25.08": ("2.60.0", None),
    "25.09": ("2.61.0", None),
    "25.10": ("2.62.0", None),
    "25.11": ("2.63.0", None),
    "25.12": ("2.64.0", None),
    "26.01": ("2.65.0", None),
    "26.02": ("2.66.0", None),
    "26.03": ("2.67.0", None),
    "26.04": ("2.68.0", None),
    "26.05": ("2.69.0", None),
    "26.06": ("2.70.0", None),
    "26.07": ("2.71.0", None),
    "26.08": ("2.72.0", None),
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
            f"batch from 1; rebuild with a smallest batch of 1 (batches 1, {opt}, {hi})",
            field="profiles",
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
    """The Triton container releases (``"YY.MM"``) known to carry TensorRT ``tensorrt_version``.

    Versions match on major.minor.patch, and on the build number too where both the engine's version and the table's
    have one (Triton 23.05 carries 8.6.1.2 and refuses a plan from 8.6.1.6). Releases whose TensorRT trtkit has not
    verified are never listed.
    """
    wanted = version_parts(tensorrt_version)
    if len(wanted) < 3:
        return []
    return [
        release
        for release, (_, carried) in TRITON_TENSORRT.items()
        if carried is not None and _same_tensorrt(wanted, version_parts(carried))
    ]


def check_triton_version(model: TritonModel, triton_version: str | None) -> list:
    """Warnings about serving ``model`` on ``triton_version`` (a container release ``YY.MM`` or server ``2.X.Y``)."""
    warnings = []
    releases = triton_releases_for(model.tensorrt)
    fits = ", ".join(_with_build(release, model.tensorrt) for release in releases) or "none known to trtkit"
    if model.tensorrt is None:
        warnings.append(
            f"Model '{model.name}': the engine has no manifest naming its TensorRT version; Triton's "
            f"TensorRT backend loads it only with the TensorRT it was built with"
        )
    elif not releases:
        warnings.append(
            f"Model '{model.name}': no Triton release in trtkit's table is known to carry TensorRT "
            f"{model.tensorrt} (the engine's); Triton refuses a plan from any other TensorRT, so check the "
            f"TensorRT of the Triton you deploy on (docs/triton.md lists the releases not verified) or rebuild "
            f"the engine with it"
        )
    if triton_version and model.tensorrt:
        release = _release_of(triton_version)
        if release is None:
            known = list(TRITON_TENSORRT)
            warnings.append(
                f"Triton {triton_version} is not in trtkit's table; it cannot say which TensorRT it has "
                f"(known: releases {known[0]} to {known[-1]}, or their server versions 2.X.Y)"
            )
        elif TRITON_TENSORRT[release][1] is None:
            warnings.append(
                f"TensorRT version for Triton {triton_version} not verified: trtkit has no source for the TensorRT "
                f"of release {release}, so it cannot tell whether that Triton loads model '{model.name}' (built "
                f"with TensorRT {model.tensorrt}). Check the container: docker run --rm "
                f"nvcr.io/nvidia/tritonserver:{release}-py3 dpkg -l 'libnvinfer*'. Releases known to carry "
                f"TensorRT {model.tensorrt}: {fits}"
            )
        elif release not in releases:
            carried = TRITON_TENSORRT[release][1]
            warnings.append(
                f"Model '{model.name}' was built with TensorRT {model.tensorrt}, but Triton "
                f"{triton_version} carries TensorRT {carried}: it will refuse the plan. Releases with "
                f"TensorRT {model.tensorrt}: {fits}"
            )
    return warnings


def _with_build(release: str, engine_version: str | None) -> str:
    """``release``, with its full TensorRT version where that has a build number the engine's version lacks."""
    carried = TRITON_TENSORRT[release][1]
    more = len(version_parts(carried)) > len(version_parts(engine_version))
    return f"{release} ({carried})" if more else release


def _same_tensorrt(engine: tuple, carried: tuple) -> bool:
    n = 4 if len(engine) >= 4 and len(carried) >= 4 else 3
    return len(carried) >= 3 and engine[:n] == carried[:n]


def _release_of(version: str) -> str | None:
    if version in TRITON_TENSORRT:
        return version
    for release, (server, _) in TRITON_TENSORRT.items():
        if server == version or server.rsplit(".", 1)[0] == version:
            return release
    return None


# the TensorRT backend's CUDA graphs: one for every batch size the dynamic batcher can form, or the backend's own
# choice (batch 1, the preferred sizes and the largest; a batch of another size then runs without a graph)
GRAPH_BATCHES = ("every", "triton")


def graph_batch_sizes(max_batch: int, graph_batches: str = "every") -> tuple | None:
    """The batch sizes to capture CUDA graphs for (``graph_spec``), or None for the backend's own choice (with which
    most of the dynamic batcher's batches run without a graph).

    Raises:
        UsageError: ``graph_batches`` is not one of :data:`GRAPH_BATCHES`.
    """
    _check.choice("graph_batches", graph_batches, GRAPH_BATCHES)
    return tuple(range(1, int(max_batch) + 1)) if graph_batches == "every" and max_batch > 0 else None


# the TensorRT backend's latency options, as its model configuration names them (ModelOptimizationPolicy):
# busy_wait_events: its threads spin on CUDA events instead of sleeping until they are signalled (lower latency from
# a batch's end to its responses, a core kept busy); eager_batching: an instance prepares its next batch (the inputs'
# copies) while the previous one computes; gather_kernel: a batch of GATHER_KERNEL_MIN_REQUESTS or more requests has its
# inputs gathered into the batch's buffer by one kernel instead of a copy per request (gather_kernel_buffer_threshold)
TENSORRT_CONFIG_OPTIONS = ("busy_wait_events", "eager_batching", "gather_kernel")
GATHER_KERNEL_MIN_REQUESTS = 2
# and the server's: blocking: each instance on a thread of its own (the backend's execution policy BLOCKING; by
# default, DEVICE_BLOCKING, the instances of one GPU take turns on one thread)
TENSORRT_SERVER_OPTIONS = ("blocking",)
TENSORRT_OPTIONS = TENSORRT_CONFIG_OPTIONS + TENSORRT_SERVER_OPTIONS
# options the backend has that trtkit does not write, and why
TENSORRT_REFUSED = {
    "output_copy_stream": "with it Triton 2.51's TensorRT backend (TensorRT 8.6, CUDA graphs for every batch size) "
    "stopped answering requests and then could not stop",
}


def tensorrt_options(names, accepted: tuple = TENSORRT_OPTIONS) -> tuple:
    """``names`` (an iterable, or text joined by commas or ``+``) as a tuple in :data:`TENSORRT_OPTIONS`' order.

    Raises:
        TrtkitError: a name that is not one of ``accepted`` (one of :data:`TENSORRT_REFUSED` says why).
    """
    if isinstance(names, str):
        names = names.replace("+", ",").split(",")
    given = {n.strip() for n in names or () if n and n.strip() and n.strip() != "none"}
    bad = sorted(given - set(accepted))
    if bad:
        notes = [
            f"{n}: a server setting, not the model configuration's: tritonserver "
            "--backend-config=tensorrt,execution-policy=BLOCKING"
            for n in bad
            if n in TENSORRT_SERVER_OPTIONS
        ]
        notes += [f"{n} is left out: {TENSORRT_REFUSED[n]}" for n in bad if n in TENSORRT_REFUSED]
        where = f" ({'; '.join(notes)})" if notes else ""
        raise TrtkitError(
            f"TensorRT backend option(s) {', '.join(bad)} not known here{where}; give any of {', '.join(accepted)}"
        )
    return tuple(n for n in TENSORRT_OPTIONS if n in given)


def preferred_batch_sizes(sizes, max_batch: int, engine) -> tuple:
    """``sizes`` checked against the batch limit ``max_batch`` of ``engine``: the batch sizes Triton's dynamic batcher
    sends as soon as it has them queued (below the smallest it waits up to its queue delay for more), sorted.

    Raises:
        ProfileError: a size below 1 or above ``max_batch``, none at all, or an engine Triton serves unbatched.
    """
    sizes = tuple(int(s) for s in sizes)
    if int(max_batch) == 0:
        raise ProfileError(
            f"Engine '{engine}' has a fixed first dimension, so Triton serves it unbatched and has no batches to "
            "prefer; leave the preferred batch sizes unset",
            field="preferred_batch_sizes",
        )
    wrong = [s for s in sizes if not 1 <= s <= int(max_batch)]
    if not sizes or wrong:
        raise ProfileError(
            f"preferred batch sizes {','.join(map(str, sizes)) or '(none)'}: "
            + (f"{','.join(map(str, wrong))} not within " if wrong else "give at least one size within ")
            + f"1..{max_batch}, the largest batch served from engine '{engine}'",
            field="preferred_batch_sizes",
            accepted=f"sizes within 1..{max_batch}",
        )
    return tuple(sorted(set(sizes)))


def config_pbtxt(
    model: TritonModel,
    *,
    instances: int = 1,
    gpus: tuple = (),
    max_queue_delay_us: int = 100,
    cuda_graphs: bool = True,
    max_batch: int | None = None,
    preferred: tuple | None = None,
    graph_batch_sizes: tuple | None = None,
    options: tuple = (),
) -> str:
    """The ``config.pbtxt`` of ``model`` for Triton's TensorRT backend (``platform: "tensorrt_plan"``);
    ``max_batch`` and ``preferred`` (default: the profile's) limit the batches the dynamic batcher forms.
    ``graph_batch_sizes``: the batch sizes the backend captures CUDA graphs for (``graph_spec``; default: the
    backend's own choice, batch 1, the preferred sizes and the largest; a batch of another size runs without a
    graph). ``options``: any of :data:`TENSORRT_CONFIG_OPTIONS`, each turned on.

    Raises:
        TrtkitError: an option that is not one of :data:`TENSORRT_CONFIG_OPTIONS`.
    """
    options = tensorrt_options(options, TENSORRT_CONFIG_OPTIONS)
    lines = [f'name: "{model.name}"', 'platform: "tensorrt_plan"']
    lines += io_and_batching_lines(
        model,
        model.max_batch_size if max_batch is None else max_batch,
        model.preferred_batch_sizes if preferred is None else preferred,
        max_queue_delay_us,
    )
    gpu_list = f" gpus: [ {', '.join(map(str, gpus))} ]" if gpus else ""
    lines.append(f"instance_group [ {{ count: {int(instances)} kind: KIND_GPU{gpu_list} }} ]")
    cuda = ["busy_wait_events: true"] if "busy_wait_events" in options else []
    if cuda_graphs:
        cuda.insert(0, "graphs: true")
        specs = ", ".join(f"{{ batch_size: {int(b)} }}" for b in graph_batch_sizes or ())
        if specs:
            cuda.append(f"graph_spec [ {specs} ]")
    policy = ["eager_batching: true"] if "eager_batching" in options else []
    if "gather_kernel" in options:
        policy.append(f"gather_kernel_buffer_threshold: {GATHER_KERNEL_MIN_REQUESTS}")
    if cuda:
        policy.append(f"cuda {{ {' '.join(cuda)} }}")
    if policy:
        lines.append(f"optimization {{ {' '.join(policy)} }}")
    return "\n".join(lines) + "\n"


def io_and_batching_lines(model: TritonModel, max_batch: int, preferred: tuple, max_queue_delay_us: int) -> list:
    """The ``config.pbtxt`` lines every backend's model shares: ``max_batch_size``, inputs, outputs and (batched)
    ``dynamic_batching``."""
    lines = [f"max_batch_size: {int(max_batch)}"]
    for section, tensors in (("input", model.inputs), ("output", model.outputs)):
        items = [
            f'  {{ name: "{t.name}" data_type: {t.triton_dtype} dims: [ {", ".join(map(str, t.dims))} ] }}'
            for t in tensors
        ]
        lines.append(f"{section} [\n" + ",\n".join(items) + "\n]")
    if max_batch > 0:
        sizes = ", ".join(map(str, preferred))
        lines.append(
            f"dynamic_batching {{\n  preferred_batch_size: [ {sizes} ]\n"
            f"  max_queue_delay_microseconds: {int(max_queue_delay_us)}\n}}"
        )
    return lines


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
    graph_batches: str = "every",
    options: tuple = (),
    triton_version: str | None = None,
    force: bool = False,
    preferred: tuple | None = None,
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
        graph_batches: ``"every"`` (default): a graph for every batch size up to the profile's largest;
            ``"triton"``: the backend's own choice (see :func:`graph_batch_sizes`).
        options: the TensorRT backend's latency options to set, any of :data:`TENSORRT_CONFIG_OPTIONS` (checked
            when the config is built, before anything is written).
        triton_version: the Triton you deploy on (``25.01`` or ``2.54.0``): warns if its TensorRT differs.
        force: write into a repository that exists and is not empty (replacing a model of the same name).
        preferred: the batch sizes the dynamic batcher sends as soon as it has them (default: the profile's opt and
            largest batch; see :func:`preferred_batch_sizes`).
        trt: the ``tensorrt`` module (tests pass a fake).

    Raises:
        TrtkitError: the repository exists and is not empty and ``force`` is false; ``instances`` below 1; an
            option that is not one of :data:`TENSORRT_CONFIG_OPTIONS`.
        EngineError / ProfileError: see :func:`triton_model`; a preferred batch size the profile cannot take.
    """
    if int(instances) < 1:
        raise TrtkitError(f"instances must be 1 or more, not {instances}")
    repo = Path(repo)
    if repo.exists() and not repo.is_dir():
        raise TrtkitError(f"Model repository '{repo}' is a file; give a folder")
    if repo.is_dir() and any(repo.iterdir()) and not force:
        raise TrtkitError(
            f"Model repository '{repo}' exists and is not empty; pass force to add or replace the model there, "
            "or give an empty or new folder",
            field="force",
        )
    model = triton_model(engine, name=name, trt=trt)
    if preferred is not None:
        preferred = preferred_batch_sizes(preferred, model.max_batch_size, engine)
    warnings = check_triton_version(model, triton_version)
    for text in warnings:
        logger.warning("%s", text)
    text = config_pbtxt(
        model,
        instances=instances,
        gpus=tuple(gpus),
        max_queue_delay_us=max_queue_delay_us,
        cuda_graphs=cuda_graphs,
        graph_batch_sizes=graph_batch_sizes(model.max_batch_size, graph_batches),
        options=options,
        preferred=preferred,
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
