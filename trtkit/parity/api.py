"""``compare_engine_to_onnx``: run an engine and its ONNX model on the same inputs and judge every output.

The engine side is any callable ``feed -> {name: array}``, so CPU tests pass a fake and a user can pass a
:class:`trtkit.runtime.runner.TrtRunner` they already opened; a path or bytes opens a ``TrtRunner`` for the run.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Mapping

import numpy as np

from trtkit._atomic import check_outputs, write_bytes_atomic
from trtkit.errors import InputError, UsageError
from trtkit.model import model_files
from trtkit.parity import inputs as inputs_mod
from trtkit.parity.compare import compare_outputs
from trtkit.parity.engine import describe_engine, open_engine
from trtkit.parity.polygraphy_compat import polygraphy_verdicts
from trtkit.parity.reference import OnnxReference, default_backend, describe_model, load_model
from trtkit.parity.report import ParityReport
from trtkit.parity.tolerance import Tolerance, tolerance_for

# An fp32 build with TensorRT's defaults runs TF32: the safe assumption when the engine does not say.
ASSUMED_PRECISION = "tf32"


def compare_engine_to_onnx(
    onnx_model,
    engine,
    *,
    inputs=None,
    shapes: Mapping | None = None,
    profile=None,
    profile_index: int = 0,
    precision: str | None = None,
    tolerance: Tolerance | None = None,
    atol: float | None = None,
    rtol: float | None = None,
    metric_threshold: float | Mapping[str, float] | None = None,
    min_cosine: float | None = None,
    min_top1: float | None = None,
    trials: int | None = None,
    seed: int = 0,
    value_range: tuple[float, float] | None = None,
    reference: str | None = None,
    polygraphy_check: bool = True,
    on_trial: Callable[[int, int], None] | None = None,
    runner_options: dict | None = None,
    save_arrays=None,
) -> ParityReport:
    """Compare an engine's outputs with its ONNX model's on the same inputs.

    Args:
        onnx_model: path, bytes or ``onnx.ModelProto``.
        engine: a callable ``feed -> {name: array}`` (or an object with ``infer``), or an engine path / bytes,
            which is opened with ``TrtRunner`` for the duration of the call.
        inputs: None for random inputs; a path (.npz, .npy, .json, a folder of .npz/.npy files, or an image folder
            for a single-input image model, read as calibration reads it); one feed dict; or a list of feed dicts.
        shapes: {input name: shape} for random inputs; default: the profile's opt shape.
        profile: the engine profile's shapes ({name: (min, opt, max)} or a trtkit ``Profile``); default: read from
            the engine (``profile_index``) when it is a path, bytes or a ``TrtRunner``.
        profile_index: which engine profile to run in.
        precision: "fp32", "tf32", "fp16", "bf16" or "int8"; picks the default tolerance. Default: the engine's
            manifest, else "tf32" (noted in the report).
        tolerance: a complete :class:`Tolerance`; overrides ``precision`` and the five values below.
        atol, rtol: turn on the element-wise check (Polygraphy's rule); Polygraphy's own verdict is added beside.
        metric_threshold: allowed max |out - ref| / max |ref| instead of the precision's default: a number, or
            {output name: number} (key "" for every other output).
        min_cosine, min_top1: extra checks on cosine similarity and top-1 agreement.
        trials: number of random input sets (default 1), or the most feeds to take from ``inputs`` (default all).
        seed: seed of the random inputs.
        value_range: (low, high) of random floating-point inputs (default (-1, 1)); e.g. (0, 255) for a model
            that takes raw pixels.
        reference: "onnx-reference" (onnx's ReferenceEvaluator), "onnxruntime" (needs the package) or None:
            onnxruntime where it is installed, else onnx's evaluator.
        polygraphy_check: run Polygraphy's comparator beside trtkit's element-wise check when it is on.
        on_trial: called with (trial index, number of trials) before each trial (progress display).
        runner_options: keyword arguments for ``TrtRunner`` when ``engine`` is a path or bytes (e.g.
            ``allow_mismatch=True``).
        save_arrays: an ``.npz`` path to write every trial's inputs, engine outputs and reference outputs to
            (keys ``trial<i>/input/<name>``, ``trial<i>/engine/<name>``, ``trial<i>/reference/<name>``).

    Returns:
        A :class:`ParityReport`; ``report.passed`` is the overall verdict.

    Raises:
        ModelError, EngineError, ProfileError, InputError: the model, engine, shapes or inputs are unusable (the
            message says which and what would fit). A mismatch between engine and model is never raised: it is
            the report's verdict.
    """
    # before minutes of work, not after
    check_outputs({"save_arrays": save_arrays}, {**model_files(onnx_model, "onnx_model"), "engine": engine})
    model = load_model(onnx_model)
    reference = reference or default_backend()
    specs = inputs_mod.input_specs(model)
    _check_output_names(model, metric_threshold)
    # the values are checked before TensorRT is looked for (the precision, which may come from the engine, is not)
    tolerance_for(
        None, max_error_ratio=metric_threshold, atol=atol, rtol=rtol, min_cosine=min_cosine, min_top1=min_top1
    )
    notes: list[str] = []
    with open_engine(engine, profile_index=profile_index, runner_options=runner_options) as session:
        tol = tolerance or tolerance_for(
            _pick_precision(precision, session.precision, notes),
            max_error_ratio=metric_threshold,
            atol=atol,
            rtol=rtol,
            min_cosine=min_cosine,
            min_top1=min_top1,
        )
        bounds = profile if profile is not None else session.profile
        feeds, source = _feeds(inputs, specs, shapes, bounds, trials, seed, value_range)
        if source == "random" and session.shape_values:
            feeds = _with_shape_values(feeds, specs, session.shape_values, notes)
        if tol.precision == "int8" and source == "random":
            notes.append(
                "int8 engines are calibrated on real data and random inputs may fall outside the calibrated "
                "ranges: for a fair verdict give real inputs (a folder of them, e.g. the calibration folder)"
            )
        report = ParityReport(
            model=describe_model(onnx_model),
            engine=describe_engine(engine),
            tolerance=tol,
            trials=len(feeds),
            seed=seed if source == "random" else None,
            input_source=source,
            reference_backend=reference,
            notes=notes,
            shapes={n: tuple(a.shape) for n, a in feeds[0].items()},
        )
        outs, refs = _run_trials(report, feeds, session.infer, OnnxReference(model, backend=reference), on_trial)
    if tol.elementwise and polygraphy_check:
        _add_polygraphy(report, outs, refs, tol)
    if save_arrays is not None:
        write_arrays(save_arrays, feeds, outs, refs)
        report.notes.append(f"inputs and outputs of every trial saved to {save_arrays}")
    return report


def _check_output_names(model, metric_threshold) -> None:
    if not isinstance(metric_threshold, Mapping):
        return
    names = [o.name for o in model.graph.output]
    unknown = sorted(set(metric_threshold) - set(names) - {""})
    if unknown:
        raise UsageError(
            f"metric_threshold names output(s) {unknown} the model does not have (outputs: {', '.join(names)}).",
            field="metric_threshold",
            accepted=f"output names among {', '.join(names)}",
        )


def _pick_precision(given: str | None, from_engine: str | None, notes: list[str]) -> str:
    if given:
        return given
    if from_engine:
        notes.append(f"precision {from_engine} taken from the engine's manifest")
        return from_engine
    notes.append(
        f"the engine has no manifest saying its precision: judged as {ASSUMED_PRECISION} "
        "(give its precision if it was built otherwise)"
    )
    return ASSUMED_PRECISION


def _with_shape_values(feeds: list, specs, values: dict, notes: list) -> list:
    """Random feeds with each shape-tensor input given the profile's opt values (in the model's dtype)."""
    dtypes = {spec.name: spec.dtype for spec in specs}
    given = {n: np.array(v, dtypes.get(n, np.int64)) for n, v in values.items() if n in dtypes}
    notes.append(
        "shape-tensor input(s) "
        + ", ".join(f"'{n}' = {list(v)}" for n, v in values.items() if n in dtypes)
        + ": the profile's opt values (random values would rarely make a valid shape)"
    )
    return [{**feed, **{n: a.reshape(feed[n].shape) for n, a in given.items()}} for feed in feeds]


def _feeds(inputs, specs, shapes, bounds, trials: int | None, seed: int, value_range) -> tuple[list[dict], str]:
    """The feeds of the run and a description of where they came from."""
    if inputs is None:
        chosen = inputs_mod.resolve_shapes(specs, shapes, bounds)
        feeds = inputs_mod.random_feeds(
            specs,
            chosen,
            trials=1 if trials is None else trials,
            seed=seed,
            float_range=tuple(value_range or inputs_mod.DEFAULT_FLOAT_RANGE),
        )
        return feeds, "random"
    if isinstance(inputs, (str, os.PathLike)) and inputs_mod.is_image_folder(inputs):
        shape = inputs_mod.resolve_shapes(specs, shapes, bounds)[specs[0].name] if len(specs) == 1 else ()
        feeds, source = inputs_mod.image_feeds(inputs, specs, shape, limit=trials), f"images in {inputs}"
    elif isinstance(inputs, (str, os.PathLike)):
        feeds, source = inputs_mod.load_feeds(inputs, specs, limit=trials), str(inputs)
    elif isinstance(inputs, Mapping):
        feeds, source = [inputs_mod.conform_feed(inputs, specs)], "given feed"
    else:
        feeds = [inputs_mod.conform_feed(f, specs, origin=f"feed {i}") for i, f in enumerate(inputs)]
        source = "given feeds"
    if not feeds:
        raise InputError(f"No inputs found in {source}.")
    bounds_by_name = inputs_mod.profile_bounds(bounds)
    for spec in specs:
        for feed in feeds:
            inputs_mod.check_shape(spec, feed[spec.name].shape, bounds_by_name.get(spec.name))
    return feeds, source


def _run_trials(report: ParityReport, feeds, infer, reference: OnnxReference, on_trial):
    outs, refs = [], []
    timings = {"reference": 0.0, "engine": 0.0}
    for trial, feed in enumerate(feeds):
        if on_trial is not None:
            on_trial(trial, len(feeds))
        start = time.perf_counter()
        ref = reference(feed)
        timings["reference"] += time.perf_counter() - start
        start = time.perf_counter()
        # Copies: a runner may hand back views into buffers that its next call overwrites.
        out = {name: np.array(value, copy=True) for name, value in infer(dict(feed)).items()}
        timings["engine"] += time.perf_counter() - start
        report.results.extend(compare_outputs(out, ref, report.tolerance, trial=trial))
        outs.append(out)
        refs.append(ref)
    report.timings = {k: round(v, 6) for k, v in timings.items()}
    return outs, refs


def _add_polygraphy(report: ParityReport, outs, refs, tol: Tolerance) -> None:
    try:
        verdicts = polygraphy_verdicts(outs, refs, atol=tol.atol or 0.0, rtol=tol.rtol or 0.0)
    except Exception as exc:  # an API change in some Polygraphy release must not cost the user trtkit's verdict
        report.notes.append(
            f"Polygraphy's comparator could not run ({type(exc).__name__}: {exc}); trtkit's verdict stands"
        )
        return
    if verdicts is None:
        report.notes.append("Polygraphy is not installed: its element-wise verdict was not added")
        return
    for result in report.results:
        result.polygraphy_passed = verdicts.get((result.trial, result.name))
        ours = result.elementwise_failures == 0 if result.elementwise_failures is not None else None
        if result.polygraphy_passed is not None and ours is not None and result.polygraphy_passed != ours:
            report.notes.append(
                f"output '{result.name}' trial {result.trial}: Polygraphy's element-wise verdict "
                f"({'pass' if result.polygraphy_passed else 'fail'}) differs from trtkit's"
            )


def write_arrays(path, feeds, outs, refs) -> None:
    """Write every trial's inputs, engine outputs and reference outputs to one ``.npz`` (atomically)."""
    import io

    arrays: dict[str, Any] = {}
    for trial, (feed, out, ref) in enumerate(zip(feeds, outs, refs)):
        for kind, values in (("input", feed), ("engine", out), ("reference", ref)):
            arrays.update({f"trial{trial}/{kind}/{name}": np.asarray(v) for name, v in values.items()})
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    write_bytes_atomic(path, buffer.getvalue())
