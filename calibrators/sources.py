"""Calibration data sources and batching.

A source is an iterable of *feed dicts*: ``{input_name: array}`` whose arrays carry a leading batch axis (of any
size). :func:`batches` re-chunks any source into feed dicts of exactly the calibration batch size, up to a cap on
the number of samples. Every source also has an ``identity()`` digest recorded in a calibration cache's provenance.

- :class:`ImageFolderSource`: image files read with pillow and preprocessed (:mod:`calibrators.preprocess`).
- :class:`ArrayFolderSource`: ``.npy`` (one input) or ``.npz`` (keys are input names) files.
- :class:`IterableSource`: any Python iterable of feed dicts.
"""

from __future__ import annotations

import hashlib
import logging
import os
import zipfile
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from calibrators.preprocess import Preprocess, load_image, with_model_size
from trtkit.errors import CalibrationError
from trtkit.images import IMAGE_EXTENSIONS
from trtkit.model import model_inputs

logger = logging.getLogger("trtkit")

ARRAY_EXTENSIONS = (".npy", ".npz")
_MAX_LISTED = 10


def _list_files(folder: Path, extensions: tuple[str, ...], kind: str) -> list[Path]:
    return list_files(
        folder, extensions, kind, error=CalibrationError, missing="Calibration data folder", empty="Calibration folder"
    )


def list_files(
    folder: Path,
    extensions: tuple[str, ...],
    kind: str,
    *,
    error: type = CalibrationError,
    missing: str = "Folder",
    empty: str = "Folder",
) -> list[Path]:
    """The files under ``folder`` (recursively, sorted) whose suffix is one of ``extensions``.

    Raises:
        error: the folder does not exist (``"<missing> '...' does not exist"``), or holds no such file (``"<empty>
            '...' has no <kind> files"``, naming what it holds instead).
    """
    if not folder.is_dir():
        raise error(f"{missing} '{folder}' does not exist or is not a folder.")
    if not os.access(folder, os.R_OK | os.X_OK):  # rglob would see an empty folder
        raise error(f"{missing} '{folder}' cannot be read (permission denied); give a folder this user can read.")
    everything = sorted(p for p in folder.rglob("*") if p.is_file())
    chosen = [p for p in everything if p.suffix.lower() in extensions]
    if not chosen:
        others = ", ".join(p.name for p in everything[:_MAX_LISTED]) or "nothing"
        raise error(
            f"{empty} '{folder}' has no {kind} files ({', '.join(extensions)}); it holds {len(everything)} "
            f"other file(s): {others}."
        )
    return chosen


def _digest_files(folder: Path, files: list[Path]) -> str:
    """sha256 of the sorted relative names and sizes: changes when files are added, removed, renamed or resized."""
    h = hashlib.sha256()
    for path in files:
        h.update(f"{path.relative_to(folder).as_posix()}\t{path.stat().st_size}\n".encode())
    return h.hexdigest()


def _raise_unreadable(folder: Path, failures: list[tuple[Path, str]]) -> None:
    listed = "; ".join(f"{p.relative_to(folder)}: {why}" for p, why in failures[:_MAX_LISTED])
    more = f" (and {len(failures) - _MAX_LISTED} more)" if len(failures) > _MAX_LISTED else ""
    raise CalibrationError(
        f"{len(failures)} calibration file(s) in '{folder}' cannot be read: {listed}{more}. Remove or replace them."
    )


class ImageFolderSource:
    """Images from a folder (recursively), one sample per file, in sorted path order.

    Args:
        folder: the folder.
        input_name: the model input the images feed.
        settings: preprocessing; ``settings.size`` may be ``None`` if ``input_shape`` is given.
        input_shape: the model input's shape, to take the image size and channel count from.
    """

    def __init__(self, folder, input_name: str, settings: Preprocess | None = None, input_shape=None):
        self.folder = Path(folder)
        self.input_name = input_name
        settings = settings or Preprocess()
        self.settings = with_model_size(settings, input_shape) if input_shape is not None else settings
        self.files = _list_files(self.folder, IMAGE_EXTENSIONS, "image")

    def check(self) -> None:
        """Open every file's header; raise one error naming every unreadable file and why."""
        from PIL import Image

        failures = []
        for path in self.files:
            try:
                with Image.open(path) as img:
                    img.verify()
            except Exception as exc:  # pillow raises many types for a bad file
                failures.append((path, f"{type(exc).__name__}: {exc}"))
        if failures:
            _raise_unreadable(self.folder, failures)

    def identity(self) -> str:
        return _digest_files(self.folder, self.files)

    def __len__(self) -> int:
        return len(self.files)

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        self.check()
        for path in self.files:
            yield {self.input_name: load_image(path, self.settings)[None]}


class ArrayFolderSource:
    """``.npy`` / ``.npz`` files from a folder, in sorted path order.

    A ``.npy`` file feeds the model's only input; a ``.npz`` file's keys are input names. An array whose rank is
    one less than the input's gets a batch axis; otherwise its first axis is the batch.

    Args:
        folder: the folder.
        inputs: the model inputs, ``{name: shape}`` (see :func:`trtkit.model.model_inputs`).
    """

    def __init__(self, folder, inputs: dict[str, tuple]):
        self.folder = Path(folder)
        self.inputs = dict(inputs)
        self.files = _list_files(self.folder, ARRAY_EXTENSIONS, ".npy/.npz")

    def identity(self) -> str:
        return _digest_files(self.folder, self.files)

    def __len__(self) -> int:
        return len(self.files)

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        for path in self.files:  # an array one rank short of its input gets a batch axis
            yield {
                name: arr[None] if arr.ndim == len(self.inputs[name]) - 1 else arr
                for name, arr in self._read(path).items()
            }

    def _read(self, path: Path) -> dict[str, np.ndarray]:
        """The file's arrays by input name, as stored (no batch axis added)."""
        try:
            if path.suffix.lower() == ".npz":
                with np.load(path, allow_pickle=False) as data:
                    feed = {key: data[key] for key in data.files}
            else:
                feed = {self._only_input(path): np.load(path, allow_pickle=False)}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:  # numpy's errors for damaged files
            why = f"{type(exc).__name__}: {exc}"
            if "allow_pickle" in str(exc):  # numpy's advice would run code from the file
                why = "it holds Python objects (an object array), which trtkit does not load; save numeric arrays"
            _raise_unreadable(self.folder, [(path, why)])
        unknown = sorted(set(feed) - set(self.inputs))
        if unknown:
            raise CalibrationError(
                f"Calibration file '{path}' has arrays {unknown} that are not model inputs; the inputs are "
                f"{sorted(self.inputs)}."
            )
        return feed

    def _only_input(self, path: Path) -> str:
        if len(self.inputs) != 1:
            raise CalibrationError(
                f"Calibration file '{path}' is a .npy array but the model has {len(self.inputs)} inputs "
                f"({', '.join(self.inputs)}); use .npz files keyed by input name."
            )
        return next(iter(self.inputs))


class IterableSource:
    """Any iterable of feed dicts (arrays with a leading batch axis).

    Args:
        iterable: the feed dicts; re-iterated from the start for each pass if it is a re-iterable collection.
        identity: a string naming the data, recorded in cache provenance (``None``: the data cannot be verified and
            a cache is matched on everything else, with a warning).
    """

    def __init__(self, iterable: Iterable[dict], identity: str | None = None):
        self.iterable = iterable
        self._identity = identity

    def identity(self) -> str | None:
        if self._identity is None:
            return None
        return hashlib.sha256(self._identity.encode()).hexdigest()

    def __iter__(self):
        for i, feed in enumerate(self.iterable):
            if not isinstance(feed, dict):
                raise CalibrationError(
                    f"Calibration item #{i} is a {type(feed).__name__}; each item must be a dict of input name to "
                    f"array."
                )
            yield {name: _as_array(f"item #{i}", name, arr) for name, arr in feed.items()}


def open_source(data, model=None, settings: Preprocess | None = None):
    """A calibration source from a folder path (images or arrays), an existing source, or an iterable of feed dicts.

    Args:
        data: folder path, a source object, or an iterable of feed dicts.
        model: the ONNX ``ModelProto`` (input names and shapes; needed for folders).
        settings: image preprocessing.

    Raises:
        CalibrationError: the folder has neither images nor arrays, or the model has several inputs for images.
    """
    if isinstance(data, (ImageFolderSource, ArrayFolderSource, IterableSource)):
        return data
    if not isinstance(data, (str, Path)):
        return IterableSource(data)
    if model is None:
        raise CalibrationError("A calibration folder needs the ONNX model to know its inputs.")
    inputs = model_inputs(model)
    folder = Path(data)
    if folder.is_dir() and any(p.suffix.lower() in ARRAY_EXTENSIONS for p in folder.rglob("*")):
        return ArrayFolderSource(folder, inputs)
    if len(inputs) != 1:
        raise CalibrationError(
            f"Image calibration feeds one input, but the model has {len(inputs)} ({', '.join(inputs)}); "
            f"give .npz files keyed by input name instead."
        )
    name, shape = next(iter(inputs.items()))
    return ImageFolderSource(folder, name, settings, input_shape=shape)


def batches(source, batch_size: int, max_samples: int | None = None):
    """Re-chunk a source into feed dicts of exactly ``batch_size`` samples (a last partial batch is dropped).

    Args:
        source: iterable of feed dicts with a leading batch axis.
        batch_size: samples per yielded batch.
        max_samples: stop after this many samples (``None``: all).

    Yields:
        feed dicts with contiguous arrays.

    Raises:
        CalibrationError: the source yields no samples, fewer than one batch, or inputs with unequal batch sizes.
    """
    if batch_size < 1:
        raise CalibrationError(f"Calibration batch size must be at least 1; got {batch_size}.")
    pending: dict[str, list[np.ndarray]] = {}
    held = produced = seen = 0
    for feed in source:
        feed = _cap(_check_batch(feed), max_samples, seen)
        if feed is None:
            break
        n = next(iter(feed.values())).shape[0] if feed else 0
        seen += n
        for name, arr in feed.items():
            pending.setdefault(name, []).append(arr)
        held += n
        while held >= batch_size:
            out, pending = _split(pending, batch_size)
            held -= batch_size
            produced += 1
            yield out
    if held:
        logger.info("Calibration: dropped the last %d sample(s), fewer than a batch of %d.", held, batch_size)
    if produced == 0:
        raise CalibrationError(
            f"The calibration data gave {seen} sample(s), fewer than one batch of {batch_size}; give more data or a "
            f"smaller --calib-batch."
        )


def _check_batch(feed: dict) -> dict:
    sizes = {name: (arr.shape[0] if np.ndim(arr) else 0) for name, arr in feed.items()}
    if len(set(sizes.values())) > 1:
        raise CalibrationError(f"Calibration feed has inputs with different batch sizes: {sizes}.")
    return feed


def _cap(feed: dict, max_samples: int | None, seen: int):
    if max_samples is None:
        return feed
    left = max_samples - seen
    if left <= 0:
        return None
    return {name: arr[:left] for name, arr in feed.items()}


def _split(pending: dict, size: int):
    out, rest = {}, {}
    for name, parts in pending.items():
        joined = np.concatenate(parts) if len(parts) > 1 else parts[0]
        out[name] = np.ascontiguousarray(joined[:size])
        rest[name] = [joined[size:]] if joined.shape[0] > size else []
    return out, rest


# --- every sample checked against the model's inputs before calibrating ----------------------------------------------


class SampleSpec:
    """What calibration samples must look like: per input, its dims (``-1`` where dynamic), its dtype and, where a
    profile bounds it, the (min, max) shape.

    Args:
        inputs: ``{name: dims}`` with ``-1`` (or ``None``/a name) for dynamic dims.
        dtypes: ``{name: numpy dtype}`` (inputs missing here are not dtype-checked).
        ranges: ``{name: (min_shape, max_shape)}``, e.g. profile 0 (``None``: dynamic dims are not bounded).
    """

    def __init__(self, inputs: dict, dtypes: dict | None = None, ranges: dict | None = None):
        self.inputs = {n: tuple(d if isinstance(d, int) and d > 0 else -1 for d in dims) for n, dims in inputs.items()}
        self.dtypes = {n: np.dtype(t) for n, t in (dtypes or {}).items()}
        self.ranges = dict(ranges or {})
        self._seen: dict[str, tuple] = {}

    def check(self, where: str, feed: dict) -> dict:
        """Return ``feed`` as arrays with a batch axis, or raise naming ``where`` (a file or an item)."""
        return {name: self._check_one(where, name, arr) for name, arr in feed.items()}

    def _check_one(self, where: str, name: str, arr) -> np.ndarray:
        arr = _as_array(where, name, arr)
        dims = self.inputs.get(name)
        if dims is None:
            raise CalibrationError(
                f"Calibration {where} has an array '{name}' that is not a model input; the inputs "
                f"are {sorted(self.inputs)}."
            )
        _check_dtype(where, name, arr, self.dtypes.get(name))
        if arr.ndim == len(dims) - 1:
            arr = arr[None]
        if arr.ndim != len(dims):
            raise CalibrationError(
                f"Calibration {where}: array '{name}' has shape {arr.shape}; input '{name}' has "
                f"{len(dims)} dims ({_dims_text(dims)}), so give arrays of that rank (or one less "
                f"for a single sample)."
            )
        if arr.shape[0] == 0:
            raise CalibrationError(f"Calibration {where}: array '{name}' holds no samples (shape {arr.shape}).")
        self._check_sample_shape(where, name, arr.shape, dims)
        return arr

    def _check_sample_shape(self, where: str, name: str, shape: tuple, dims: tuple) -> None:
        low, high = self.ranges.get(name, (None, None))
        for axis in range(1, len(dims)):
            size, want = shape[axis], dims[axis]
            bad = (want != -1 and size != want) or (
                want == -1 and low is not None and not low[axis] <= size <= high[axis]
            )
            if bad:
                accepted = _dims_text(dims) if low is None else f"{_dims_text(low)} .. {_dims_text(high)}"
                raise CalibrationError(
                    f"Calibration {where}: array '{name}' has samples of shape {shape[1:]}; input "
                    f"'{name}' takes {accepted} (batch axis first), so axis {axis} must be "
                    f"{want if want != -1 else f'{low[axis]}..{high[axis]}'}."
                )
        first = self._seen.setdefault(name, (where, shape[1:]))
        if first[1] != shape[1:]:
            raise CalibrationError(
                f"Calibration {where}: array '{name}' has samples of shape {shape[1:]}, but "
                f"{first[0]} has {first[1]}; a calibration batch has one shape, so give every "
                f"sample the same shape."
            )


def _as_array(where: str, name: str, arr) -> np.ndarray:
    try:
        arr = np.asarray(arr)
    except (ValueError, TypeError) as exc:  # ragged nested lists
        raise CalibrationError(f"Calibration {where}: '{name}' is not a rectangular array ({exc}).") from exc
    if arr.dtype == object or arr.dtype.kind not in "biuf":
        raise CalibrationError(
            f"Calibration {where}: array '{name}' holds {arr.dtype} values (mixed or non-numeric "
            f"data); give numeric arrays."
        )
    return arr


def _check_dtype(where: str, name: str, arr: np.ndarray, want) -> None:
    if want is None:
        return
    groups = {"f": "floating point", "i": "integer", "u": "integer", "b": "boolean"}
    if groups.get(arr.dtype.kind) != groups.get(want.kind):
        raise CalibrationError(
            f"Calibration {where}: array '{name}' is {arr.dtype}; input '{name}' takes {want}, so "
            f"give {groups.get(want.kind, str(want))} arrays (e.g. {want})."
        )


def _dims_text(dims) -> str:
    return "x".join("?" if d == -1 else str(d) for d in dims)


def onnx_input_dtypes(model) -> dict:
    """``{input: numpy dtype}`` of an ONNX model's graph inputs (initializers excluded)."""
    from onnx import helper

    initializers = {init.name for init in model.graph.initializer}
    dtypes = {}
    for inp in model.graph.input:
        if inp.name in initializers or not inp.type.tensor_type.elem_type:
            continue
        try:
            dtypes[inp.name] = np.dtype(helper.tensor_dtype_to_np_dtype(inp.type.tensor_type.elem_type))
        except (KeyError, TypeError):
            continue
    return dtypes


def check_source(source, spec: SampleSpec) -> None:
    """Check every sample of a folder source against ``spec`` before calibrating (other sources are checked item by
    item as they are read: see :func:`checked`)."""
    if isinstance(source, ArrayFolderSource):
        for path in source.files:
            spec.check(f"file '{path}'", source._read(path))


def checked(source, spec: SampleSpec):
    """The feeds of ``source``, each checked against ``spec`` (a folder's files are named by their path)."""
    if isinstance(source, ArrayFolderSource):
        for path in source.files:
            yield spec.check(f"file '{path}'", source._read(path))
        return
    for i, feed in enumerate(source):
        yield spec.check(f"item #{i}", feed)
