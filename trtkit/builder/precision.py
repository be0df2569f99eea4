"""Choosing how a requested precision is reached on the installed TensorRT.

| precision | mode | 8.6 | 10.x | 11.x |
|---|---|---|---|---|
| fp16 | flag | ``BuilderFlag.FP16`` | ``BuilderFlag.FP16`` | — |
| fp16 | cast | FP16 model + ``BuilderFlag.FP16`` | FP16 model, strongly typed | FP16 model |
| bf16 | flag / cast | — | ``BuilderFlag.BF16`` / BF16 model | BF16 model |
| int8 | calibrator | INT8 (+FP16) flags + TensorRT calibrator | same (deprecated) | — |
| int8 | qdq | Q/DQ model + INT8 (+FP16) flags | same | Q/DQ model with FP16 elsewhere, strongly typed |

``auto`` takes the flag / calibrator where it exists and the strongly typed model otherwise. A model that already
holds Q/DQ nodes needs no calibration. A mode absent from this TensorRT raises :class:`UnsupportedError` naming the
versions that have it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from calibrators.explicit import make_qdq_model
from calibrators.session import prepare
from calibrators.settings import DEFAULT_ALGORITHMS
from calibrators.trt_calibrator import make_calibrator
from trtkit import _version_compat as compat
from trtkit._atomic import write_bytes_atomic
from trtkit.builder.profiles import resolve_profiles
from trtkit.errors import CalibrationError, ModelError, TrtkitInternalError, UnsupportedError
from trtkit.model import load_model, model_inputs
from trtkit.quant.fp16 import convert_float
from trtkit.quant.qdq import QdqOptions, to_fp16_rest

logger = logging.getLogger("trtkit")


@dataclass
class PrecisionPlan:
    """What the builder must do for the asked precision.

    Attributes:
        model: the (possibly transformed) :class:`trtkit.model.LoadedModel` to parse.
        strongly_typed: create the network strongly typed.
        flags: builder flag names to set (e.g. ``("FP16",)``).
        calibrator: an ``IInt8Calibrator`` to attach, or ``None``.
        notes: what was decided, for the build summary and manifest.
        calibration: facts about calibration for the manifest (path, algorithm, samples, cache reuse).
    """

    model: object
    strongly_typed: bool = False
    flags: tuple = ()
    calibrator: object = None
    notes: list = field(default_factory=list)
    calibration: dict = field(default_factory=dict)

    def finish(self) -> None:
        """Call after ``build_serialized_network``: re-raises an error recorded by the calibrator, frees its buffers."""
        if self.calibrator is not None and hasattr(self.calibrator, "raise_if_failed"):
            self.calibrator.raise_if_failed()
            self.calibration["samples"] = getattr(self.calibrator, "samples", None)


def plan_precision(
    trt, model, config, caps, build_statistics_engine: Callable[[object], bytes] | None = None
) -> PrecisionPlan:
    """Decide flags, network typing and model transforms for ``config.precision`` on this TensorRT.

    Args:
        trt: the ``tensorrt`` module.
        model: the :class:`~trtkit.model.LoadedModel` to build.
        config: the :class:`~trtkit.builder.config.BuildConfig`.
        caps: :func:`trtkit._version_compat.capabilities` of ``trt``.
        build_statistics_engine: ``onnx.ModelProto -> serialized engine`` for the Q/DQ path's calibration (see
            :func:`trtkit.builder.builder.statistics_engine_builder`); needed only when that path calibrates.

    Raises:
        UnsupportedError: the asked precision or mode does not exist in this TensorRT (names where it exists).
        CalibrationError: INT8 without usable calibration data or cache.
    """
    if config.precision == "fp32":
        note = "FP32 (TF32 allowed)" if config.tf32 else "FP32 (TF32 off)"
        return PrecisionPlan(model, strongly_typed=config.strongly_typed, notes=[note])
    if config.precision in ("fp16", "bf16"):
        return _plan_half(trt, model, config, caps, config.precision)
    if config.precision == "int8":
        return _plan_int8(trt, model, config, caps, build_statistics_engine)
    raise UnsupportedError(f"Precision '{config.precision}' is not known; use fp32, fp16, bf16 or int8.")


def _version(caps) -> str:
    return ".".join(map(str, caps.version))


# --- FP16 / BF16 ---------------------------------------------------------------------------------------------------


def resolve_half_mode(caps, precision: str, mode: str) -> str:
    """How ``--fp16``/``--bf16`` with ``--fp16-mode`` is reached on this TensorRT.

    Returns:
        ``"flag"`` (builder flag), ``"cast"`` (model cast by trtkit, strongly typed network) or ``"cast+flag"`` (the
        cast model built with the builder flag: TensorRT 8.6 has no strongly typed networks).

    Raises:
        UnsupportedError: the mode does not exist here; says which versions have it.
    """
    flag = precision.upper()
    has_flag = flag in caps.builder_flags
    if mode == "auto":
        mode = "flag" if has_flag else "cast"
    if mode == "flag" and not has_flag:
        where = "TensorRT 8.6 to 10.x" if flag == "FP16" else "TensorRT 9.0 to 10.x"
        instead = (
            f"Use fp16_mode 'cast' (a strongly typed {flag} model)"
            if caps.strongly_typed
            else "Use TensorRT 10 or later"
        )
        raise UnsupportedError(
            f"fp16_mode 'flag' with {flag} needs BuilderFlag.{flag}, which TensorRT "
            f"{_version(caps)} does not have; it exists in {where}. {instead}.",
            field="fp16_mode",
        )
    if mode == "cast" and not caps.strongly_typed:
        if has_flag:
            return "cast+flag"
        raise UnsupportedError(
            f"{flag} needs BuilderFlag.{flag} or strongly typed networks; TensorRT "
            f"{_version(caps)} has neither. {flag} exists in TensorRT 9.0 to 10.x as a flag and from 9.1 as a "
            "strongly typed model: use TensorRT 10 or later."
        )
    return mode


def _plan_half(trt, model, config, caps, precision: str) -> PrecisionPlan:
    mode = resolve_half_mode(caps, precision, config.fp16_mode)
    flag = precision.upper()
    if config.strongly_typed and mode != "cast":
        if config.fp16_mode == "flag" or not caps.strongly_typed:
            raise UnsupportedError(
                f"strongly_typed networks take their types from the model and refuse BuilderFlag.{flag}; use FP16 "
                "mode 'cast' (TensorRT 9.1 and later), or turn strongly_typed off.",
                field="strongly_typed",
            )
        mode = "cast"
    if mode == "flag":
        return PrecisionPlan(model, flags=(flag,), notes=[f"{flag} builder flag"])
    conversion = convert_float(model.proto, dtype=precision, keep_io_types=True)
    strongly_typed = mode == "cast"
    how = (
        "strongly typed network"
        if strongly_typed
        else f"BuilderFlag.{flag} (TensorRT {_version(caps)} has no strongly typed networks)"
    )
    notes = [
        f"{flag} model (cast by trtkit), {how}",
        f"{len(conversion.kept_fp32)} node(s) kept in FP32, {conversion.casts} Cast(s) inserted",
    ]
    if conversion.clipped:
        notes.append(f"clipped to the FP16 range: {', '.join(conversion.clipped)}")
    flags = () if strongly_typed else (flag,)
    return PrecisionPlan(
        load_model(conversion.model, check=False), strongly_typed=strongly_typed, flags=flags, notes=notes
    )


# --- INT8 ----------------------------------------------------------------------------------------------------------


def resolve_int8_mode(caps, mode: str, algorithm: str | None = None) -> str:
    """``calibrator`` or ``qdq`` for ``--int8`` with ``--int8-mode`` on this TensorRT.

    ``auto`` takes TensorRT's calibrator where it exists and the algorithm has one (entropy, minmax, or none named:
    the calibrator's default, entropy), else Q/DQ.

    Raises:
        UnsupportedError: calibrators asked for where they do not exist (TensorRT 11), or for mse.
    """
    native = caps.has_calibrators and caps.int8_flag and (algorithm != "minmax" or caps.has_minmax_calibrator)
    if mode == "auto":
        return "calibrator" if native and algorithm in (None, "entropy", "minmax") else "qdq"
    if mode == "calibrator" and not (caps.has_calibrators and caps.int8_flag):
        raise UnsupportedError(
            f"int8_mode 'calibrator' needs TensorRT's INT8 calibrators and BuilderFlag.INT8, which TensorRT "
            f"{_version(caps)} does not have; they exist in TensorRT 8.6 to 10.x. Use int8_mode 'qdq'.",
            field="int8_mode",
        )
    check_int8_mode(mode, algorithm)
    return mode


def check_int8_mode(mode: str, algorithm: str | None) -> None:
    """``int8_mode`` against the calibration algorithm, whatever the TensorRT (checked before it is looked for).

    Raises:
        UnsupportedError: TensorRT's calibrator asked for with an algorithm it does not have (mse).
    """
    if mode == "calibrator" and algorithm == "mse":
        raise UnsupportedError(
            f"TensorRT has no {algorithm} calibrator; use int8_mode 'qdq' with the {algorithm} algorithm, or the "
            "entropy or minmax algorithm.",
            field="int8_mode",
        )


def _int8_flags(caps) -> tuple:
    """INT8 plus FP16 (layers left unquantized run in FP16, as in ``trtexec --int8 --fp16``)."""
    return ("INT8", "FP16") if caps.fp16_flag else ("INT8",)


def has_qdq(proto) -> bool:
    return any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in proto.graph.node)


def _plan_int8(trt, model, config, caps, build_statistics_engine) -> PrecisionPlan:
    if has_qdq(model.proto):
        return _qdq_plan(model, caps, ["the model already holds Q/DQ nodes: no calibration"], config.strongly_typed)
    algorithm = config.calibration.algorithm if config.calibration else None
    mode = resolve_int8_mode(caps, config.int8_mode, algorithm)
    if config.strongly_typed and mode == "calibrator":
        if config.int8_mode == "calibrator":
            raise UnsupportedError(
                "TensorRT's calibrators need BuilderFlag.INT8, which strongly typed networks refuse; use "
                "int8_mode 'qdq', or a network that is not strongly typed.",
                field="int8_mode",
            )
        mode = "qdq"
    # the placement settings a calibrator build would ignore; the residual/concat/add-input ones are on by default
    # (they place nothing where the calibrator makes the INT8 plan), so only these say the user asked for Q/DQ
    placement = [
        name
        for name, used in (
            ("the excluded nodes", bool(config.qdq_exclude)),
            ("the quantized heads", not config.qdq_keep_heads),
        )
        if used
    ]
    if mode == "calibrator" and placement:
        raise UnsupportedError(
            f"The Q/DQ placement settings ({', '.join(placement)}) need Q/DQ nodes, which this build does not "
            "make (INT8 through TensorRT's calibrator); use int8_mode 'qdq', or drop them",
            field="int8_mode",
        )
    session = _session(trt, model, config, native=(mode == "calibrator"))
    if mode == "calibrator":
        return _calibrator_plan(trt, model, caps, session)
    return _explicit_plan(trt, model, config, caps, session, build_statistics_engine)


def _calibrator_plan(trt, model, caps, session) -> PrecisionPlan:
    calibrator = make_calibrator(trt, session)
    reused = session.cached is not None
    notes = [
        f"INT8 with TensorRT's {session.algorithm} calibrator, batch {session.batch_size}"
        + (" (calibration cache reused)" if reused else "")
    ]
    return PrecisionPlan(
        model,
        flags=_int8_flags(caps),
        calibrator=calibrator,
        notes=notes,
        calibration=_calibration_facts(session, reused, "calibrator"),
    )


def _explicit_plan(trt, model, config, caps, session, build_statistics_engine) -> PrecisionPlan:
    if build_statistics_engine is None and session.cached is None:
        raise TrtkitInternalError(
            "INT8 Q/DQ calibration builds an FP32 statistics engine: plan_precision needs "
            "build_statistics_engine (trtkit.builder.builder.statistics_engine_builder)"
        )
    options = qdq_options(config)
    result = make_qdq_model(trt, model.proto, session, build_statistics_engine, options)
    source = (
        "calibration cache"
        if result.from_cache
        else f"{result.samples} samples ({session.algorithm}, {result.seconds:.1f} s in TensorRT: "
        f"{result.describe_timings()})"
    )
    notes = [f"explicit Q/DQ made by trtkit from {source}: {result.plan.summary()}"]
    qdq: Any = result.model  # an onnx.ModelProto
    if config.strongly_typed or not caps.int8_flag:
        qdq, more = _fp16_rest(qdq)
        notes += more
    if config.save_qdq_onnx:
        write_bytes_atomic(Path(config.save_qdq_onnx), qdq.SerializeToString())
        logger.info("Saved the Q/DQ model to '%s'.", config.save_qdq_onnx)
    plan = _qdq_plan(load_model(qdq, check=False), caps, notes, config.strongly_typed)
    plan.calibration = _calibration_facts(session, result.from_cache, "qdq", result.samples, result.seconds)
    return plan


def qdq_options(config) -> QdqOptions:
    """The Q/DQ placement a :class:`~trtkit.builder.config.BuildConfig` asks for."""
    return QdqOptions(
        keep_output_layers=config.qdq_keep_heads,
        exclude_nodes=frozenset(config.qdq_exclude),
        residual_through_activation=config.qdq_residual_activations,
        concat_shared_scale=config.qdq_concat_shared_scale,
        quantize_add_inputs=config.qdq_residual_activations,
    )


def _fp16_rest(qdq):
    """Strongly typed INT8 with FP16 around it (as the INT8+FP16 flags give on 8.6/10); FP32 if that cannot be done."""
    try:
        mixed, conversion = to_fp16_rest(qdq)
    except ModelError as exc:
        logger.warning("Unquantized layers stay FP32: %s", exc)
        return qdq, [f"unquantized layers in FP32 ({exc})"]
    return mixed, [
        f"unquantized layers in FP16 (opset 19, FP16 scales; {len(conversion.kept_fp32)} node(s) kept in FP32)"
    ]


def _qdq_plan(model, caps, notes: list, strongly_typed: bool = False) -> PrecisionPlan:
    if strongly_typed and not caps.strongly_typed:
        raise UnsupportedError(
            f"Strongly typed networks do not exist in TensorRT {_version(caps)}; they exist in "
            f"TensorRT 9.1 and later. Turn strongly_typed off.",
            field="strongly_typed",
        )
    if caps.int8_flag and not strongly_typed:
        return PrecisionPlan(model, flags=_int8_flags(caps), notes=notes + ["INT8 builder flag for the Q/DQ model"])
    if not caps.strongly_typed:  # pragma: no cover - every TensorRT trtkit supports has one or the other
        raise UnsupportedError(f"TensorRT {_version(caps)} has neither BuilderFlag.INT8 nor strongly typed networks.")
    return PrecisionPlan(model, strongly_typed=True, notes=notes + ["strongly typed Q/DQ network"])


def _calibration_facts(session, reused: bool, path: str, samples=None, seconds=None) -> dict:
    facts = {
        "path": path,
        "algorithm": session.algorithm,
        "batch_size": session.batch_size,
        "cache": session.settings.cache_path,
        "cache_reused": reused,
    }
    if samples is not None:
        facts["samples"] = samples
    if seconds is not None:
        facts["seconds"] = round(seconds, 3)
    return facts


def _session(trt, model, config, *, native: bool):
    batch = calibration_batch_size(model.proto, config, native=native)
    settings = config.calibration
    if settings is not None and settings.algorithm is None:  # the path's own default
        settings = replace(settings, algorithm=DEFAULT_ALGORITHMS["calibrator" if native else "qdq"])
    return prepare(settings, model, compat.version_string(trt), batch, sample_spec(model.proto, config))


def sample_spec(proto, config):
    """What calibration samples must look like: the model's inputs and dtypes, bounded by profile 0."""
    from calibrators.sources import SampleSpec, onnx_input_dtypes

    inputs = model_inputs(proto)
    profiles = resolve_profiles(inputs, config.profiles)
    ranges = {n: (s.min, s.max) for n, s in profiles[0].shapes.items()} if profiles else None
    return SampleSpec(inputs, onnx_input_dtypes(proto), ranges)


def calibration_batch_size(proto, config, *, native: bool) -> int:
    """The calibration batch size: ``--calib-batch``, else the first profile's opt batch, else the static batch.

    TensorRT's calibrator runs at the calibration profile's opt shape (the first profile), so ``native`` requires
    ``--calib-batch`` to equal it.

    Raises:
        CalibrationError: ``--calib-batch`` does not fit the profile or the model's fixed batch.
    """
    inputs = model_inputs(proto)
    profiles = resolve_profiles(inputs, config.profiles)
    asked = config.calibration.batch_size if config.calibration else None
    if profiles:
        name, shape = next(iter(profiles[0].shapes.items()))
        low, opt, high = shape.min[0], shape.opt[0], shape.max[0]
    else:
        name, dims = next(iter(inputs.items()))
        low = opt = high = dims[0] if dims and isinstance(dims[0], int) else 1
    if asked is None:
        return int(opt)
    if native and asked != opt:
        raise CalibrationError(
            f"calibration.batch_size={asked} differs from the opt batch {opt} of input '{name}' in profile 0; "
            f"TensorRT's calibrator runs at the opt shape. Leave calibration.batch_size unset (it then is {opt}), "
            f"or give profile 0 an opt batch of {asked}.",
            field="calibration.batch_size",
        )
    if not low <= asked <= high:
        raise CalibrationError(
            f"calibration.batch_size={asked} is outside the batch range {low}..{high} of input '{name}' in profile 0.",
            field="calibration.batch_size",
        )
    return int(asked)
