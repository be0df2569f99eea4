"""``trtkit.prepare``: the ONNX half of a build, on a CPU and without TensorRT.

Load once -> compatibility rewrites (:mod:`trtkit.builder.rewrites`) -> constant folding
(:mod:`trtkit.builder.sanitize`) -> the rewrites that want folded constants (opset-17 attribute forms). Every entry
point that builds goes through it, so one ONNX model gives one engine whichever way it is built; ``trtkit sanitize``
shows and saves what it does.

A model with external data whose weights fit in one protobuf (under 2 GB with the graph) is read into memory and
prepared whole; a larger one keeps its weights outside (not folded): the rewrites touch only the graph, and TensorRT's
parser reads the original data files beside the original model's path. :meth:`PreparedModel.save` writes the
weights next to a copy saved elsewhere. Neither the model nor its data files are ever written.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from pathlib import Path

from trtkit.builder.rewrites import APPLIED, SKIPPED, ParserTarget, Rewrite, after_folding_steps, apply_rewrites
from trtkit.errors import ModelError
from trtkit.model import (
    PROTOBUF_LIMIT,
    LoadedModel,
    external_data_files,
    has_external_data,
    load_external_data,
    load_model,
    model_files,
)

_FOLD_WHY = "TensorRT's parser wants weights and static shapes as initializers, not computed at run time"


@dataclass
class PreparedModel:
    """An ONNX model ready for TensorRT's parser, and what was done to get there.

    Attributes:
        loaded: the prepared model (its ``path`` is the original's, where external data is found).
        rewrites: every :class:`~trtkit.builder.rewrites.Rewrite` applied, skipped or failed, in order.
        source_sha256: sha256 of the model as given.
        original_dtypes: ``{tensor: dtype}`` for graph inputs/outputs whose engine dtype differs from the model's
            (INT64 taken and returned as INT32, FLOAT64 as FLOAT32, UINT16 and the like as INT32); the runner
            converts back.
        target: the :class:`~trtkit.builder.rewrites.ParserTarget` prepared for.
        fold: the constant folding report, or ``None`` when folding was off or not possible.
        hazards: every :class:`~trtkit.builder.rewrites.semantics.Hazard`: a node the parser would import with
            other semantics than the model's, or one with a tensor type TensorRT lacks
            (:mod:`~trtkit.builder.rewrites.dtypes`); a build refuses them (:meth:`require_same_semantics`).
    """

    loaded: LoadedModel
    rewrites: list = field(default_factory=list)
    source_sha256: str = ""
    original_dtypes: dict = field(default_factory=dict)
    target: ParserTarget | None = None
    fold: object = None
    hazards: list = field(default_factory=list)

    @property
    def proto(self):
        return self.loaded.proto

    @property
    def sha256(self) -> str:
        """sha256 of the prepared model's bytes (the engine cache key's model part)."""
        return self.loaded.sha256

    @property
    def applied(self) -> list:
        return [r for r in self.rewrites if r.status == APPLIED]

    @property
    def changed(self) -> bool:
        return bool(self.applied)

    def summary(self) -> str:
        """One line for a build summary: how many rewrites of which kind, and what did not apply."""
        if not self.rewrites:
            return "none needed"
        counts: dict = {}
        for r in self.applied:
            counts[r.rewrite] = counts.get(r.rewrite, 0) + 1
        parts = [f"{name} ×{n}" for name, n in counts.items()]
        others = [r for r in self.rewrites if r.status != APPLIED]
        if others:
            parts.append(f"{len(others)} not applied ({', '.join(sorted({r.rewrite for r in others}))})")
        return ", ".join(parts) or "none applied"

    def to_json(self) -> dict:
        """For the manifest: the rewrites, the model's own I/O dtypes, the two sha256s."""
        return {
            "target": self.target.label if self.target else None,
            "source_sha256": self.source_sha256,
            "prepared_sha256": self.sha256,
            "original_dtypes": dict(self.original_dtypes),
            "rewrites": [r.to_json() for r in self.rewrites],
            "hazards": [h.to_json() for h in self.hazards],
        }

    def require_same_semantics(self) -> PreparedModel:
        """``self``, unless the parser would import some node with other semantics than the model's.

        Raises:
            ModelError: naming each such node, its op, what the parser would compute instead and what to change.
        """
        if not self.hazards:
            return self
        listed = "; ".join(str(h) for h in self.hazards[:4])
        more = f"; and {len(self.hazards) - 4} more" if len(self.hazards) > 4 else ""
        parser = self.target.label if self.target else "TensorRT"
        raise ModelError(
            f"{parser} cannot take {len(self.hazards)} node(s) of '{self.loaded.name}' as they are: {listed}{more}"
        )

    def save(self, path) -> Path:
        """Write the prepared model; one that came with external data gets its weights in ``<name>.data`` beside it.

        Raises:
            UsageError: ``path`` (or its ``.data``) is the model this was prepared from or one of its data files.
            ModelError: a data file is missing or truncated, or ``path`` cannot be written.
        """
        from trtkit._atomic import check_outputs
        from trtkit.builder.sanitize import save_model, saved_files

        files = model_files(self.loaded.path or self.loaded)  # the source's, whose weights may be in memory now
        check_outputs({"path": saved_files(path)}, files)
        source = self.loaded.path
        proto, owned = self.proto, has_external_data(self.proto)
        if owned:
            proto = copy.deepcopy(self.proto)
            folder = Path(source).parent if source is not None else Path(".")
            load_external_data(proto, folder, f"'{source or self.loaded.name}'")
        return save_model(proto, path, external=bool(files.get("model's external data")), owned=owned)


def prepare(
    model,
    *,
    target: ParserTarget | None = None,
    sanitize: bool = True,
    fold_constants: bool = True,
    trt=None,
    nms=None,
    input_uint8_nhwc: bool = False,
    on_progress=None,
) -> PreparedModel:
    """Prepare an ONNX model for TensorRT's parser: compatibility rewrites, then constant folding.

    Args:
        model: ONNX path, bytes, ``onnx.ModelProto``, :class:`~trtkit.model.LoadedModel` or an
            already :class:`PreparedModel` (returned as is).
        target: the parser to prepare for; default: the ``trt`` module given, else TensorRT 8.6's documented limits
            (the oldest trtkit supports, so the result suits every version).
        sanitize: run the compatibility rewrites (``--no-sanitize`` turns them off).
        fold_constants: fold constant subgraphs into initializers.
        trt: a ``tensorrt`` module (or the fake) to take the target from.
        nms: :class:`trtkit.detection.NmsOptions` to append TensorRT's ``EfficientNMS_TRT`` plugin to a YOLOv8-style
            head, last (after folding, which cannot evaluate a plugin op).
        input_uint8_nhwc: make the one image input ``(N, H, W, 3)`` uint8, cast, scaled by 1/255 and transposed to
            the model's ``(N, 3, H, W)`` float inside the graph (:mod:`trtkit.builder.image_input`).
        on_progress: called with one line of text as each step starts (the rewrites, each round of folding).

    Returns:
        A :class:`PreparedModel`; ``.rewrites`` names what was done, skipped and failed.

    Raises:
        ModelError: the model cannot be read (missing file, missing external data file, not ONNX), ``nms`` was
            asked for and its output is not a YOLOv8-style head, or ``input_uint8_nhwc`` was and the model has no
            single float (N, 3, H, W) input.
    """
    if isinstance(model, PreparedModel):
        return model
    from trtkit import _check

    if (
        not isinstance(model, (str, os.PathLike, bytes, bytearray, memoryview, LoadedModel))
        and type(model).__name__ != "ModelProto"
    ):
        _check.fail("model", model, "an ONNX path, the model's bytes, an onnx.ModelProto or a PreparedModel")
    _check.instance("target", target, ParserTarget, "a ParserTarget", optional=True)
    _check.boolean("sanitize", sanitize)
    _check.boolean("fold_constants", fold_constants)
    _check.boolean("input_uint8_nhwc", input_uint8_nhwc)
    _check.callable_("on_progress", on_progress)
    if nms is not None and type(nms).__name__ != "NmsOptions":
        _check.fail("nms", nms, "a trtkit.detection.NmsOptions or None")
    target = target or (ParserTarget.from_trt(trt) if trt is not None else ParserTarget.assumed())
    source = _read_weights(load_model(model, check=False, external_data=False))
    proto, rewrites = source.proto, []
    say = on_progress or (lambda text: None)
    if sanitize:
        say("compatibility rewrites")
        proto, rewrites = apply_rewrites(proto, target)
    external = has_external_data(proto)
    if external:
        size = f"{_external_bytes(source) / (1 << 30):.1f} GB of " if source.path else ""
        rewrites.append(
            Rewrite(
                "external-data",
                "model",
                f"kept {len(external_data_files(proto))} external data "
                f"file(s) beside '{source.name}'; TensorRT's parser reads them from there",
                f"its {size}weights and graph exceed the 2 GB one protobuf model can hold"
                if source.path
                else "the model was given without its path, so its data files cannot be read",
            )
        )
    fold = None
    if fold_constants and external:
        rewrites.append(
            Rewrite(
                "fold-constants",
                "model",
                "not folded: the weights stay in external data files",
                "folding works on one protobuf model holding every weight",
                SKIPPED,
            )
        )
    elif fold_constants:
        proto, fold, rewrites = _fold(proto, rewrites, say)
    if sanitize:  # after folding, which evaluates the opset's own forms and can make their inputs constants
        proto, late = apply_rewrites(proto, target, steps=after_folding_steps())
        rewrites = [*rewrites, *late]
    if nms is not None:
        proto, rewrites = _append_nms(proto, nms, rewrites)
    if input_uint8_nhwc:
        from trtkit.builder.image_input import add_uint8_nhwc_input

        proto, record = add_uint8_nhwc_input(proto)
        rewrites = [*rewrites, record]
    from trtkit.builder.rewrites import dtypes, semantics
    from trtkit.builder.rewrites.int64_io import original_dtypes

    loaded = source if proto is source.proto else LoadedModel(proto, proto.SerializeToString(), source.path)
    hazards = [*dtypes.find(proto, target), *semantics.find(proto, target)]
    return PreparedModel(loaded, rewrites, source.sha256, original_dtypes(rewrites), target, fold, hazards)


def _read_weights(source: LoadedModel) -> LoadedModel:
    """``source`` with its external weights read into a copy of its proto, when they fit in one protobuf."""
    if source.path is None or not has_external_data(source.proto):
        return source
    if _external_bytes(source) + source.proto.ByteSize() > PROTOBUF_LIMIT:
        return source
    proto = copy.deepcopy(source.proto)
    load_external_data(proto, source.path.parent, f"'{source.path}'")
    return LoadedModel(proto, None, source.path)


def _external_bytes(source: LoadedModel) -> int:
    """The sizes of ``source``'s external data files, beside its path."""
    return sum((Path(source.path or "").parent / name).stat().st_size for name in external_data_files(source.proto))


def _append_nms(proto, options, rewrites: list):
    from trtkit.detection.nms_plugin import OUTPUT_NAMES, add_nms

    head = proto.graph.output[0].name if proto.graph.output else "output"
    nmsed = add_nms(proto, options)
    what = (
        f"EfficientNMS_TRT appended (score > {options.score_threshold}, IoU {options.iou_threshold}, "
        f"{options.max_detections} per image); outputs {', '.join(OUTPUT_NAMES)}"
    )
    return nmsed, [*rewrites, Rewrite("add-nms", head, what, "asked for: the engine returns final detections")]


def _fold(proto, rewrites: list, on_progress):
    from trtkit.builder.sanitize import fold_constants
    from trtkit.errors import TrtkitError

    try:
        folded, fold = fold_constants(proto, on_progress=on_progress)
    except TrtkitError as exc:  # a failed fold is named and the model kept as it was
        return proto, None, [*rewrites, Rewrite("fold-constants", "model", "not folded", str(exc), "failed")]
    if fold.changed:
        rewrites = [
            *rewrites,
            Rewrite("fold-constants", "model", fold.summary().removeprefix("constant folding: "), _FOLD_WHY),
        ]
    return folded, fold, rewrites
