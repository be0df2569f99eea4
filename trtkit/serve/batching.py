"""A served batch on one runner: Triton's gathered requests joined into one call and the outputs split back.

The Python-backend model inside Triton's stubs (:mod:`trtkit.serve.python_backend_model`) runs its batches through
:func:`run_requests`.
"""

from __future__ import annotations

import numpy as np


def run_requests(runner, requests: list, batched: bool) -> list:
    """Run Triton's gathered ``requests`` (each a mapping of input name to array) on ``runner``.

    A batched model's requests are joined along the batch dimension into one call and each gets its rows of the
    outputs back; an unbatched model runs them one by one. The rows are joined straight into the runner's pinned
    input buffers where the inputs' dtypes are the engine's (:func:`joined_inputs`).
    """
    if not batched:
        return [runner.infer({name: req[name] for name in req}) for req in requests]
    if len(requests) == 1:
        req = requests[0]
        return [runner.infer({name: req[name] for name in req})]
    names = list(requests[0])
    sizes = [len(req[names[0]]) for req in requests]
    outputs = runner.infer(joined_inputs(runner, requests, names))
    cuts = np.cumsum(sizes)[:-1]
    split = {name: np.split(value, cuts) for name, value in outputs.items()}
    return [{name: parts[i] for name, parts in split.items()} for i in range(len(requests))]


def joined_inputs(runner, requests: list, names: list) -> dict:
    """The inputs of ``requests`` joined along the batch dimension, into the runner's pinned input buffers
    (:meth:`~trtkit.runtime.runner.TrtRunner.host_inputs`: the join is then the only host copy, and the buffers are
    sent from where they are) when every input is one of the engine's, in its dtype; else into new arrays, which the
    runner converts and copies as it does any input."""
    parts = {name: [req[name] for req in requests] for name in names}
    specs = {spec.name: spec for spec in runner.input_specs}
    direct = set(parts) == set(specs) and all(
        np.dtype(p.dtype) == np.dtype(specs[name].dtype) for name, group in parts.items() for p in group
    )
    if not direct:
        return {name: np.concatenate(group) for name, group in parts.items()}
    shapes = {name: (sum(len(p) for p in group), *group[0].shape[1:]) for name, group in parts.items()}
    views = runner.host_inputs(shapes)
    for name, group in parts.items():
        np.concatenate(group, out=views[name])
    return views
