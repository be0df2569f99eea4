"""Optimization profiles: plain dataclasses, parsed from ``--shapes`` text, validated against the model's inputs.

A profile gives each dynamic input a (min, opt, max) shape. On the command line::

    --shapes images:1x3x640x640,8x3x640x640,32x3x640x640          min,opt,max
    --shapes images:8x3x640x640                                      one shape: min = opt = max
    --shapes images:1x3x640x640,32x3x640x640                         two shapes: min,max (opt = max)

Several inputs are separated by spaces or ``;`` inside one ``--shapes``; several ``--shapes`` make several profiles.
A model whose only dynamic axis is the batch can take its batch sizes alone: ``Profile(batch=(1, 8, 32))``
(``--batch 1,8,32``) sets the first axis of every input, the other axes coming from the model.

For an input that TensorRT treats as a *shape tensor* (an INT32/INT64 input of rank 0 or 1 whose values become a
shape: the ``shape`` of Expand/Reshape, the ``sizes`` of Resize...) the entry gives its min, opt and max *values*, as
trtexec does: ``--shapes shape:1x1x3,1x2x3,1x4x3`` for a 3-element shape input. Which inputs are shape tensors is
known only once TensorRT has parsed the model (:func:`resolve_profiles` takes their names).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from trtkit import _check
from trtkit.errors import ProfileError, ShapeSpecError
from trtkit.model import is_fixed

Shape = tuple[int, ...]

_DIM_RE = re.compile(r"^\d+(x\d+)*$")


@dataclass(frozen=True)
class InputShape:
    """The min, opt and max shape of one input in one profile."""

    min: Shape
    opt: Shape
    max: Shape

    def __post_init__(self):
        for name in ("min", "opt", "max"):
            value = getattr(self, name)
            if not isinstance(value, (tuple, list)) or not all(
                isinstance(d, int) and not isinstance(d, bool) for d in value
            ):
                _check.fail(name, value, "a shape: a tuple of ints, e.g. (1, 3, 224, 224)")
            object.__setattr__(self, name, tuple(value))

    def to_json(self) -> dict:
        return {"min": list(self.min), "opt": list(self.opt), "max": list(self.max)}


@dataclass(frozen=True)
class Profile:
    """One optimization profile: input name → :class:`InputShape`; ``batch``, where given, is the (min, opt, max)
    of the first axis of every input ``shapes`` does not name (their other axes are the model's, and must be fixed)."""

    shapes: dict = field(default_factory=dict)
    batch: tuple | None = None

    def __post_init__(self):
        accepted = "a dict of input name to InputShape (see parse_shapes)"
        if not isinstance(self.shapes, dict):
            _check.fail("shapes", self.shapes, accepted)
        for name, shape in self.shapes.items():
            if not isinstance(name, str) or not isinstance(shape, InputShape):
                _check.fail("shapes", self.shapes, accepted)
        b = self.batch
        if b is not None and not (
            isinstance(b, tuple) and len(b) == 3 and all(type(d) is int for d in b) and 1 <= b[0] <= b[1] <= b[2]
        ):
            accepted = "three sizes MIN <= OPT <= MAX of 1 or more, e.g. (1, 8, 32)"
            raise ShapeSpecError(f"batch must be {accepted}, not {b!r}", field="batch", accepted=accepted)

    def to_json(self) -> dict:
        data = {name: s.to_json() for name, s in self.shapes.items()}
        return {**data, "*": {"batch": list(self.batch)}} if self.batch else data

    @classmethod
    def from_json(cls, data: dict) -> "Profile":
        return cls({n: InputShape(tuple(s["min"]), tuple(s["opt"]), tuple(s["max"])) for n, s in data.items()})

    def to_trt(self, builder, shape_inputs=()):
        """A ``trt.IOptimizationProfile`` with these shapes, created from ``builder``; the entries of the inputs
        named in ``shape_inputs`` are shape-tensor values (``set_shape_input``)."""
        profile = builder.create_optimization_profile()
        for name, s in self.shapes.items():
            if name in shape_inputs:
                profile.set_shape_input(name, s.min, s.opt, s.max)
            else:
                profile.set_shape(name, s.min, s.opt, s.max)
        return profile


def _parse_dims(text: str, where: str) -> Shape:
    text = text.strip().lower()
    if not _DIM_RE.match(text):
        raise ShapeSpecError(f"{where}: '{text}' is not a shape; write dimensions joined by 'x', e.g. 1x3x224x224")
    return tuple(int(d) for d in text.split("x"))


def parse_input_shape(spec: str) -> tuple[str, InputShape]:
    """Parse ``name:min[,opt],max`` (or ``name:shape``) into ``(name, InputShape)``.

    Raises:
        ProfileError: the text is malformed, ranks differ, or min <= opt <= max does not hold.
    """
    name, sep, rest = spec.rpartition(":")
    if not sep or not name or not rest:
        raise ShapeSpecError(
            f"Shape spec '{spec}' must be NAME:MIN,OPT,MAX, e.g. images:1x3x640x640,8x3x640x640,32x3x640x640"
        )
    parts = [_parse_dims(p, f"Input '{name}'") for p in rest.split(",")]
    if len(parts) == 1:
        parts = parts * 3
    elif len(parts) == 2:
        parts = [parts[0], parts[1], parts[1]]
    elif len(parts) != 3:
        raise ShapeSpecError(f"Input '{name}': give 1, 2 or 3 shapes (min,opt,max), got {len(parts)}")
    shape = InputShape(*parts)
    validate_input_shape(name, shape)
    return name, shape


def validate_input_shape(name: str, shape: InputShape) -> None:
    """Check ranks agree and ``min <= opt <= max`` per dimension, and no dimension is below 1."""
    if not (len(shape.min) == len(shape.opt) == len(shape.max)):
        raise ShapeSpecError(
            f"Input '{name}': min {shape.min}, opt {shape.opt} and max {shape.max} must have the same rank"
        )
    if any(d < 1 for d in shape.min):
        raise ShapeSpecError(f"Input '{name}': min {shape.min} has a dimension below 1")
    for i, (lo, mid, hi) in enumerate(zip(shape.min, shape.opt, shape.max)):
        if not lo <= mid <= hi:
            raise ShapeSpecError(
                f"Input '{name}': dimension {i} needs min <= opt <= max, got {lo}, {mid}, {hi} "
                f"(min {shape.min}, opt {shape.opt}, max {shape.max})"
            )


def parse_shapes(text: str) -> Profile:
    """Parse one profile's text (inputs separated by spaces or ';') into a :class:`Profile`.

    Raises:
        ShapeSpecError: ``text`` is not a str, or is malformed (``field`` is ``shapes``).
    """
    _check.instance("text", text, str, "profile text such as 'images:1x3x224x224,8x3x224x224,32x3x224x224'")
    specs = [s for s in re.split(r"[;\s]+", re.sub(r"\s*([:,])\s*", r"\1", text.strip())) if s]
    if not specs:
        raise ShapeSpecError("shapes is empty; expected e.g. images:1x3x640x640,8x3x640x640,32x3x640x640")
    shapes = {}
    for spec in specs:
        name, shape = parse_input_shape(spec)
        if name in shapes:
            raise ShapeSpecError(f"Input '{name}' appears twice in one profile: '{text}'")
        shapes[name] = shape
    return Profile(shapes)


def _example_profile(inputs: dict, given: Profile | None = None, model_inputs: dict | None = None) -> str:
    """Profile text for ``inputs`` after the entries ``given`` has (one profile, one line): a dynamic axis takes the
    sizes ``given`` has for an axis of that name (TensorRT wants them equal), else 1, 8, 8."""
    pieces, named = [], {}
    for name, shape in (given.shapes if given else {}).items():
        pieces.append(_spec_text(name, shape))
        for i, d in enumerate((model_inputs or {}).get(name, ())[: len(shape.min)]):
            if isinstance(d, str):
                named[d] = (shape.min[i], shape.opt[i], shape.max[i])
    for name, dims in inputs.items():
        sizes = [(d, d, d) if is_fixed(d) else named.get(d, _sizes(d)) for d in dims]
        pieces.append(_spec_text(name, InputShape(*map(tuple, zip(*sizes)))))
    return "'" + " ".join(pieces) + "'"


def _spec_text(name: str, shape: InputShape) -> str:
    return f"{name}:" + ",".join("x".join(map(str, s)) for s in (shape.min, shape.opt, shape.max))


def _size(dim) -> int | None:
    """The size a dynamic dimension takes from the model's metadata (:class:`trtkit.model.SizedDim`), else None."""
    return getattr(dim, "size", None)


def _sizes(dim) -> tuple:
    """An example's (min, opt, max) of a dynamic dimension: its size from the metadata, else 1, 8, 8."""
    size = _size(dim)
    return (size, size, size) if size else (1, 8, 8)


def _batch_only(inputs: dict) -> bool:
    """Whether the first axis is the only dynamic axis without a size from the model's metadata, in every input in
    ``inputs`` (each one has one)."""
    return all(d and not is_fixed(d[0]) and all(is_fixed(x) or _size(x) for x in d[1:]) for d in inputs.values())


# the ONNX types of inputs TensorRT may parse as shape tensors (of rank 0 or 1)
_SHAPE_TENSOR_TYPES = (6, 7)  # onnx.TensorProto.INT32, INT64


def may_have_shape_inputs(proto) -> bool:
    """Whether an input of ``proto`` (an ``onnx.ModelProto``) could be a shape tensor: an INT32/INT64 input of rank 0
    or 1. Only TensorRT's parser says which are; profiles of such models are checked once it has parsed them."""
    initializers = {t.name for t in proto.graph.initializer}
    return any(
        v.name not in initializers
        and v.type.tensor_type.elem_type in _SHAPE_TENSOR_TYPES
        and len(v.type.tensor_type.shape.dim) <= 1
        for v in proto.graph.input
    )


def resolve_profiles(model_inputs: dict, profiles: list, shape_inputs=()) -> list:
    """Check ``profiles`` against the model's inputs and fill in static inputs.

    Args:
        model_inputs: input name → dims, each an int (fixed) or a str/None/-1 (dynamic), from the ONNX graph.
        profiles: the user's profiles (possibly empty).
        shape_inputs: the inputs TensorRT parsed as shape tensors: every profile must give their values (as many
            as the input has elements), and they count as dynamic even where their own dims are fixed.

    Returns:
        Complete profiles (every input present), or ``[]`` when the model is fully static and none were given.

    Raises:
        ProfileError: a profile names an unknown input, changes a fixed dimension, has the wrong rank, or the model
            has dynamic dimensions and no profile covers them (the message names the dims and shows an example flag),
            or a shape-tensor input has no values or the wrong number of them.
    """
    shape_inputs = {n: model_inputs[n] for n in shape_inputs if n in model_inputs}
    dynamic = {n: d for n, d in model_inputs.items() if n not in shape_inputs and any(not is_fixed(x) for x in d)}
    if not profiles:
        if shape_inputs:
            raise ProfileError(_no_values_message(None, shape_inputs), field="profiles")
        if dynamic:
            dims = "; ".join(f"'{n}' dims {[x if is_fixed(x) else (x or '?') for x in d]}" for n, d in dynamic.items())
            message = f"The model has dynamic dimensions ({dims}) and no optimization profile was given"
            if _batch_only(dynamic):
                sized = any(_size(x) for d in dynamic.values() for x in d)
                which = (
                    "Its height and width take its imgsz metadata" if sized else "Its only dynamic axis is the first"
                )
                raise ProfileError(
                    f"{message}. {which}: give the sizes of the first axis, e.g. batch 1,8,8 "
                    f"(MIN,OPT,MAX), or a profile with every input, e.g. {_example_profile(dynamic)}",
                    field="batch",
                )
            raise ProfileError(f"{message}. Give one, e.g. {_example_profile(dynamic)}", field="profiles")
        return []
    return [_complete_profile(i, p, model_inputs, dynamic, shape_inputs) for i, p in enumerate(profiles)]


def _example_values(name: str, dims) -> str:
    count = _element_count(dims)
    lo = "x".join(["1"] * count) if count else "1"
    hi = "x".join(["8"] * count) if count else "8"
    return f"{name}:{lo},{hi},{hi}"


def _element_count(dims) -> int:
    count = 1
    for d in dims:
        count *= d if is_fixed(d) else 0
    return count


def _no_values_message(index: int | None, shape_inputs: dict) -> str:
    names = ", ".join(f"'{n}' (dims {list(d)})" for n, d in shape_inputs.items())
    where = "no optimization profile was given" if index is None else f"profile {index} gives none"
    example = " ".join(_example_values(n, d) for n, d in shape_inputs.items())
    return (
        f"TensorRT parsed input(s) {names} as shape tensors: their values become shapes, so a profile must give "
        f"their min, opt and max values, and {where}. Add for example '{example}' to the profile "
        f"(one value per element, joined by 'x')"
    )


def _check_values(index: int, name: str, values: InputShape, dims) -> None:
    count = _element_count(dims)
    if len(dims) > 1 or not is_fixed(dims[0] if dims else 1):
        raise ProfileError(
            f"Profile {index}, input '{name}': a shape tensor needs a fixed rank-0 or rank-1 shape, the model "
            f"gives dims {list(dims)}"
        )
    for which in ("min", "opt", "max"):
        if len(getattr(values, which)) != count:
            raise ProfileError(
                f"Profile {index}, shape-tensor input '{name}': {which} values {getattr(values, which)} has "
                f"{len(getattr(values, which))} value(s), the input holds {count} (dims {list(dims)}); give e.g. "
                f"{_example_values(name, dims)}"
            )
    for i, (lo, mid, hi) in enumerate(zip(values.min, values.opt, values.max)):
        if not lo <= mid <= hi:
            raise ProfileError(
                f"Profile {index}, shape-tensor input '{name}': value {i} needs min <= opt <= max, got {lo}, "
                f"{mid}, {hi}"
            )


def _complete_profile(
    index: int, profile: Profile, model_inputs: dict, dynamic: dict, shape_inputs: dict | None = None
) -> Profile:
    shape_inputs = shape_inputs or {}
    unknown = sorted(set(profile.shapes) - set(model_inputs))
    if unknown:
        raise ProfileError(
            f"Profile {index} names input(s) {unknown} that the model does not have; its inputs are "
            f"{sorted(model_inputs)}"
        )
    missing = {m: dynamic[m] for m in sorted(set(dynamic) - set(profile.shapes))}
    if profile.batch:
        profile = Profile({**profile.shapes, **_batch_shapes(index, profile.batch, missing)})
    elif missing:
        raise ProfileError(
            f"Profile {index} gives no shapes for dynamic input(s) {sorted(missing)}; one profile gives every "
            f"dynamic input, separated by a space: e.g. {_example_profile(missing, profile, model_inputs)}",
            field="profiles",
        )
    missing_values = {n: d for n, d in shape_inputs.items() if n not in profile.shapes}
    if missing_values:
        raise ProfileError(_no_values_message(index, missing_values), field="profiles")
    shapes = {}
    for name, dims in model_inputs.items():
        if name in shape_inputs:
            _check_values(index, name, profile.shapes[name], dims)
            shapes[name] = profile.shapes[name]
            continue
        shape = profile.shapes.get(name)
        if shape is None:
            fixed = tuple(dims)
            shape = InputShape(fixed, fixed, fixed)
        _check_against_model(index, name, shape, dims)
        shapes[name] = shape
    return Profile(shapes)


def _batch_shapes(index: int, batch: tuple, inputs: dict) -> dict:
    """{input: InputShape} with ``batch`` as the first axis of each of ``inputs`` and their other (fixed) axes."""
    if not inputs:
        raise ProfileError(
            f"Profile {index}: batch sets the first axis of dynamic inputs, and the model has none left to set",
            field="batch",
        )
    shapes = {}
    for name, dims in inputs.items():
        axis = next((i for i, d in enumerate(dims) if i > 0 and not (is_fixed(d) or _size(d))), None)
        if axis is not None:
            raise ProfileError(
                f"Profile {index}: batch sets the first axis only, and input '{name}' (dims {list(dims)}) has "
                f"dynamic axis {axis}; give its shapes in full, e.g. {_example_profile({name: dims})}",
                field="batch",
            )
        rest = [_size(d) or d for d in dims[1:]]
        shapes[name] = InputShape(*((b, *rest) for b in batch))
    return shapes


def _check_against_model(index: int, name: str, shape: InputShape, dims) -> None:
    if len(shape.min) != len(dims):
        raise ProfileError(
            f"Profile {index}, input '{name}': shape has rank {len(shape.min)} but the model's input has rank "
            f"{len(dims)} (dims {list(dims)})"
        )
    for i, d in enumerate(dims):
        if is_fixed(d) and not (shape.min[i] == shape.opt[i] == shape.max[i] == d):
            raise ProfileError(
                f"Profile {index}, input '{name}': dimension {i} is fixed to {d} in the model, but the profile "
                f"gives min {shape.min[i]}, opt {shape.opt[i]}, max {shape.max[i]}"
            )
