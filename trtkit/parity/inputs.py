"""Inputs for a parity run: the model's input specs, concrete shapes within a profile, random or loaded feeds."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np

from calibrators.sources import ImageFolderSource
from trtkit.errors import CalibrationError, InputError, ProfileError
from trtkit.model import value_dims

DEFAULT_FLOAT_RANGE = (-1.0, 1.0)
# Integer inputs are often indices or token ids: small non-negative values keep the ONNX model in range.
DEFAULT_INT_RANGE = (0, 4)


@dataclass(frozen=True)
class InputSpec:
    """A model input as the ONNX graph declares it.

    Attributes:
        name: input name.
        dtype: numpy dtype.
        dims: one entry per axis: an int for a fixed dim, a str (symbolic name) or None for a dynamic one.
    """

    name: str
    dtype: np.dtype
    dims: tuple

    @property
    def dynamic_axes(self) -> list[int]:
        return [i for i, d in enumerate(self.dims) if not isinstance(d, int) or d < 0]

    def describe(self) -> str:
        dims = "x".join(str(d) if isinstance(d, int) and d >= 0 else (d or "?") for d in self.dims)
        return f"'{self.name}' ({self.dtype}, {dims or 'scalar'})"


def input_specs(model) -> list[InputSpec]:
    """The real inputs of an ONNX model (initializers listed as inputs by old exporters are left out).

    Args:
        model: an ``onnx.ModelProto``.

    Returns:
        One :class:`InputSpec` per graph input, in graph order.
    """
    from onnx import helper

    initializers = {init.name for init in model.graph.initializer}
    specs = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type))
        specs.append(InputSpec(value.name, dtype, tuple(value_dims(value))))
    return specs


def profile_bounds(profile) -> dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
    """Normalise a profile to {name: (min, opt, max)}; accepts a trtkit Profile, or a mapping of InputShape/tuples."""
    if profile is None:
        return {}
    shapes = getattr(profile, "shapes", profile)
    bounds = {}
    for name, shape in shapes.items():
        if hasattr(shape, "opt"):
            bounds[name] = (tuple(shape.min), tuple(shape.opt), tuple(shape.max))
        else:
            low, opt, high = shape
            bounds[name] = (tuple(low), tuple(opt), tuple(high))
    return bounds


def resolve_shapes(specs: Iterable[InputSpec], shapes: Mapping | None = None, profile=None) -> dict[str, tuple]:
    """Pick one concrete shape per input: the given one, else the profile's opt shape, else the model's fixed shape.

    Args:
        specs: the model's inputs.
        shapes: {name: shape} chosen by the user (``--shapes``); each must fit the model and the profile.
        profile: the engine's profile for this run ({name: (min, opt, max)} or a trtkit ``Profile``), or None.

    Returns:
        {name: shape tuple} for every input.

    Raises:
        ProfileError: a shape names an unknown input, does not fit the model or the profile, or a dynamic input has
            neither a given shape nor a profile.
    """
    specs = list(specs)
    shapes, bounds = dict(shapes or {}), profile_bounds(profile)
    unknown = sorted(set(shapes) - {s.name for s in specs})
    if unknown:
        known = ", ".join(f"'{s.name}'" for s in specs)
        raise ProfileError(
            f"shapes names input(s) {', '.join(map(repr, unknown))} the model does not have (inputs: {known}).",
            field="shapes",
        )
    resolved = {}
    for spec in specs:
        if spec.name in shapes:
            shape = tuple(int(d) for d in shapes[spec.name])
        elif spec.name in bounds:
            shape = bounds[spec.name][1]
        elif not spec.dynamic_axes:
            shape = tuple(spec.dims)
        else:
            raise ProfileError(_no_shape_message(spec), field="shapes")
        check_shape(spec, shape, bounds.get(spec.name))
        resolved[spec.name] = shape
    return resolved


def _no_shape_message(spec: InputSpec) -> str:
    example = "x".join(str(d) if isinstance(d, int) and d >= 0 else "1" for d in spec.dims)
    axes = ", ".join(str(a) for a in spec.dynamic_axes)
    return (
        f"Input {spec.describe()} has dynamic axes ({axes}) and no shape was given; give its shape in shapes "
        f"(e.g. {spec.name}:{example}), or compare against an engine whose profile gives its opt shape."
    )


def check_shape(spec: InputSpec, shape: tuple, bounds=None) -> None:
    """Check a concrete shape against the model's fixed dims and, if given, the profile's (min, opt, max).

    Raises:
        ProfileError: wrong rank, a fixed dim changed, or a dim outside the profile.
    """
    shape = tuple(int(d) for d in shape)
    if len(shape) != len(spec.dims):
        raise ProfileError(
            f"Input {spec.describe()}: shape {shape} has rank {len(shape)}, the model's has {len(spec.dims)}."
        )
    for axis, (want, got) in enumerate(zip(spec.dims, shape)):
        if isinstance(want, int) and want >= 0 and want != got:
            raise ProfileError(f"Input {spec.describe()}: shape {shape} changes fixed axis {axis} ({want}) to {got}.")
    if bounds is not None:
        low, _, high = bounds
        if any(not lo <= d <= hi for lo, d, hi in zip(low, shape, high)):
            raise ProfileError(
                f"Input '{spec.name}': shape {shape} is outside the engine's profile "
                f"(min {tuple(low)}, max {tuple(high)})."
            )


def random_feeds(
    specs: Iterable[InputSpec],
    shapes: Mapping[str, tuple],
    *,
    trials: int = 1,
    seed: int = 0,
    float_range: tuple[float, float] = DEFAULT_FLOAT_RANGE,
    int_range: tuple[int, int] = DEFAULT_INT_RANGE,
) -> list[dict[str, np.ndarray]]:
    """Random feeds, reproducible from ``seed``.

    Args:
        specs: the model's inputs.
        shapes: a concrete shape per input (:func:`resolve_shapes`).
        trials: how many feeds.
        seed: seed of numpy's PCG64 generator; the same seed gives the same feeds.
        float_range: uniform range of floating-point inputs.
        int_range: inclusive range of integer inputs.

    Returns:
        ``trials`` dicts {input name: array} with the model's dtypes.
    """
    if trials < 1:
        raise InputError(f"trials must be at least 1, got {trials}.")
    if len(float_range) != 2 or not float_range[0] < float_range[1]:
        raise InputError(f"The value range of random inputs must be (low, high) with low < high, got {float_range}.")
    rng = np.random.default_rng(seed)
    return [
        {s.name: _random_array(rng, s.dtype, shapes[s.name], float_range, int_range) for s in specs}
        for _ in range(trials)
    ]


def _random_array(rng, dtype: np.dtype, shape, float_range, int_range) -> np.ndarray:
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(int_range[0], int_range[1] + 1, size=shape).astype(dtype)
    return rng.uniform(float_range[0], float_range[1], size=shape).astype(dtype)


def load_feeds(path, specs: Iterable[InputSpec], *, limit: int | None = None) -> list[dict[str, np.ndarray]]:
    """Read feeds from a file or a folder.

    Args:
        path: a ``.npz`` (input name → array; one feed), a ``.npy`` (one feed of a single-input model), a ``.json``
            written by ``polygraphy run --save-inputs`` (a list of feeds), or a folder of ``.npz``/``.npy`` files,
            one feed each, in sorted order (the layout calibration data uses).
        specs: the model's inputs; arrays are checked against them and cast within their kind (float64 → float32).
        limit: read at most this many feeds.

    Returns:
        A list of feeds.

    Raises:
        InputError: the path does not exist, holds no usable files, or a feed does not match the model's inputs.
    """
    specs, path = list(specs), Path(path)
    if not path.exists():
        raise InputError(f"Inputs '{path}' do not exist; give a .npz, .npy, .json file or a folder of .npz/.npy files.")
    files = _feed_files(path)
    feeds = []
    for file in files:
        for feed in _read_file(file, specs):
            feeds.append(conform_feed(feed, specs, origin=str(file)))
            if limit is not None and len(feeds) >= limit:
                return feeds
    return feeds


IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm")


def is_image_folder(path) -> bool:
    """True for a folder (searched recursively) holding image files and no .npz/.npy files."""
    path = Path(path)
    if not path.is_dir():
        return False
    suffixes = {p.suffix.lower() for p in path.rglob("*") if p.is_file()}
    return bool(suffixes & set(IMAGE_SUFFIXES)) and not suffixes & {".npz", ".npy"}


def image_feeds(
    folder, specs: Iterable[InputSpec], shape: tuple, *, limit: int | None = None, preprocess=None
) -> list[dict[str, np.ndarray]]:
    """Feeds of a single-input image model from an image folder, the way calibration reads it.

    Images are read in sorted order and preprocessed by :mod:`calibrators.preprocess` (default: RGB, scaled to 0..1,
    NCHW, resized to the input's height and width), then grouped into batches of ``shape[0]``; a last partial
    batch is dropped.

    Args:
        folder: the image folder.
        specs: the model's inputs (exactly one).
        shape: the input shape to fill (its batch and image size).
        limit: at most this many feeds.
        preprocess: a ``calibrators.preprocess.Preprocess`` (None: the defaults above).

    Raises:
        InputError: the model has several inputs, or the folder holds fewer images than one batch, or unreadable
            images (each named).
    """
    from itertools import islice

    specs = list(specs)
    if len(specs) != 1:
        raise InputError(
            f"Image folder '{folder}' can feed a model with one input; this one has {len(specs)}: "
            f"{', '.join(s.name for s in specs)}. Use .npz files keyed by input name."
        )
    name, batch = specs[0].name, int(shape[0])
    try:
        samples = iter(ImageFolderSource(folder, name, preprocess, input_shape=shape))
        feeds: list = []
        while limit is None or len(feeds) < limit:
            chunk = list(islice(samples, batch))
            if len(chunk) < batch:
                break
            feeds.append({name: np.concatenate([c[name] for c in chunk]).astype(specs[0].dtype, copy=False)})
    except CalibrationError as exc:
        raise InputError(str(exc)) from exc
    if not feeds:
        raise InputError(
            f"Image folder '{folder}' has fewer images than one batch of {batch} (input '{name}' "
            f"shape {tuple(shape)}); add images or give a smaller batch in shapes.",
            field="shapes",
        )
    return feeds


def _feed_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    files = sorted(p for p in path.iterdir() if p.suffix in (".npz", ".npy") and p.is_file())
    if not files:
        raise InputError(f"Folder '{path}' holds no .npz or .npy files to use as inputs.")
    return files


def _read_file(file: Path, specs: list[InputSpec]) -> list[dict]:
    try:
        if file.suffix == ".json":
            from polygraphy.json import load_json

            loaded = load_json(str(file))
            return list(loaded) if isinstance(loaded, list) else [loaded]
        loaded = np.load(file, allow_pickle=False)
    except Exception as exc:  # numpy and polygraphy raise many kinds for unreadable files
        raise InputError(f"Cannot read inputs from '{file}': {exc}") from exc
    if isinstance(loaded, np.ndarray):
        if len(specs) != 1:
            names = ", ".join(f"'{s.name}'" for s in specs)
            raise InputError(
                f"'{file}' holds one array but the model has {len(specs)} inputs ({names}); "
                f"use a .npz keyed by input name."
            )
        return [{specs[0].name: loaded}]
    with loaded:
        return [{key: loaded[key] for key in loaded.files}]


def conform_feed(feed: Mapping, specs: Iterable[InputSpec], *, origin: str = "inputs") -> dict[str, np.ndarray]:
    """Check a feed against the model's inputs and cast arrays within their kind.

    Raises:
        InputError: a missing or unknown input, a dtype of another kind (float given for an int input), or a shape
            that does not fit the model's fixed dims.
    """
    specs = list(specs)
    names = {s.name for s in specs}
    missing = [s.name for s in specs if s.name not in feed]
    extra = sorted(set(feed) - names)
    if missing or extra:
        expected = ", ".join(f"'{n}'" for n in names)
        raise InputError(
            f"{origin}: missing input(s) {missing or 'none'}, unknown input(s) {extra or 'none'} "
            f"(the model takes {expected})."
        )
    conformed = {}
    for spec in specs:
        array = np.asarray(feed[spec.name])
        if array.dtype.kind != spec.dtype.kind and not (array.dtype.kind in "iu" and spec.dtype.kind in "iu"):
            raise InputError(f"{origin}: input '{spec.name}' is {array.dtype}, the model wants {spec.dtype}.")
        try:
            check_shape(spec, array.shape)
        except ProfileError as exc:
            raise InputError(f"{origin}: {exc}") from None
        conformed[spec.name] = np.ascontiguousarray(array.astype(spec.dtype, copy=False))
    return conformed
