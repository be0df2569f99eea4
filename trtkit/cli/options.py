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
    if text.strip().startswith("-"):
        raise argparse.ArgumentTypeError(f"'{text}' is negative; give a size above 0, e.g. 4G or 512M")
    m = _SIZE_RE.match(text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"'{text}' is not a size; use e.g. 4G, 512M or a number of bytes")
    unit = (m.group(2) or "").lower().rstrip("b").rstrip("i")
    return int(float(m.group(1)) * _UNITS[unit])


_PROFILE_HELP = (
    "one optimization profile: NAME:MIN,OPT,MAX for each input, inputs separated by a space or ';' "
    "(e.g. 'images:1x3x640x640,8x3x640x640,32x3x640x640 mask:1x640x640,8x640x640,32x640x640'); "
    "NAME:MIN,MAX sets OPT to MAX, NAME:SHAPE fixes the input; repeat --shapes for more profiles"
)
RUN_SHAPES_HELP = (
    "the input shapes to run: NAME:SHAPE for each input, separated by a space or ';', e.g. images:8x3x640x640 "
    "(a NAME:MIN,OPT,MAX spec runs OPT); default: each input's opt shape in the profile"
)


def add_profile_index_option(parser) -> None:
    """``--profile-index K``: the optimization profile to run."""
    parser.add_argument(
        "--profile-index", type=int, default=0, metavar="K", help="optimization profile to run (default 0)"
    )


def add_cuda_graph_option(parser) -> None:
    """``--cuda-graph/--no-cuda-graph``: replay the engine from CUDA graphs (on by default, as in ``TrtRunner``)."""
    parser.add_argument(
        "--cuda-graph",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="replay the engine from a CUDA graph captured for each input shape (default: on)",
    )


def add_shape_options(parser, help: str = _PROFILE_HELP, batch: bool = False) -> None:
    g = parser.add_argument_group("shapes and profiles")
    g.add_argument("--shapes", action="append", default=[], metavar="SPEC", help=help)
    if batch:
        g.add_argument(
            "--batch",
            dest="profile_batch",
            type=batch_range,
            metavar="MIN,OPT,MAX",
            help="the profile of a model whose only dynamic axis is the batch: the first axis of every input, the "
            "other axes from the model (instead of --shapes), e.g. 1,8,32",
        )


def batch_range(text: str) -> tuple:
    """argparse type: ``1,8,32`` -> ``(1, 8, 32)``; one size fixes the batch, two are MIN,MAX (opt = max)."""
    from trtkit.builder.profiles import Profile

    try:
        sizes = [int(s) for s in text.split(",")]
        batch = tuple({1: sizes * 3, 2: sizes + sizes[1:], 3: sizes}[len(sizes)])
        Profile(batch=batch)
    except (ValueError, KeyError, TrtkitError):
        raise argparse.ArgumentTypeError(f"'{text}': give MIN,OPT,MAX batch sizes of 1 or more, in order") from None
    return batch


def add_precision_options(parser, flags: bool = True) -> None:
    """The precision group; ``flags=False`` leaves out ``--fp16/--bf16/--int8`` and ``--save-qdq-onnx`` (for commands
    that build several precisions)."""
    g = parser.add_argument_group("precision")
    if flags:
        p = g.add_mutually_exclusive_group()
        p.add_argument("--fp16", dest="precision", action="store_const", const="fp16", help="FP16 where faster")
        p.add_argument("--bf16", dest="precision", action="store_const", const="bf16", help="BF16 where faster")
        p.add_argument(
            "--int8",
            dest="precision",
            action="store_const",
            const="int8",
            help="INT8 (needs --calib or --calib-cache, or a Q/DQ model)",
        )
    g.add_argument(
        "--fp16-mode",
        choices=FP16_MODES,
        default="auto",
        help="flag: builder flag (TensorRT < 11); cast: FP16 model, strongly typed; auto (default)",
    )
    g.add_argument(
        "--int8-mode",
        choices=INT8_MODES,
        default="auto",
        help="calibrator (TensorRT < 11), qdq (explicit Q/DQ made by trtkit), auto (default)",
    )
    g.add_argument("--no-tf32", dest="tf32", action="store_false", help="disallow TF32 for FP32 layers")
    g.add_argument("--strongly-typed", action="store_true", help="build a strongly typed network")
    g.add_argument(
        "--require-precision",
        action="store_true",
        help="fail if the engine does not mostly run in the requested precision",
    )
    g.add_argument(
        "--precision-constraints",
        choices=CONSTRAINT_MODES,
        default="none",
        help="set convolution/matmul layers to the requested precision: prefer (TensorRT follows where "
        "it can) or obey (the build fails where it cannot); default none: TensorRT keeps FP32 "
        "wherever that is faster",
    )
    g.add_argument(
        "--qdq-quantize-heads",
        dest="qdq_keep_heads",
        action="store_false",
        help="--int8-mode qdq: quantize the final layers (heads, classifier) too; by default they stay in "
        "higher precision",
    )
    g.add_argument(
        "--qdq-residual-activations",
        dest="qdq_residual_activations",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="--int8-mode qdq: also quantize both inputs of residual adds fed by a convolution through its "
        "activation (SiLU, ReLU; the add then runs in INT8); on by default",
    )
    g.add_argument(
        "--qdq-concat-shared-scale",
        dest="qdq_concat_shared_scale",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="--int8-mode qdq: quantize Concat inputs with one scale shared with the Concat's output; on by default",
    )
    g.add_argument(
        "--qdq-exclude",
        metavar="NODES",
        default="",
        help="--int8-mode qdq: comma-separated ONNX node names to keep in higher precision",
    )
    if flags:
        g.add_argument("--save-qdq-onnx", metavar="PATH", help="save the Q/DQ model made for --int8-mode qdq")
    parser.set_defaults(precision="fp32", save_qdq_onnx=None)


def add_calibration_options(parser) -> None:
    g = parser.add_argument_group("INT8 calibration")
    g.add_argument("--calib", metavar="DIR", help="calibration data: an image folder or a folder of .npy/.npz")
    g.add_argument("--calib-cache", metavar="FILE", help="calibration cache to reuse or write (TensorRT format)")
    g.add_argument(
        "--calib-algo",
        choices=CALIB_ALGORITHMS,
        default=None,
        help="default: entropy with TensorRT's calibrator, mse for the Q/DQ model trtkit makes (mse: Q/DQ only)",
    )
    g.add_argument(
        "--calib-histograms",
        choices=HISTOGRAM_DEVICES,
        default="auto",
        help="--int8-mode qdq: bin activations on the gpu (CUDA kernels) or the cpu (numpy); default: "
        "auto (the GPU when its kernels load)",
    )
    g.add_argument("--calib-max-samples", type=positive_int, metavar="N", help="use at most N samples")
    g.add_argument(
        "--calib-batch",
        type=positive_int,
        metavar="N",
        help="calibration batch size (default: the opt batch of profile 0)",
    )
    g.add_argument(
        "--calib-cache-force",
        action="store_true",
        help="reuse --calib-cache even if it was made for another model, TensorRT or data",
    )
    g.add_argument(
        "--calib-preprocess",
        metavar="SPEC",
        help="image preprocessing, e.g. resize=letterbox,color=BGR,scale=0.0039216,"
        "mean=0.485/0.456/0.406,std=0.229/0.224/0.225,layout=NCHW,size=640x640 "
        "(default: stretch to the model's size, RGB, scale 1/255, NCHW)",
    )


def add_build_options(
    parser, shapes_help: str = _PROFILE_HELP, batch: bool = False, *, shapes: bool = True, precision_flags: bool = True
) -> None:
    """Shapes (unless ``shapes=False``), precision, calibration and builder options."""
    if shapes:
        add_shape_options(parser, shapes_help, batch)
    else:
        parser.set_defaults(shapes=[])
    add_precision_options(parser, precision_flags)
    add_calibration_options(parser)
    g = parser.add_argument_group("builder")
    g.add_argument("--workspace", type=parse_size, metavar="SIZE", help="workspace memory limit, e.g. 4G")
    g.add_argument("--opt-level", type=int, choices=range(6), metavar="0-5", help="builder optimization level")
    g.add_argument(
        "--tactic-sources",
        metavar="NAMES",
        help="comma-separated tactic sources to enable (others off), e.g. "
        "EDGE_MASK_CONVOLUTIONS,JIT_CONVOLUTIONS; default: TensorRT's",
    )
    cache = g.add_mutually_exclusive_group()
    cache.add_argument(
        "--timing-cache",
        metavar="FILE",
        help="timing cache file to load and merge this build's timings into (default: one per GPU and TensorRT "
        "version in timing/ under $TRTKIT_CACHE_DIR, else $XDG_CACHE_HOME/trtkit or ~/.cache/trtkit; a FILE that "
        "does not load or was written for another GPU or TensorRT is an error)",
    )
    cache.add_argument(
        "--no-timing-cache",
        dest="use_timing_cache",
        action="store_false",
        help="build without a timing cache file (none is read or written)",
    )
    g.add_argument(
        "--timing-cache-reset",
        action="store_true",
        help="replace a --timing-cache FILE that does not load or was written for another GPU or TensorRT with a "
        "new cache (warns)",
    )
    g.add_argument("--hardware-compatibility", metavar="LEVEL", help="e.g. AMPERE_PLUS")
    g.add_argument("--version-compatible", action="store_true", help="build a version-compatible plan")
    g.add_argument(
        "--profiling-verbosity",
        choices=("DETAILED", "LAYER_NAMES_ONLY", "NONE"),
        default="DETAILED",
        help="layer detail kept in the engine: DETAILED (default; needed by `trtkit inspect --layers` "
        "and the precision report), LAYER_NAMES_ONLY or NONE",
    )
    g.add_argument(
        "--no-isolate",
        dest="isolate",
        action="store_false",
        help="parse and build in this process instead of a child process",
    )


def add_triton_model_options(group, *, serving: bool = False) -> None:
    """The dynamic batcher's and the TensorRT backend's options of ``trtkit export triton`` and ``trtkit serve``."""
    group.add_argument(
        "--max-queue-delay-us",
        type=int,
        default=100,
        metavar="US",
        help="the dynamic batcher's longest wait for a fuller batch (default 100)",
    )
    group.add_argument(
        "--preferred-batch",
        type=batch_sizes,
        metavar="LIST",
        help="batch sizes the dynamic batcher sends as soon as it has them queued, e.g. 16,32 or 8-32 (every size "
        "from 8); with fewer queued than the smallest it waits up to --max-queue-delay-us (default: the profile's "
        "opt and largest batch)",
    )
    only = "with --backend tensorrt: " if serving else ""
    group.add_argument(
        "--graph-batches",
        choices=("every", "triton"),
        default="every",
        help=f"{only}capture a CUDA graph for every batch size up to the largest (default), or leave it to Triton's "
        "TensorRT backend (batch 1, the preferred sizes and the largest; other sizes run without one)",
    )
    blocking = ", blocking (each instance on a thread of its own)" if serving else ""
    group.add_argument(
        "--tensorrt-options",
        metavar="LIST",
        default="",
        help=f"{only}the TensorRT backend's latency options to turn on, comma-separated: busy_wait_events (spin on "
        "CUDA events), eager_batching (the next batch's inputs copied while one computes), gather_kernel (a "
        f"batch's inputs gathered by one kernel){blocking}; none by default",
    )


def add_plugin_option(parser) -> None:
    """``--plugin-lib PATH`` (repeatable): plugin libraries to load, as trtexec's ``--staticPlugins``."""
    parser.add_argument(
        "--plugin-lib",
        dest="plugin_lib",
        action="append",
        default=[],
        metavar="PATH",
        help="plugin library (.so) to load before parsing or loading an engine, for models with custom ops "
        "(repeatable)",
    )


def load_plugin_libs(args) -> None:
    """Load ``--plugin-lib`` libraries into this process, for the engine it runs (whichever way it runs it)."""
    if getattr(args, "plugin_lib", None):
        from trtkit.runtime.engine import load_plugin_libraries

        load_plugin_libraries(args.plugin_lib)


# a negative size or number after an option is its value, not another option (argparse: "expected one argument")
NEGATIVE_VALUE = re.compile(r"^-\d+(\.\d*)?([kmgt]?i?b?)?$|^-\.\d+$", re.IGNORECASE)


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def batch_sizes(text: str) -> tuple:
    """argparse type: batch sizes as ``8,16,32`` or ranges ``8-32`` (every size from 8 to 32), mixed freely."""
    sizes: set = set()
    for part in (p.strip() for p in text.split(",")):
        low, dash, high = part.partition("-")
        try:
            first, last = int(low), int(high if dash else low)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"'{part or text}' is not a batch size or a range of them; give e.g. 8,16,32 or 8-32"
            ) from None
        if first < 1 or last < first:
            raise argparse.ArgumentTypeError(f"'{part}': give sizes of 1 or more, a range low to high (e.g. 8-32)")
        sizes.update(range(first, last + 1))
    return tuple(sorted(sizes))


# calibration options (dest -> default) that only matter with --calib or --calib-cache
_CALIB_DEFAULTS = {
    "calib_algo": None,
    "calib_histograms": "auto",
    "calib_max_samples": None,
    "calib_batch": None,
    "calib_cache_force": False,
    "calib_preprocess": None,
}


def changed_build_options(args, keep=("shapes",)) -> list:
    """The build options (flags) given a value other than their default, ``keep`` aside."""
    parser = argparse.ArgumentParser(add_help=False)
    add_build_options(parser)
    defaults = vars(parser.parse_args([]))
    flags = {a.dest: a.option_strings[0] for a in parser._actions if a.option_strings}
    flags["precision"] = f"--{getattr(args, 'precision', 'fp32')}"
    return [
        flags.get(dest, dest)
        for dest, value in defaults.items()
        if dest not in keep and getattr(args, dest, value) != value
    ]


def check_option_use(args) -> None:
    """Refuse options that would do nothing with the others given (a usage error, exit 2)."""
    from trtkit.errors import UsageError

    precision = getattr(args, "precision", "fp32")
    given_calibration = getattr(args, "calib", None) or getattr(args, "calib_cache", None)
    unused = [
        f"--{dest.replace('_', '-')}"
        for dest, default in _CALIB_DEFAULTS.items()
        if getattr(args, dest, default) != default and not given_calibration
    ]
    if unused:
        verb = "configures" if len(unused) == 1 else "configure"
        raise UsageError(
            f"{', '.join(unused)} {verb} INT8 calibration, which needs --int8 with --calib DIR or --calib-cache FILE",
            field=None,
        )
    int8_only = [
        flag
        for flag, used in (
            ("--int8-mode", getattr(args, "int8_mode", "auto") != "auto"),
            ("--qdq-exclude", bool(getattr(args, "qdq_exclude", ""))),
            ("--qdq-quantize-heads", getattr(args, "qdq_keep_heads", True) is False),
            *_placement_given(args),
        )
        if used
    ]
    if int8_only and precision != "int8":
        verb = "applies" if len(int8_only) == 1 else "apply"
        raise UsageError(f"{', '.join(int8_only)} {verb} only to --int8, and the precision is {precision}")
    given = [flag for flag, used in _placement_given(args) if used]
    if given and getattr(args, "int8_mode", "auto") == "calibrator":
        raise UsageError(
            f"{', '.join(given)} place(s) Q/DQ nodes, which --int8-mode calibrator does not make (TensorRT's "
            "calibrator chooses the INT8 layers); use --int8-mode qdq, or drop them"
        )
    if getattr(args, "fp16_mode", "auto") != "auto" and precision not in ("fp16", "int8"):
        raise UsageError(f"--fp16-mode applies only to --fp16 (or --int8), and the precision is {precision}")


def _placement_given(args) -> tuple:
    """``(--flag or --no-flag, given)`` for the Q/DQ placement switches that default to on (None: not given)."""
    found = []
    for dest in ("qdq_residual_activations", "qdq_concat_shared_scale"):
        value = getattr(args, dest, None)
        flag = "--" + dest.replace("_", "-")
        found.append((flag if value is not False else flag.replace("--", "--no-", 1), value is not None))
    return tuple(found)


def config_from_args(args) -> BuildConfig:
    """A :class:`BuildConfig` from parsed build options.

    Raises:
        UsageError: an option that would do nothing with the others given, or a value of the wrong range.
    """
    check_option_use(args)

    calibration = None
    if getattr(args, "calib", None) or getattr(args, "calib_cache", None):
        calibration = CalibrationSettings(
            source=args.calib,
            cache_path=args.calib_cache,
            algorithm=args.calib_algo,
            max_samples=args.calib_max_samples,
            batch_size=args.calib_batch,
            force=args.calib_cache_force,
            preprocess=_preprocess(args),
            histograms=args.calib_histograms,
        )
    tactics = None
    if getattr(args, "tactic_sources", None):
        tactics = tuple(s.strip() for s in args.tactic_sources.split(",") if s.strip())
        if not tactics:
            raise TrtkitError("--tactic-sources is empty; give names such as EDGE_MASK_CONVOLUTIONS,JIT_CONVOLUTIONS")
    return BuildConfig(
        precision=args.precision,
        fp16_mode=args.fp16_mode,
        int8_mode=args.int8_mode,
        calibration=calibration,
        profiles=_profiles(args),
        workspace_bytes=args.workspace,
        optimization_level=args.opt_level,
        tactic_sources=tactics,
        tf32=args.tf32,
        profiling_verbosity=args.profiling_verbosity,
        timing_cache=args.timing_cache,
        timing_cache_reset=args.timing_cache_reset,
        use_timing_cache=args.use_timing_cache,
        plugins=tuple(getattr(args, "plugin_lib", ())),
        hardware_compatibility=args.hardware_compatibility,
        version_compatible=args.version_compatible,
        strongly_typed=args.strongly_typed,
        require_precision=args.require_precision,
        precision_constraints=args.precision_constraints,
        save_qdq_onnx=args.save_qdq_onnx,
        qdq_keep_heads=args.qdq_keep_heads,
        **{
            dest: value
            for dest in ("qdq_residual_activations", "qdq_concat_shared_scale")
            if (value := getattr(args, dest, None)) is not None
        },
        qdq_exclude=tuple(n.strip() for n in args.qdq_exclude.split(",") if n.strip()),
        **prepare_settings(args),
    )


def _profiles(args) -> list:
    from trtkit.builder.profiles import Profile, parse_shapes
    from trtkit.errors import UsageError

    batch = getattr(args, "profile_batch", None)
    if batch and args.shapes:
        raise UsageError("--batch makes the whole profile from the batch sizes: give --batch or --shapes, not both")
    return [Profile(batch=batch)] if batch else [parse_shapes(s) for s in args.shapes]


def refuse_unused(args, needs: str, flags) -> None:
    """Refuse ``flags`` (options whose value is None when not given) given without ``needs``: a usage error."""
    from trtkit.errors import UsageError

    given = [flag for flag in flags if getattr(args, flag.lstrip("-").replace("-", "_")) is not None]
    if given:
        raise UsageError(f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} only with {needs}")


def _preprocess(args) -> dict:
    from calibrators.preprocess import parse_preprocess

    return parse_preprocess(getattr(args, "calib_preprocess", None))


# library argument (an error's ``field``) -> the flag that sets it, for error messages
FLAGS = {
    "model": "MODEL",
    "engine": "ENGINE",
    "output": "--output",
    "manifest": "--output (its manifest)",
    "json": "--json",
    "save_sanitized": "--save-sanitized",
    "save_prepared": "--save-sanitized",
    "save_qdq_onnx": "--save-qdq-onnx",
    "save_outputs": "--save-outputs",
    "save_arrays": "--save-arrays",
    "timing_cache": "--timing-cache",
    "timing_cache_reset": "--timing-cache-reset",
    "use_timing_cache": "--no-timing-cache",
    "plugins": "--plugin-lib",
    "workspace_bytes": "--workspace",
    "optimization_level": "--opt-level",
    "tactic_sources": "--tactic-sources",
    "precision": "--fp16/--bf16/--int8",
    "fp16_mode": "--fp16-mode",
    "int8_mode": "--int8-mode",
    "profiling_verbosity": "--profiling-verbosity",
    "precision_constraints": "--precision-constraints",
    "hardware_compatibility": "--hardware-compatibility",
    "profiles": "--shapes",
    "shapes": "--shapes",
    "qdq_exclude": "--qdq-exclude",
    "calibration": "--calib/--calib-cache",
    "calibration.source": "--calib",
    "calibration.cache_path": "--calib-cache",
    "calibration.algorithm": "--calib-algo",
    "calibration.max_samples": "--calib-max-samples",
    "calibration.batch_size": "--calib-batch",
    "calibration.preprocess": "--calib-preprocess",
    "calibration.histograms": "--calib-histograms",
    "calibration.force": "--calib-cache-force",
    "profile": "--profile-index",
    "profile_index": "--profile-index",
    "streams": "--streams",
    "iterations": "--iterations",
    "warmup_ms": "--warmup-ms",
    "duration_s": "--duration-s",
    "trials": "--trials",
    "value_range": "--value-range",
    "inputs": "--inputs",
    "cuda_graph": "--cuda-graph",
    "metric_threshold": "--metric-threshold",
    "allow_mismatch": "--ignore-manifest",
    "on_log": "--verbose",
    "require_precision": "--require-precision",
    "strongly_typed": "--strongly-typed",
    "fold_constants": "--fold-constants",
    "force": "--force",
    "strict": "--strict",
    "atol": "--atol",
    "rtol": "--rtol",
    "min_cosine": "--min-cosine",
    "min_top1": "--min-top1",
    "output_dir": "--output-dir",
    "workspace": "--workspace",
    "verbose": "--verbose",
    # bench --server, serve and export
    "concurrency": "--concurrency",
    "batch": "--batch",
    "warmup_s": "--warmup-ms",
    "instances": "--instances",
    "max_batch": "--max-batch",
    "triton_backends": "--triton-backends",
    "graph_batches": "--graph-batches",
    "tensorrt_options": "--tensorrt-options",
    "grpc_allocation_pool": "--grpc-allocation-pool",
    "backend": "--backend",
    "max_queue_delay_us": "--max-queue-delay-us",
    "add_nms": "--add-nms",
    "head": "--head",
    "class_names": "--names",
    "score_threshold": "--nms-score",
    "iou_threshold": "--nms-iou",
    "max_detections": "--nms-max-det",
    "input_uint8_nhwc": "--input-uint8-nhwc",
    "preprocess": "--preprocess",
    "reference": "--reference",
    "gpus": "--gpus",
    "http_port": "--http-port",
    "grpc_port": "--grpc-port",
    "metrics_port": "--metrics-port",
    "shared_memory": "--shared-memory",
    "streaming": "--streaming",
    # compare
    "precisions": "--precisions",
    "batches": "--batches",
    "baseline": "--baseline",
    "rounds": "--rounds",
    "markdown": "--markdown",
    "plot": "--plot",
    "eval.images": "--images",
    "eval.coco": "--coco",
    "eval.batch": "--eval-batch",
    "eval.max_drop": "--max-drop",
}


def flag_message(exc) -> str:
    """The error's message on the command line: its ``field`` (a library argument), where the message names it, is
    written as the flag that sets it; where it does not, the flag leads the message."""
    text, field = str(exc), getattr(exc, "field", None)
    if not isinstance(field, str) or field not in FLAGS:
        return text
    flag = FLAGS[field]
    pattern = re.compile(rf"(?<![\w.'/-]){re.escape(field)}(?![\w'/])")
    if pattern.search(text):
        return pattern.sub(flag, text)
    return text if flag in text else f"{flag}: {text}"


def check_files(args, outputs: dict, inputs: dict) -> None:
    """Every file the command writes (``--json`` included) checked before any work against every file it reads, an
    ``.onnx`` input's external data files included: see :func:`trtkit._atomic.check_outputs`."""
    from trtkit._atomic import check_outputs
    from trtkit.model import model_files

    json_path = getattr(args, "json", None)
    models = [(f, p) for f, p in inputs.items() if isinstance(p, str) and p.lower().endswith(".onnx")]
    for field, path in models:
        inputs = {**inputs, **model_files(path, field)}
    check_outputs({**outputs, "json": None if json_path == "-" else json_path}, inputs)


def add_cache_dir_option(parser) -> None:
    """``--cache-dir DIR``: the engine cache of engines built from ONNX (:mod:`trtkit.builder.cache`)."""
    parser.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="where engines built from ONNX are cached (default: engines/ under $TRTKIT_CACHE_DIR, else "
        "$XDG_CACHE_HOME/trtkit or ~/.cache/trtkit)",
    )


def add_ignore_manifest_option(parser) -> None:
    parser.add_argument(
        "--ignore-manifest", action="store_true", help="load an engine whose manifest names another TensorRT or GPU"
    )


def add_head_option(parser) -> None:
    from trtkit.detection.heads import LAYOUTS

    parser.add_argument(
        "--head",
        metavar="NAME",
        help=f"the detector's output layout, where its outputs fit several: {', '.join(LAYOUTS)} (default: the one "
        "they fit)",
    )


def add_normalize_option(parser) -> None:
    parser.add_argument(
        "--normalize",
        metavar="NAME|SPEC",
        help="mean/std after the 1/255 scale: none (YOLO, RT-DETR), imagenet (RF-DETR, DETR, Lightning Pose, "
        "torchvision models) or mean=a/b/c,std=a/b/c as --calib-preprocess spells it (default none)",
    )


def add_json_option(parser) -> None:
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON ('-' for stdout)")


def add_prepare_options(parser) -> None:
    """``--sanitize/--no-sanitize``, ``--fold-constants/--no-fold-constants``, ``--save-sanitized``,
    ``--input-uint8-nhwc``, ``--no-check``."""
    group = parser.add_argument_group("before parsing (trtkit.prepare)")
    group.add_argument(
        "--sanitize",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="apply trtkit's compatibility rewrites (dimension names, INT64/FLOAT64 I/O, function ops, opset, "
        "external data); each is named in the build summary and the manifest (default: on)",
    )
    group.add_argument(
        "--fold-constants",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="fold constant subgraphs (ConstantOfShape, static Shape chains...) into initializers "
        "before TensorRT parses the model; used only when it changes something (default: on)",
    )
    group.add_argument(
        "--save-sanitized",
        metavar="PATH",
        help="also write the prepared model here (written only when preparing changed something)",
    )
    group.add_argument(
        "--input-uint8-nhwc",
        action="store_true",
        help="the engine takes the image input as (N, H, W, 3) uint8 pixels and casts, scales (1/255) and "
        "transposes them to the model's (N, 3, H, W) float itself; give --shapes in NHWC (e.g. images:1x640x640x3)",
    )
    group.add_argument(
        "--no-check",
        dest="check",
        action="store_false",
        help="skip the op check (when parsing fails, the build asks TensorRT's parser which ops it supports "
        "and shows the op table)",
    )


def prepare_settings(args) -> dict:
    """The :class:`BuildConfig` fields the prepare options set."""
    return {
        "sanitize": getattr(args, "sanitize", True),
        "fold_constants": getattr(args, "fold_constants", True),
        "check": getattr(args, "check", True),
        "save_prepared": getattr(args, "save_sanitized", None),
        "input_uint8_nhwc": getattr(args, "input_uint8_nhwc", False),
    }
