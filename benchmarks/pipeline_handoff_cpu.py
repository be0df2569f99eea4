"""The pipeline's hand-off cost between threads, on a CPU: frames/s through ``source → preprocess → infer → sink``
with an inference call that returns at once (``instant``: no engine, tiny samples, so what is left is the
queues, the batching and the per-frame bookkeeping) and through the fake TensorRT engine of
``benchmarks/pipeline_h200.py --fake`` with the samples in place in the batch ring (``fake_engine``).

    python3 benchmarks/pipeline_handoff_cpu.py [--frames 60000] [--batch 32] [--repeat 3]

Prints one JSON object: the best of ``--repeat`` runs of each, and the load average before the first.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


class _Done:
    def __init__(self, outputs):
        self._outputs = outputs

    def wait(self):
        return self._outputs


class InstantInfer:
    """``infer_async`` whose outputs are ready at once: one row of zeros per sample."""

    def infer_async(self, feed):
        (batch,) = feed.values()
        return _Done({"y": np.zeros((len(batch), 1), np.float32)})


def instant(frames: int, batch: int) -> float:
    from trtkit.pipeline import ArraySource, BatchPlan, InferStep, Pipeline, Stage

    sample = np.zeros(4, np.float32)

    def pre(frame):
        frame.sample = sample

    plan = BatchPlan("x", batch, fill_threads=1)
    image = np.zeros((2, 2, 3), np.uint8)
    stages = [Stage("preprocess", pre, 1), InferStep(InstantInfer(), plan)]
    t0 = time.perf_counter()
    report = Pipeline(ArraySource(image for _ in range(frames)), stages).run()
    assert report.frames_out == frames, report.frames_out
    return frames / (time.perf_counter() - t0)


def fake_engine(frames: int, batch: int, work: Path, trt, cuda) -> float:
    from benchmarks.pipeline_h200 import SampleInto, Sizes, build_engine, infer_once
    from trtkit.pipeline.preprocess import image_input
    from trtkit.runtime import TrtRunner

    sizes = Sizes(True)
    sizes.max_batch = batch
    engine = work / "pipeline_cnn.engine"
    if not engine.exists():
        build_engine(sizes, work, trt)
    with TrtRunner(str(engine), trt=trt, cuda=cuda) as runner:
        target = image_input(runner.input_specs)
    rng = np.random.default_rng(0)
    samples = [rng.standard_normal((3, sizes.side, sizes.side)).astype(np.float32) for _ in range(3 * batch)]
    frames = frames // batch * batch
    into = SampleInto(target, copy_always=False)
    result = infer_once(engine, samples, frames, batch, {"runners": 2, "trt": trt, "cuda": cuda}, into)
    return result["fps"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--frames", type=int, default=60_000)
    parser.add_argument("--engine-frames", type=int, default=6_400)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    from benchmarks.pipeline_h200 import install_fakes

    load = os.getloadavg()
    trt, cuda = install_fakes()
    result = {"load_average": [round(x, 2) for x in load], "cpus": os.cpu_count(), "batch": args.batch}
    result["instant_fps"] = round(max(instant(args.frames, args.batch) for _ in range(args.repeat)))
    with tempfile.TemporaryDirectory(prefix="trtkit-handoff-") as tmp:
        runs = [fake_engine(args.engine_frames, args.batch, Path(tmp), trt, cuda) for _ in range(args.repeat)]
        result["fake_engine_fps"] = round(max(runs))
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
