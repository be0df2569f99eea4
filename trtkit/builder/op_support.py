"""What TensorRT's ONNX parser documents it supports, per version: static tables, no TensorRT needed.

Read by the op check (:mod:`trtkit.builder.opcheck`) and by the compatibility rewrites' parser target
(:mod:`trtkit.builder.rewrites`); the installed parser's own answer always decides.

The op lists are data (``data/onnx_ops.json``): the ops each TensorRT release's parser marks supported (Y) or not (N)
in onnx-tensorrt's ``docs/operators.md``, made by ``scripts/onnx_op_table.py`` from that file at the release refs.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

_OP_TABLE = Path(__file__).resolve().parent / "data" / "onnx_ops.json"

# highest ai.onnx opset each parser documents (onnx-tensorrt docs/operators.md)
_MAX_DOCUMENTED_OPSET = ((8,), 17), ((10, 0), 20), ((10, 15), 24)


@functools.lru_cache(maxsize=1)
def op_table() -> dict:
    """``{version label: {"supported": set, "unsupported": set, "max_opset": int, ...}}``, oldest first."""
    versions = json.loads(_OP_TABLE.read_text())["versions"]
    ordered = sorted(versions, key=lambda v: tuple(int(p) for p in v.split(".") if p.isdigit()))
    return {
        v: {
            **versions[v],
            "supported": frozenset(versions[v]["supported"]),
            "unsupported": frozenset(versions[v]["unsupported"]),
        }
        for v in ordered
    }


def entry_for(version: str) -> dict | None:
    """The op table's entry for a TensorRT ``version`` (a label such as ``8.6``, or a full version such as
    ``8.6.0.12``): its major.minor list, with what that patch release's own parser was found to lack moved from
    ``supported`` to ``unsupported`` (``None``: no list for that major.minor)."""
    parts = str(version).split(".")
    entry = op_table().get(".".join(parts[:2]))
    if entry is None or len(parts) < 3:
        return entry
    patch = ".".join(parts[:3])
    lacks = frozenset((entry.get("patch_differences") or {}).get(patch, {}).get("unsupported", ()))
    if not lacks:
        return entry
    return {**entry, "supported": entry["supported"] - lacks, "unsupported": entry["unsupported"] | lacks}


def table_status(op_type: str, version: str) -> bool | None:
    """Whether onnx-tensorrt's list for ``version`` marks ``op_type`` supported (``None``: not listed); a full
    version (``8.6.0``) also counts what that patch release's parser was found to lack."""
    entry = entry_for(version)
    if entry is None:
        return None
    return True if op_type in entry["supported"] else False if op_type in entry["unsupported"] else None


def added_after_8() -> frozenset:
    """Ops TensorRT's parser gained after 8.x: in the newest list of the op table, not in 8.6's."""
    table = op_table()
    return frozenset(table[list(table)[-1]]["supported"] - table["8.6"]["supported"])


def unsupported_as_of_10_15() -> frozenset:
    """Ops with no native TensorRT support: marked N in the newest list of the op table (the name is older than the
    table)."""
    table = op_table()
    return frozenset(table[list(table)[-1]]["unsupported"])


def max_documented_opset(version: tuple) -> int | None:
    """Highest ai.onnx opset the given TensorRT's parser documents, or ``None`` if unknown."""
    best = None
    for since, opset in _MAX_DOCUMENTED_OPSET:
        if tuple(version[: len(since)]) >= since:
            best = opset
    return best
