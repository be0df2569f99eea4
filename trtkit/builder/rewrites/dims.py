"""Symbolic dimension names: one distinct name per axis where an exporter's name would tie unrelated axes together.

TensorRT's parser treats input dimensions that share a symbolic name as equal, and refuses a model whose profiles
give them different sizes (``Input dimensions with this name are inconsistent``). Exporters that write the same
placeholder for every dynamic dimension (``?``, ``-1``, ``None``, ``unk__12``, an empty name) make a model unbuildable
for any profile where two such axes differ. Placeholders, and a name used at two axes of one tensor, get a name of
their own per axis; a meaningful name shared across inputs (``batch`` on every input) stays shared, as it says
something true.
"""

from __future__ import annotations

import re

from trtkit.builder.rewrites.base import Rewrite

_PLACEHOLDER = re.compile(r"^(\?|-1|None|none|null|unk__\d+|)$")
_WHY = "TensorRT treats input dimensions that share a name as equal"


def is_placeholder(name: str) -> bool:
    """Whether a ``dim_param`` is an exporter's placeholder rather than a name that means something."""
    return bool(_PLACEHOLDER.match(name.strip()))


def ambiguous_dims(proto) -> list:
    """``(tensor, axis, name, reason)`` for each dynamic input axis whose name would tie it to other axes."""
    return [
        (value.name, axis, dim.dim_param, reason)
        for value in _graph_inputs(proto)
        for axis, dim, reason in _ambiguous_axes(value)
    ]


def _ambiguous_axes(value) -> list:
    """``(axis, dim, reason)`` for the dynamic axes of one tensor that need a name of their own."""
    dims = list(value.type.tensor_type.shape.dim)
    names = [d.dim_param for d in dims if not d.HasField("dim_value")]
    found = []
    for axis, dim in enumerate(dims):
        if dim.HasField("dim_value"):
            continue
        name = dim.dim_param
        if is_placeholder(name):
            found.append((axis, dim, f"'{name}' is a placeholder" if name else "no name"))
        elif names.count(name) > 1:
            found.append((axis, dim, f"'{name}' names {names.count(name)} axes of this tensor"))
    return found


def describe_ambiguity(proto) -> list:
    """Lines for ``trtkit inspect --check``: inputs whose dimension names TensorRT would read as equal."""
    by_name: dict = {}
    for tensor, axis, name, reason in ambiguous_dims(proto):
        by_name.setdefault((name, reason), []).append(f"{tensor}[{axis}]")
    return [
        f"dynamic dimensions {', '.join(where)}: {reason}; TensorRT would treat them as equal "
        "(the build renames them, see `trtkit sanitize`)"
        for (_, reason), where in by_name.items()
        if len(where) > 1 or "names" in reason
    ]


def rewrite(proto, target=None) -> list:
    """Give each ambiguous dynamic axis of the graph's inputs and outputs a distinct ``<tensor>_dim<axis>`` name."""
    used = _used_names(proto)
    changes = []
    inputs = {v.name for v in _graph_inputs(proto)}
    for value in [*_graph_inputs(proto), *proto.graph.output]:
        for axis, dim, reason in _ambiguous_axes(value):
            old, dim.dim_param = dim.dim_param, _fresh(f"{value.name}_dim{axis}", used)
            kind = "input" if value.name in inputs else "output"
            changes.append(
                Rewrite(
                    "symbolic-dims",
                    f"{kind} '{value.name}' axis {axis}",
                    f"dimension '{old}' renamed '{dim.dim_param}'",
                    f"{reason}; {_WHY}",
                )
            )
    return changes


def _graph_inputs(proto) -> list:
    initializers = {t.name for t in proto.graph.initializer}
    return [v for v in proto.graph.input if v.name not in initializers]


def _used_names(proto) -> set:
    return {
        d.dim_param
        for v in [*proto.graph.input, *proto.graph.output, *proto.graph.value_info]
        for d in v.type.tensor_type.shape.dim
        if d.dim_param
    }


def _fresh(base: str, used: set) -> str:
    name, n = base, 1
    while name in used:
        n += 1
        name = f"{base}_{n}"
    used.add(name)
    return name
