"""Option groups shared by ``build``, ``bench``, ``parity`` and ``demo``: defined once, reused everywhere."""

from __future__ import annotations

import argparse
import re

from trtkit.builder.config import (
    CALIB_ALGORITHMS,
    CONSTRAINT_MODES,
    FP16_MODES,
    HISTOGRAM_DEVICES,
    INT8_MODES,
    BuildConfig,
    CalibrationSettings,
)
from trtkit.errors import TrtkitError

_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """``"4G"``, ``"512MiB"``, ``"1048576"`` → bytes."""
    m = _SIZE_RE.match(text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"'{text}' is not a size; use e.g. 4G, 512M or a number of bytes")
    unit = (m.group(2) or "").lower().rstrip("b").rstrip("i")
    return int(float(m.group(1)) * _UNITS[unit])


def add_shape_options(parser) -> None:
    g = parser.add_argument_group("shapes and profiles")
    g.add_argument("--shapes", "--profile", dest="shapes", action="append", default=[], metavar="SPEC",
                   help="one optimization profile: NAME:MIN,OPT,MAX per input, e.g. "
                        "images:1x3x640x640,8x3x640x640,32x3x640x640 (repeat for several profiles)")


def add_precision_options(parser) -> None:
    g = parser.add_argument_group("precision")
    p = g.add_mutually_exclusive_group()
    p.add_argument("--fp16", dest="precision", action="store_const", const="fp16", help="FP16 where faster")
    p.add_argument("--bf16", dest="precision", action="store_const", const="bf16", help="BF16 where faster")
    p.add_argument("--int8", dest="precision", action="store_const", const="int8",
                   help="INT8 (needs --calib or --calib-cache, or a Q/DQ model)")
    g.add_argument("--fp16-mode", choices=FP16_MODES, default="auto",
                   help="flag: builder flag (TensorRT < 11); cast: FP16 model, strongly typed; auto (default)")
    g.add_argument("--int8-mode", choices=INT8_MODES, default="auto",
                   help="calibrator (TensorRT < 11), qdq (explicit Q/DQ made by trtkit), auto (default)")
    g.add_argument("--no-tf32", dest="tf32", action="store_false", help="disallow TF32 for FP32 layers")
    g.add_argument("--strongly-typed", action="store_true", help="build a strongly typed network")
    g.add_argument("--require-precision", action="store_true",
                   help="fail if the engine does not mostly run in the requested precision")
    g.add_argument("--precision-constraints", choices=CONSTRAINT_MODES, default="none",
                   help="set convolution/matmul layers to the requested precision: prefer (TensorRT follows where "
                        "it can) or obey (the build fails where it cannot); default none: TensorRT keeps FP32 "
                        "wherever that is faster")
    g.add_argument("--qdq-quantize-heads", dest="qdq_keep_heads", action="store_false",
                   help="--int8-mode qdq: quantize the final layers (heads, classifier) too; by default they stay in "
                        "higher precision")
    g.add_argument("--qdq-exclude", metavar="NODES", default="",
                   help="--int8-mode qdq: comma-separated ONNX node names to keep in higher precision")
    g.add_argument("--save-qdq-onnx", metavar="PATH", help="save the Q/DQ model made for --int8-mode qdq")
    parser.set_defaults(precision="fp32")


def add_calibration_options(parser) -> None:
    g = parser.add_argument_group("INT8 calibration")
    g.add_argument("--calib", metavar="DIR", help="calibration data: an image folder or a folder of .npy/.npz")
    g.add_argument("--calib-cache", metavar="FILE", help="calibration cache to reuse or write (TensorRT format)")
    g.add_argument("--calib-algo", choices=CALIB_ALGORITHMS, default="entropy", help="default: entropy")
    g.add_argument("--calib-percentile", type=float, default=99.99, help="for --calib-algo percentile")
    g.add_argument("--calib-histograms", choices=HISTOGRAM_DEVICES, default="auto",
                   help="--int8-mode qdq: bin activations on the gpu (CUDA kernels) or the cpu (numpy); default: "
                        "auto (the GPU when its kernels load)")
    g.add_argument("--calib-max-samples", type=int, metavar="N", help="use at most N samples")
    g.add_argument("--calib-batch", type=int, metavar="N", help="calibration batch size")
    g.add_argument("--calib-cache-force", action="store_true",
                   help="reuse --calib-cache even if it was made for another model, TensorRT or data")
    g.add_argument("--calib-preprocess", metavar="SPEC",
                   help="image preprocessing, e.g. resize=letterbox,color=BGR,scale=0.0039216,"
                        "mean=0.485/0.456/0.406,std=0.229/0.224/0.225,layout=NCHW,size=640x640 "
                        "(default: stretch to the model's size, RGB, scale 1/255, NCHW)")


def add_build_options(parser) -> None:
    add_shape_options(parser)
    add_precision_options(parser)
    add_calibration_options(parser)
    g = parser.add_argument_group("builder")
    g.add_argument("--workspace", type=parse_size, metavar="SIZE", help="workspace memory limit, e.g. 4G")
    g.add_argument("--opt-level", type=int, choices=range(6), metavar="0-5", help="builder optimization level")
    g.add_argument("--tactic-sources", metavar="NAMES",
                   help="comma-separated tactic sources to enable (others off), e.g. "
                        "EDGE_MASK_CONVOLUTIONS,JIT_CONVOLUTIONS; default: TensorRT's")
    g.add_argument("--timing-cache", metavar="FILE", help="timing cache to load and save back")
    g.add_argument("--hardware-compatibility", metavar="LEVEL", help="e.g. AMPERE_PLUS")
    g.add_argument("--version-compatible", action="store_true", help="build a version-compatible plan")
    g.add_argument("--profiling-verbosity", choices=("DETAILED", "LAYER_NAMES_ONLY", "NONE"), default="DETAILED")
    g.add_argument("--no-isolate", dest="isolate", action="store_false",
                   help="parse and build in this process instead of a child process")


def config_from_args(args) -> BuildConfig:
    """A :class:`BuildConfig` from parsed build options."""
    from trtkit.builder.profiles import parse_shapes

    calibration = None
    if getattr(args, "calib", None) or getattr(args, "calib_cache", None):
        calibration = CalibrationSettings(
            source=args.calib, cache_path=args.calib_cache, algorithm=args.calib_algo,
            percentile=args.calib_percentile, max_samples=args.calib_max_samples, batch_size=args.calib_batch,
            force=args.calib_cache_force, preprocess=_preprocess(args), histograms=args.calib_histograms)
    tactics = None
    if getattr(args, "tactic_sources", None):
        tactics = tuple(s.strip() for s in args.tactic_sources.split(",") if s.strip())
        if not tactics:
            raise TrtkitError("--tactic-sources is empty; give names such as EDGE_MASK_CONVOLUTIONS,JIT_CONVOLUTIONS")
    return BuildConfig(
        precision=args.precision, fp16_mode=args.fp16_mode, int8_mode=args.int8_mode, calibration=calibration,
        profiles=[parse_shapes(s) for s in args.shapes], workspace_bytes=args.workspace,
        optimization_level=args.opt_level, tactic_sources=tactics, tf32=args.tf32,
        profiling_verbosity=args.profiling_verbosity, timing_cache=args.timing_cache,
        hardware_compatibility=args.hardware_compatibility, version_compatible=args.version_compatible,
        strongly_typed=args.strongly_typed, require_precision=args.require_precision,
        precision_constraints=args.precision_constraints, save_qdq_onnx=args.save_qdq_onnx,
        qdq_keep_heads=args.qdq_keep_heads,
        qdq_exclude=tuple(n.strip() for n in args.qdq_exclude.split(",") if n.strip()), **prepare_settings(args))


def _preprocess(args) -> dict:
    from calibrators.preprocess import parse_preprocess

    return parse_preprocess(getattr(args, "calib_preprocess", None))


def add_json_option(parser) -> None:
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON ('-' for stdout)")


def add_prepare_options(parser) -> None:
    """``--sanitize/--no-sanitize``, ``--fold-constants/--no-fold-constants``, ``--save-sanitized``, ``--no-check``."""
    group = parser.add_argument_group("before parsing (trtkit.prepare)")
    group.add_argument("--sanitize", action=argparse.BooleanOptionalAction, default=True,
                       help="apply trtkit's compatibility rewrites (dimension names, INT64 I/O, function ops, opset, "
                            "external data); each is named in the build summary and the manifest (default: on)")
    group.add_argument("--fold-constants", action=argparse.BooleanOptionalAction, default=True,
                       help="fold constant subgraphs (ConstantOfShape, static Shape chains...) into initializers "
                            "before TensorRT parses the model; used only when it changes something (default: on)")
    group.add_argument("--save-sanitized", metavar="PATH",
                       help="also write the prepared model here (written only when preparing changed something)")
    group.add_argument("--no-check", dest="check", action="store_false",
                       help="skip the op check (the build asks TensorRT's parser which ops it supports, and shows "
                            "the op table when parsing fails)")


def prepare_settings(args) -> dict:
    """The :class:`BuildConfig` fields the prepare options set."""
    return {"sanitize": getattr(args, "sanitize", True), "fold_constants": getattr(args, "fold_constants", True),
            "check": getattr(args, "check", True), "save_prepared": getattr(args, "save_sanitized", None)}

