"""PyTorch side of ``runner_vs_anchors.py``: runs under the torch venv (``/opt/torch/.venv/bin/python3``).

1. Optionally exports ResNet-50 (torchvision, random weights, seed 0) to ONNX with a dynamic batch dimension.
2. Prepares eager FP32, eager FP16 and ``torch.compile`` FP16 models and compiles them for every batch size.
3. Writes ``--ready`` and waits for ``--go`` (so its GPU and CPU work never overlaps the TensorRT measurements).
4. Measures numpy in → numpy out latency (median of many calls after warm-up) and writes ``--result`` (JSON).

Every step records its error in the JSON instead of aborting.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import timed  # noqa: E402 - the benchmarks' shared loop (standard library only)


def export_onnx(model, path: str, opset: int = 17) -> None:
    """Export with a dynamic batch; the legacy exporter first (no onnxscript needed), then the dynamo one."""
    import torch

    x = torch.randn(1, 3, 224, 224)  # exported on the CPU, as scripts/export_torchvision.py does
    tmp = f"{path}.tmp{os.getpid()}"
    kwargs = dict(input_names=["images"], output_names=["logits"], opset_version=opset)
    try:
        torch.onnx.export(model, (x,), tmp, dynamic_axes={"images": {0: "N"}, "logits": {0: "N"}},
                          dynamo=False, **kwargs)
    except TypeError:  # torch without the dynamo argument
        torch.onnx.export(model, (x,), tmp, dynamic_axes={"images": {0: "N"}, "logits": {0: "N"}}, **kwargs)
    except Exception:  # noqa: BLE001 - legacy exporter unavailable: try the dynamo exporter
        batch = torch.export.Dim("N", min=1, max=64)
        torch.onnx.export(model, (x,), tmp, dynamic_shapes={"x": {0: batch}}, dynamo=True, external_data=False,
                          **kwargs)
    os.replace(tmp, path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--export", metavar="ONNX", help="export ResNet-50 here first")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--ready", required=True, help="file written when models are compiled")
    ap.add_argument("--go", required=True, help="file to wait for before measuring")
    ap.add_argument("--result", required=True, help="JSON results file")
    ap.add_argument("--budget-s", type=float, default=1.5)
    ap.add_argument("--wait-s", type=float, default=420.0)
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    out: dict = {"errors": {}}
    import numpy as np
    import torch
    import torchvision

    out["torch"] = torch.__version__
    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).eval()
    if args.export:
        try:
            with torch.no_grad():
                export_onnx(model, args.export)
            print("exported", args.export, flush=True)
        except Exception as exc:  # noqa: BLE001
            out["errors"]["export"] = f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
    runners = prepare(model.cuda(), batches, out["errors"])
    with open(args.ready, "w") as f:
        f.write("ready\n")
    deadline = time.time() + args.wait_s
    while not os.path.exists(args.go) and time.time() < deadline:
        time.sleep(0.1)
    rng = np.random.default_rng(0)
    for batch in batches:
        x = rng.uniform(-1, 1, size=(batch, 3, 224, 224)).astype(np.float32)
        row = out.setdefault(str(batch), {})
        for key, fn in runners.items():
            try:
                ms = timed(lambda fn=fn, x=x: fn(x), warmup_s=0.3, budget_s=args.budget_s, min_calls=20, max_calls=2000)
                row[key] = round(ms, 4)
            except Exception as exc:  # noqa: BLE001
                row[key] = None
                out["errors"][f"{batch}.{key}"] = f"{type(exc).__name__}: {exc}"
        print(batch, row, flush=True)
    with open(args.result, "w") as f:
        json.dump(out, f, indent=2)
    return 0


def prepare(model, batches, errors: dict) -> dict:
    """numpy → numpy callables per anchor; torch.compile is compiled for each batch here (before measuring)."""
    import copy

    import torch

    half = copy.deepcopy(model).half()

    def eager32(x):
        with torch.inference_mode():
            return model(torch.from_numpy(x).cuda()).float().cpu().numpy()

    def eager16(x):
        with torch.inference_mode():
            return half(torch.from_numpy(x).cuda().half()).float().cpu().numpy()

    runners = {"torch_eager_ms": eager32, "torch_eager_fp16_ms": eager16}
    try:
        compiled = torch.compile(half, dynamic=False)

        def compiled16(x):
            with torch.inference_mode():
                return compiled(torch.from_numpy(x).cuda().half()).float().cpu().numpy()

        import numpy as np

        for batch in batches:
            t0 = time.perf_counter()
            compiled16(np.zeros((batch, 3, 224, 224), np.float32))
            print(f"compiled batch {batch} in {time.perf_counter() - t0:.1f} s", flush=True)
        runners["torch_compile_ms"] = compiled16
    except Exception as exc:  # noqa: BLE001
        errors["torch_compile"] = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
    return runners


if __name__ == "__main__":
    sys.exit(main())
