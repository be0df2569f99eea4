"""A detector's class names: from a file, or from the ``names`` its ONNX model's metadata carries (ultralytics'
exports write ``str(model.names)`` there, e.g. ``{0: 'person', 1: 'bicycle'}``, besides ``task: detect|pose|...``
and a pose model's ``kpt_shape: [17, 3]``)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from trtkit.errors import DependencyError, UsageError


def parse_names(text: str) -> list[str]:
    """Class names from ``text``: a JSON (or Python) list, or dict of index → name; else one name a line.

    Raises:
        ValueError: a list or dict that does not parse, or is neither.
    """
    stripped = text.strip()
    if stripped[:1] in ("[", "{"):
        try:
            return _as_list(json.loads(stripped))
        except json.JSONDecodeError:
            return _as_list(ast.literal_eval(stripped))  # a Python literal, as in ONNX metadata
    return [line.strip() for line in text.splitlines() if line.strip()]


def _as_list(value) -> list[str]:
    if isinstance(value, dict):
        by_index = {int(k): str(v) for k, v in value.items()}
        return [by_index.get(i, str(i)) for i in range(max(by_index, default=-1) + 1)]
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    raise ValueError(f"a list or dict of names, not {type(value).__name__}")


def read_names(path) -> list[str]:
    """The class names in the file ``path`` (see :func:`parse_names`); a ``.yaml``/``.yml`` file is read with PyYAML,
    its ``names`` taken (an ultralytics dataset file) or the whole document.

    Raises:
        UsageError: the file cannot be read, does not parse, or names no class.
        DependencyError: a YAML file without PyYAML installed.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
        names = _yaml_names(text) if Path(path).suffix.lower() in (".yaml", ".yml") else parse_names(text)
    except OSError as exc:
        raise UsageError(f"class_names file '{path}' cannot be read: {exc.strerror}", field="class_names") from exc
    except (ValueError, SyntaxError) as exc:
        raise UsageError(
            f"class_names file '{path}' is not one name a line, a JSON list or dict, or a YAML file's names ({exc})",
            field="class_names",
        ) from exc
    if not names:
        raise UsageError(f"class_names file '{path}' names no class", field="class_names")
    return names


def _yaml_names(text: str) -> list[str]:
    try:
        import yaml
    except ImportError as exc:
        raise DependencyError("A YAML names file needs PyYAML: pip install pyyaml") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(str(exc).splitlines()[0]) from exc
    return _as_list(data.get("names") if isinstance(data, dict) and "names" in data else data)


def metadata_names(metadata: dict | None) -> list[str] | None:
    """The class names of a model's metadata (ONNX ``metadata_props`` as a dict), or ``None`` where it has none that
    parse."""
    text = (metadata or {}).get("names")
    try:
        return parse_names(text) or None if text else None
    except (ValueError, SyntaxError):
        return None


def check_names(names, classes: int | None) -> None:
    """Refuse ``names`` that do not name every one of a model's ``classes``.

    Raises:
        UsageError: fewer names than classes.
    """
    if names is not None and classes is not None and len(names) < classes:
        raise UsageError(
            f"class_names names {len(names)} of the model's {classes} classes: give one name per class, in the "
            "order of the class indices",
            field="class_names",
        )


def model_metadata(model) -> dict:
    """The ``metadata_props`` of an ONNX file, or of the model an engine was built from (its manifest's, or ``{}``)."""
    if str(model).lower().endswith(".onnx"):
        import onnx

        try:
            return {p.key: p.value for p in onnx.load(str(model), load_external_data=False).metadata_props}
        except Exception:  # noqa: BLE001 - an unreadable model: loading it for its work says why
            return {}
    from trtkit.manifest import read_manifest

    manifest = read_manifest(model)
    return manifest.model.metadata if manifest else {}


def check_task(metadata: dict | None, task: str, instead: dict, model: str = "The model") -> None:
    """Refuse a model whose ultralytics metadata names another task than ``task`` (``detect``, ``pose``): a
    YOLOv8-pose head ``(N, 56, 8400)`` also reads as boxes of 52 classes. ``instead``: what to give, by task.

    Raises:
        UsageError: the metadata names another task.
    """
    theirs = (metadata or {}).get("task")
    if theirs and theirs != task:
        hint = f": give {instead[theirs]}" if theirs in instead else ", which this does not decode"
        raise UsageError(f"{model} is a {theirs} model (its metadata says task: {theirs}), not a {task} one{hint}")


def metadata_kpt_shape(metadata: dict | None) -> tuple[int, int] | None:
    """``(keypoints, values each)`` of a pose model's ultralytics metadata (``kpt_shape: [17, 3]``: x, y and
    visibility; ``[12, 2]``: x, y), or ``None``."""
    try:
        count, dims = ast.literal_eval((metadata or {}).get("kpt_shape", ""))
    except (ValueError, SyntaxError, TypeError):
        return None
    return (count, dims) if isinstance(count, int) and count > 0 and dims in (2, 3) else None
