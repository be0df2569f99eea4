"""Polygraphy's element-wise verdict as a cross-check of trtkit's own.

trtkit's verdicts are its own (:mod:`trtkit.parity.compare`); when an atol/rtol check is on, Polygraphy's
``Comparator.compare_accuracy`` with its simple compare function is run on the same arrays, so a user who trusts
``polygraphy run`` sees its answer beside trtkit's. Polygraphy's API moved between releases (0.47 returns one
``AccuracyResult``, later ones a list of them; ``CompareFunc.simple`` became ``SimpleCompareFunc``): both are handled.
"""

from __future__ import annotations

import contextlib
from typing import Mapping, Sequence

import numpy as np

ENGINE_RUNNER = "trtkit-engine"
REFERENCE_RUNNER = "onnx-reference"


def polygraphy_verdicts(
    outputs: Sequence[Mapping[str, np.ndarray]],
    references: Sequence[Mapping[str, np.ndarray]],
    *,
    atol: float,
    rtol: float,
) -> dict[tuple[int, str], bool] | None:
    """Polygraphy's element-wise verdict for every (trial, output).

    Args:
        outputs: the engine's outputs, one mapping per trial.
        references: the ONNX model's outputs, one mapping per trial (relative errors are relative to these).
        atol, rtol: Polygraphy's tolerances (an element fails when its error exceeds both).

    Returns:
        {(trial, output name): passed}, or None when Polygraphy is not importable. Outputs missing on one side are
        left out (trtkit's own verdict reports them).
    """
    try:
        from polygraphy.comparator import Comparator, IterationResult, RunResults
    except ImportError:
        return None
    shared = [[n for n in ref if n in out] for out, ref in zip(outputs, references)]
    run_results = RunResults()
    for runner, per_trial in ((ENGINE_RUNNER, outputs), (REFERENCE_RUNNER, references)):
        iterations = [
            IterationResult(outputs={n: np.ascontiguousarray(r[n]) for n in names}, runner_name=runner)
            for r, names in zip(per_trial, shared)
        ]
        run_results.append((runner, iterations))
    with _quiet():
        accuracy = Comparator.compare_accuracy(run_results, compare_func=_simple_compare_func(atol, rtol))
    return _flatten(accuracy)


def _simple_compare_func(atol: float, rtol: float):
    from polygraphy import comparator

    make = getattr(comparator, "SimpleCompareFunc", None)
    if make is None:
        make = comparator.CompareFunc.simple
    return make(atol=atol, rtol=rtol, check_shapes=True, check_error_stat="elemwise")


def _flatten(accuracy) -> dict[tuple[int, str], bool]:
    # 0.47-0.5x: one AccuracyResult (a dict keyed by runner pair); later: a list of them, one per compare function.
    results = [accuracy] if hasattr(accuracy, "keys") else list(accuracy)
    verdicts: dict[tuple[int, str], bool] = {}
    for result in results:
        for iterations in result.values():
            for trial, per_output in enumerate(iterations):
                for name, compared in per_output.items():
                    verdicts[(trial, name)] = verdicts.get((trial, name), True) and bool(compared)
    return verdicts


@contextlib.contextmanager
def _quiet():
    """Polygraphy logs every comparison at INFO; keep that out of trtkit's output while it runs."""
    from polygraphy.logger import G_LOGGER

    verbosity = getattr(G_LOGGER, "verbosity", None)
    if verbosity is None:
        yield
        return
    with verbosity(G_LOGGER.CRITICAL):
        yield
