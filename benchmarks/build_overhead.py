"""Build overhead: `trtkit build` (fresh process, defaults, isolated) against a raw-API script, same model, same
profile, same tactic sources, wall time of the whole process (imports included).

Each measurement is a new Python process, run ``--repeats`` times, alternating raw and trtkit; the median is kept.
Writes ``benchmarks/results/build-overhead-h200.json``::

    {"models": {"digits_cnn": {"raw_s", "trtkit_s", "ratio", "raw_runs", "trtkit_runs", "trtkit_timings_s"},
                "resnet50": {...}}, ...}

``trtkit_timings_s`` holds each trtkit run's phase log (``trtkit build --json``'s ``timings_s``: seconds from that
process's start to each step, in the caller and in the build worker; :mod:`trtkit.builder.timeline` names them).

On the GPU host (ResNet-50 is exported there first, random weights, with PyTorch's Python)::

    bash .gpu/bin/gpu-run bash -c '/opt/torch/.venv/bin/python3 scripts/export_torchvision.py resnet50 \
        /tmp/resnet50.onnx && python3 benchmarks/build_overhead.py --resnet50 /tmp/resnet50.onnx'

``--models digits_cnn`` measures only that one of the models given. ``--variants no-isolate,no-prepare,no-detail,bare``
also times `trtkit build` with those defaults off (isolation; the rewrites, folding and op check; per-layer detail;
all of them), under ``variants`` in each model's entry (each run's phase log too).

On a CPU, ``--fake`` runs the same commands against trtkit's fake TensorRT (a ``tensorrt`` package put first on
both processes' ``PYTHONPATH``): a dry run of the harness, whose seconds measure process starts, imports and trtkit's
own work, not TensorRT's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TACTICS = "EDGE_MASK_CONVOLUTIONS,JIT_CONVOLUTIONS"  # the GPU host's bundle stubs cuBLAS/cuDNN

# The raw-API build a user would write: parse, one profile for the dynamic batch, TensorRT's defaults otherwise.
RAW_SCRIPT = r'''
import sys
import tensorrt as trt

model, output, batch = sys.argv[1], sys.argv[2], [int(b) for b in sys.argv[3].split(",")]
logger = trt.Logger(trt.Logger.WARNING)
builder = trt.Builder(logger)
network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH))
parser = trt.OnnxParser(network, logger)
if not parser.parse_from_file(model):
    sys.exit("parse failed: " + "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors)))
config = builder.create_builder_config()
config.set_tactic_sources(sum(1 << int(getattr(trt.TacticSource, s)) for s in sys.argv[4].split(",")))
profile = builder.create_optimization_profile()
for i in range(network.num_inputs):
    tensor = network.get_input(i)
    dims = [list(tensor.shape) for _ in batch]
    for shape, b in zip(dims, batch):
        shape[0] = b if tensor.shape[0] < 0 else shape[0]
    profile.set_shape(tensor.name, *dims)
config.add_optimization_profile(profile)
engine = builder.build_serialized_network(network, config)
if engine is None:
    sys.exit("build failed")
open(output, "wb").write(engine)
'''


# --variants: `trtkit build` again with some of its defaults off, to see where a gap to the raw script comes from
VARIANTS = {
    "no-isolate": ["--no-isolate"],
    "no-prepare": ["--no-sanitize", "--no-fold-constants", "--no-check"],
    "no-detail": ["--profiling-verbosity", "NONE"],
    "bare": ["--no-isolate", "--no-sanitize", "--no-fold-constants", "--no-check", "--profiling-verbosity", "NONE"],
}


def shapes_arg(model: Path, batch: tuple) -> str:
    """``--shapes`` for trtkit: each input with its dynamic batch at min/opt/max, like the raw script's profile."""
    from trtkit.model import load_model, model_inputs

    parts = []
    for name, dims in model_inputs(load_model(model, check=False).proto).items():
        shapes = []
        for b in batch:
            shapes.append("x".join(str(b if i == 0 and not isinstance(d, int) else d) for i, d in enumerate(dims)))
        parts.append(f"{name}:{','.join(shapes)}")
    return " ".join(parts)


def fake_environment(work: Path) -> dict:
    """The environment of a ``--fake`` run: a ``tensorrt`` package that is trtkit's fake, first on the path (in the
    raw script's process and in trtkit's, parent and build worker)."""
    from tests.fakes.fake_trt.trace import write_package

    path = [str(write_package(work / "fake-tensorrt")), str(ROOT), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}


def run(cmd: list, cwd: Path, env: dict | None = None) -> float:
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... failed ({done.returncode}): {(done.stderr or done.stdout)[-800:]}")
    return seconds


def measure(model: Path, batch: tuple, repeats: int, work: Path, python: str, env: dict | None = None,
            variants=()) -> dict:
    raw_script = work / "raw_build.py"
    raw_script.write_text(RAW_SCRIPT)
    batch_arg = ",".join(str(b) for b in batch)
    raw_cmd = [python, str(raw_script), str(model), str(work / "raw.engine"), batch_arg, TACTICS]
    # what the `trtkit` console script runs (the same entry point, whatever PATH holds on the host)
    entry = "import sys; from trtkit.cli.main import main; sys.exit(main())"
    trtkit_cmd = [python, "-c", entry, "build", str(model), "-o", str(work / "trtkit.engine"),
                  "--shapes", shapes_arg(model, batch), "--tactic-sources", TACTICS, "--json", str(work / "run.json")]
    raw_runs, trtkit_runs, trtkit_timings = [], [], []
    variant_runs: dict = {name: ([], []) for name in variants}
    for _ in range(repeats):
        raw_runs.append(round(run(raw_cmd, work, env), 2))
        trtkit_runs.append(round(run(trtkit_cmd, work, env), 2))
        trtkit_timings.append(timings(work / "run.json"))
        for name in variants:
            variant_runs[name][0].append(round(run(trtkit_cmd + VARIANTS[name], work, env), 2))
            variant_runs[name][1].append(timings(work / "run.json"))
    raw_s, trtkit_s = statistics.median(raw_runs), statistics.median(trtkit_runs)
    result = {"raw_s": raw_s, "trtkit_s": trtkit_s, "ratio": round(trtkit_s / raw_s, 3), "raw_runs": raw_runs,
              "trtkit_runs": trtkit_runs, "trtkit_timings_s": trtkit_timings, "batch": list(batch),
              "model": str(model)}
    if variants:
        result["variants"] = {name: {"flags": VARIANTS[name], "s": statistics.median(runs), "runs": runs,
                                     "timings_s": marks}
                              for name, (runs, marks) in variant_runs.items()}
    return result


def timings(json_path: Path) -> dict:
    """The phase log of one `trtkit build` (its ``--json``'s ``timings_s``: seconds from its process start), in time
    order; the file is removed so that the next run's cannot be mistaken for it."""
    data = json.loads(json_path.read_text())
    json_path.unlink()
    return dict(sorted(data.get("timings_s", {}).items(), key=lambda item: item[1]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--digits", default=str(ROOT / "tests" / "data" / "digits_cnn.onnx"))
    parser.add_argument("--resnet50", help="ResNet-50 ONNX (scripts/export_torchvision.py resnet50 ...)")
    parser.add_argument("--models", default="", help="only these of the models given, comma separated (digits_cnn, "
                        "resnet50)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "build-overhead-h200.json"))
    parser.add_argument("--fake", action="store_true", help="dry run on trtkit's fake TensorRT (CPU)")
    parser.add_argument("--variants", default="", help="also time `trtkit build` with these defaults off, comma "
                        f"separated ({', '.join(VARIANTS)})")
    args = parser.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown --variants {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    if args.fake:
        version = "fake 8.6.0"
    else:
        import tensorrt

        version = tensorrt.__version__

    models = {"digits_cnn": (Path(args.digits), (1, 32, 64))}
    if args.resnet50:
        models["resnet50"] = (Path(args.resnet50), (1, 32, 32))
    if args.models:
        chosen = [m for m in args.models.split(",") if m]
        missing = [m for m in chosen if m not in models]
        if missing:
            parser.error(f"--models {', '.join(missing)}: not given; known here: {', '.join(models)}")
        models = {name: models[name] for name in chosen}
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        env = fake_environment(Path(tmp)) if args.fake else None
        for name, (path, batch) in models.items():
            results[name] = measure(path.resolve(), batch, args.repeats, Path(tmp), sys.executable, env, variants)
            print(name, json.dumps(results[name]), flush=True)
    report = {"models": results, "tensorrt": version, "python": platform.python_version(),
              "tactic_sources": TACTICS, "repeats": args.repeats,
              "note": "wall time of a fresh process per build (imports included), median of the repeats"}
    Path(args.out).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
