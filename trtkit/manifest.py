"""The manifest written beside every engine: how it was built, typed, with its JSON form in one place.

An engine is tied to the TensorRT version and (unless built hardware-compatible) the GPU architecture it was built
for; loading it elsewhere crashes or fails obscurely. The manifest records how it was built so the mismatch is named,
and so parity, the CLI and a rebuild (``trtkit parity --localize``) know the engine's settings.

    manifest = read_manifest("model.engine")       # Manifest, or None when there is none
    manifest.build.precision, manifest.environment.tensorrt, manifest.to_json()

On disk it is ``<engine>.manifest.json``; :data:`FORMAT` is written into it and :meth:`Manifest.from_json` reads
every format up to it (a manifest without ``format`` is format 1). Keys this version does not know are kept in
``extra`` and written back.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar, cast

from trtkit import __version__
from trtkit._device import device_info, package_version
from trtkit.errors import EngineError

FORMAT = 1
MANIFEST_SUFFIX = ".manifest.json"


_S = TypeVar("_S", bound="_Section")


class _Section:
    """A manifest section read from its JSON dict: the keys it has fields for (missing keys take the defaults)."""

    @classmethod
    def from_json(cls: type[_S], data: dict | None) -> _S:
        names = {f.name for f in fields(cast(Any, cls))}  # every subclass is a dataclass
        return cls(**{k: v for k, v in (data or {}).items() if k in names})


@dataclass
class Environment(_Section):
    """The machine an engine was built on (or this machine, from :func:`environment`)."""

    trtkit: str | None = None
    tensorrt: str | None = None
    cuda_python: str | None = None
    onnx: str | None = None
    gpu: str | None = None
    compute_capability: str | None = None
    driver_cuda_version: str | None = None


@dataclass
class ModelInfo(_Section):
    """The ONNX model an engine was built from; ``inputs``: name → dims (dynamic dims as strings);
    ``shape_inputs``: the inputs TensorRT treats as shape tensors (their profile entries are values, not dims);
    ``metadata``: the model's ``metadata_props`` (key → value), e.g. the class ``names`` of a detector."""

    name: str | None = None
    sha256: str | None = None
    opset: int | None = None
    inputs: dict = field(default_factory=dict)
    shape_inputs: list = field(default_factory=list)
    metadata: dict = field(default_factory=dict)


def _model_json(model: ModelInfo) -> dict:
    """``model`` as JSON; ``shape_inputs`` and ``metadata`` only where there are some."""
    data = asdict(model)
    for key in ("shape_inputs", "metadata"):
        if not data[key]:
            del data[key]
    return data


@dataclass
class PrecisionPlanInfo(_Section):
    """What the builder decided for the asked precision (see :class:`trtkit.builder.precision.PrecisionPlan`)."""

    strongly_typed: bool = False
    flags: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    calibration: dict = field(default_factory=dict)


@dataclass
class BuildInfo:
    """The build settings: ``settings`` is :meth:`trtkit.builder.config.BuildConfig.to_json` without its profiles;
    ``profiles`` the resolved ones (``Profile.to_json``). In JSON the settings sit flat beside the other keys."""

    settings: dict = field(default_factory=dict)
    profiles: list = field(default_factory=list)
    precision_plan: PrecisionPlanInfo = field(default_factory=PrecisionPlanInfo)
    num_profiles: int | None = None

    @property
    def precision(self) -> str | None:
        return self.settings.get("precision")

    @property
    def tf32(self) -> bool:
        return bool(self.settings.get("tf32", True))

    @property
    def version_compatible(self) -> bool:
        return bool(self.settings.get("version_compatible"))

    @property
    def hardware_compatibility(self) -> str | None:
        return self.settings.get("hardware_compatibility")

    def to_json(self) -> dict:
        data = {**self.settings, "profiles": list(self.profiles), "precision_plan": asdict(self.precision_plan)}
        if self.num_profiles is not None:
            data["num_profiles"] = self.num_profiles
        return data

    @classmethod
    def from_json(cls, data: dict) -> BuildInfo:
        rest = {k: v for k, v in data.items() if k not in ("profiles", "precision_plan", "num_profiles")}
        return cls(
            rest,
            list(data.get("profiles") or []),
            PrecisionPlanInfo.from_json(data.get("precision_plan")),
            data.get("num_profiles"),
        )


# the top-level keys of a Manifest beside its sections, written when set (precision_report always)
_OPTIONAL = ("build_seconds", "engine_bytes", "precision_report", "engine_file", "prepare", "timings_s", "timing_cache")


@dataclass
class Manifest:
    """How an engine was built.

    Attributes:
        environment: versions and GPU of the build machine.
        model: the ONNX model (name, sha256, opset, inputs).
        build: the build settings and precision plan; ``None`` in a manifest without a build section.
        build_seconds: time from loading the model to the serialized engine.
        engine_bytes: size of the serialized engine.
        precision_report: :class:`trtkit.builder.precision_report` JSON (layers and FLOP share per precision).
        engine_file: the engine's file name, once written.
        prepare: what preparing the model changed before the build (the rewrites applied and the model's original
            I/O dtypes: :meth:`trtkit.builder.prepare.PreparedModel.to_json`), or ``None`` in older manifests.
        timings_s: ``{step: seconds}`` of the build, from the start of the process that asked for it (the build
            worker's steps included, :mod:`trtkit.builder.timeline`), or ``None``.
        timing_cache: the timing cache file the build used, ``{"path", "default", "status"}`` (``default``: the
            per-GPU cache in the user's cache folder; ``status``: ``hit``, ``created`` or ``replaced``), or ``None``
            (built without one).
        format: the manifest format (:data:`FORMAT`).
        extra: keys this version of trtkit does not know, kept as they were.
    """

    environment: Environment = field(default_factory=Environment)
    model: ModelInfo = field(default_factory=ModelInfo)
    build: BuildInfo | None = None
    build_seconds: float | None = None
    engine_bytes: int | None = None
    precision_report: dict | None = None
    engine_file: str | None = None
    prepare: dict | None = None
    timings_s: dict | None = None
    timing_cache: dict | None = None
    format: int = FORMAT
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        """The JSON-ready dict written to ``<engine>.manifest.json`` (keys of the format written since format 1)."""
        data = {
            **self.extra,
            "format": self.format,
            "environment": asdict(self.environment),
            "model": _model_json(self.model),
        }
        if self.build is not None:
            data["build"] = self.build.to_json()
        for name in _OPTIONAL:
            value = getattr(self, name)
            if value is not None or name == "precision_report":
                data[name] = value
        return data

    @classmethod
    def from_json(cls, data: dict) -> Manifest:
        """Read a manifest dict (any format up to :data:`FORMAT`; missing sections take their defaults).

        Raises:
            EngineError: ``data`` is not a dict, or it was written by a newer trtkit (a later format).
        """
        if isinstance(data, Manifest):
            return data
        if not isinstance(data, dict):
            raise EngineError(f"A manifest must be a JSON object; got {type(data).__name__}")
        version = data.get("format", 1)
        if not isinstance(version, int) or version > FORMAT:
            raise EngineError(
                f"The manifest has format {version!r}; this trtkit reads formats 1 to {FORMAT}. "
                f"Upgrade trtkit or rebuild the engine."
            )
        known = {"format", "environment", "model", "build", *_OPTIONAL}
        build = data.get("build")
        return cls(
            environment=Environment.from_json(data.get("environment")),
            model=ModelInfo.from_json(data.get("model")),
            build=BuildInfo.from_json(build) if build else None,
            **{name: data.get(name) for name in _OPTIONAL},
            format=version,
            extra={k: v for k, v in data.items() if k not in known},
        )


def as_manifest(manifest) -> Manifest | None:
    """``manifest`` as a :class:`Manifest` (a dict is read with :meth:`Manifest.from_json`; ``None``/``{}`` stay
    ``None``)."""
    if manifest is None or isinstance(manifest, Manifest):
        return manifest
    return Manifest.from_json(manifest) if manifest else None


def manifest_path(engine_path) -> Path:
    engine_path = Path(engine_path)
    return engine_path.with_name(engine_path.name + MANIFEST_SUFFIX)


def read_manifest(engine_path) -> Manifest | None:
    """The manifest beside ``engine_path``, or ``None`` when there is none.

    Raises:
        EngineError: the manifest exists but is not valid JSON or not a manifest.
    """
    path = manifest_path(engine_path)
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise EngineError(f"Manifest '{path}' is unreadable ({exc}); delete it or rebuild the engine") from exc
    try:
        return Manifest.from_json(data)
    except EngineError as exc:
        raise EngineError(f"Manifest '{path}': {exc}") from exc


def environment(trt=None) -> Environment:
    """Versions and GPU of this machine, as recorded in manifests."""
    dev = device_info()
    return Environment(
        trtkit=__version__,
        tensorrt=getattr(trt, "__version__", None) if trt is not None else package_version("tensorrt"),
        cuda_python=package_version("cuda-python") or package_version("cuda-bindings"),
        onnx=package_version("onnx"),
        gpu=dev.get("name"),
        compute_capability=dev.get("compute_capability"),
        driver_cuda_version=dev.get("driver_cuda_version"),
    )


def mismatches(manifest, current) -> list:
    """What differs between the machine an engine was built on and ``current``, as readable phrases.

    Args:
        manifest: a :class:`Manifest` (or its JSON dict).
        current: this machine's :class:`Environment` (or its dict).
    """
    manifest = as_manifest(manifest) or Manifest()
    built = manifest.environment
    now = current if isinstance(current, Environment) else Environment.from_json(current)
    build = manifest.build or BuildInfo()
    out = []
    if built.tensorrt and now.tensorrt and built.tensorrt != now.tensorrt and not build.version_compatible:
        out.append(f"TensorRT {built.tensorrt} (this machine has {now.tensorrt})")
    cc_built, cc_now = built.compute_capability, now.compute_capability
    if cc_built and cc_now and cc_built != cc_now and not build.hardware_compatibility:
        out.append(
            f"GPU {built.gpu} with compute capability {cc_built} "
            f"(this machine has {now.gpu}, compute capability {cc_now})"
        )
    return out


def check_manifest(manifest, *, engine_path=None, current=None, allow_mismatch: bool = False) -> list:
    """Refuse an engine built for another TensorRT version or GPU architecture.

    Args:
        manifest: the engine's :class:`Manifest` or its dict (``None``: nothing to check).
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
            "or pass allow_mismatch to try loading it anyway.",
            field="allow_mismatch",
        )
    return found
