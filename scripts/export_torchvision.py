#!/usr/bin/env python3
"""Export a torchvision model (random weights) to ONNX with a dynamic batch, plus reference input/outputs.

Runs under a Python that has PyTorch and torchvision (on the GPU host: /opt/torch/.venv/bin/python3). Nothing is
downloaded: weights are random (seeded), which is what speed and parity checks need.

    python3 scripts/export_torchvision.py resnet50 out/resnet50.onnx --reference out/resnet50_ref.npz --batch 4
"""

from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", help="torchvision model name, e.g. resnet50")
    p.add_argument("output", help="ONNX file to write")
    p.add_argument("--opset", type=int, default=17)
    p.add_argument("--size", type=int, default=224, help="input height and width")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reference", help="also write an .npz with a random input batch and PyTorch's FP32 outputs")
    p.add_argument("--batch", type=int, default=4, help="batch size of the reference input")
    args = p.parse_args(argv)
    try:
        import numpy as np
        import torch
        import torchvision
    except ImportError as exc:
        print(f"export_torchvision: needs torch and torchvision ({exc})", file=sys.stderr)
        return 2
    torch.manual_seed(args.seed)
    model = getattr(torchvision.models, args.model)(weights=None).eval()
    example = torch.randn(1, 3, args.size, args.size)
    torch.onnx.export(model, example, args.output, opset_version=args.opset, input_names=["images"],
                      output_names=["logits"], dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}},
                      dynamo=False)
    if args.reference:
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        x = torch.randn(args.batch, 3, args.size, args.size, generator=torch.Generator().manual_seed(args.seed + 1))
        with torch.no_grad():
            y = model.double()(x.double()).float()  # float64 on the CPU: a reference with no rounding of its own
        np.savez(args.reference, images=x.numpy(), logits=y.numpy())
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
