"""Build overhead: `trtkit build` (fresh process, defaults, isolated) against a raw-API script, same model, same
profile, same tactic sources, wall time of the whole process (imports included).

Each measurement is a new Python process, run ``--repeats`` times, alternating raw and trtkit; the median is kept.
Writes ``benchmarks/results/build-overhead-h200.json``::

    {"models": {"digits_cnn": {"raw_s", "trtkit_s", "ratio", "raw_runs", "trtkit_runs"}, "resnet50": {...}}, ...}

On the GPU host (ResNet-50 is exported there first, random weights, with PyTorch's Python)::

    bash .gpu/bin/gpu-run bash -c '/opt/torch/.venv/bin/python3 scripts/export_torchvision.py resnet50 \
        /tmp/resnet50.onnx && python3 benchmarks/build_overhead.py --resnet50 /tmp/resnet50.onnx'
"""

from __future__ import annotations

import argparse
import json
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


def run(cmd: list, cwd: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... failed ({done.returncode}): {(done.stderr or done.stdout)[-800:]}")
    return seconds


def measure(model: Path, batch: tuple, repeats: int, work: Path, python: str) -> dict:
    raw_script = work / "raw_build.py"
    raw_script.write_text(RAW_SCRIPT)
    batch_arg = ",".join(str(b) for b in batch)
    raw_cmd = [python, str(raw_script), str(model), str(work / "raw.engine"), batch_arg, TACTICS]
    # what the `trtkit` console script runs (the same entry point, whatever PATH holds on the host)
    entry = "import sys; from trtkit.cli.main import main; sys.exit(main())"
    trtkit_cmd = [python, "-c", entry, "build", str(model), "-o", str(work / "trtkit.engine"),
                  "--shapes", shapes_arg(model, batch), "--tactic-sources", TACTICS]
    raw_runs, trtkit_runs = [], []
    for _ in range(repeats):
        raw_runs.append(round(run(raw_cmd, work), 2))
        trtkit_runs.append(round(run(trtkit_cmd, work), 2))
    raw_s, trtkit_s = statistics.median(raw_runs), statistics.median(trtkit_runs)
    return {"raw_s": raw_s, "trtkit_s": trtkit_s, "ratio": round(trtkit_s / raw_s, 3), "raw_runs": raw_runs,
            "trtkit_runs": trtkit_runs, "batch": list(batch), "model": str(model)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--digits", default=str(ROOT / "tests" / "data" / "digits_cnn.onnx"))
    parser.add_argument("--resnet50", help="ResNet-50 ONNX (scripts/export_torchvision.py resnet50 ...)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "build-overhead-h200.json"))
    args = parser.parse_args(argv)
    import tensorrt

    models = {"digits_cnn": (Path(args.digits), (1, 32, 64))}
    if args.resnet50:
        models["resnet50"] = (Path(args.resnet50), (1, 32, 32))
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (path, batch) in models.items():
            results[name] = measure(path.resolve(), batch, args.repeats, Path(tmp), sys.executable)
            print(name, json.dumps(results[name]), flush=True)
    report = {"models": results, "tensorrt": tensorrt.__version__, "python": platform.python_version(),
              "tactic_sources": TACTICS, "repeats": args.repeats,
              "note": "wall time of a fresh process per build (imports included), median of the repeats"}
    Path(args.out).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
