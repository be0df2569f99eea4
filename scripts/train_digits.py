"""Train a small CNN on scikit-learn's handwritten digits and export it to ONNX with its held-out split.

Real data (1797 labelled 8x8 images, shipped with scikit-learn: no download), trained with PyTorch on the CPU in
well under a minute. Writes, beside each other (default ``tests/data/``):

- ``digits_cnn.onnx``: input ``images`` (N, 1, 8, 8) float32 in 0..1, output ``logits`` (N, 10); opset 17, dynamic
  batch;
- ``digits_holdout.npz``: ``x`` (N, 1, 8, 8) float32, ``y`` int64: the held-out split for accuracy checks;
- ``digits_calib.npz``: ``x``: a calibration split drawn from the training data (no labels needed).

PyTorch and scikit-learn are needed only here (``pip install torch scikit-learn``); trtkit's tests read the files.

Usage: ``python scripts/train_digits.py [--out tests/data] [--epochs 40] [--seed 0]``
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


def load_splits(seed: int, holdout: float = 0.3, calib: int = 256):
    """(train x, train y, holdout x, holdout y, calib x), images as (N, 1, 8, 8) float32 in 0..1."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images.astype(np.float32) / 16.0)[:, None]
    y = digits.target.astype(np.int64)
    x_train, x_hold, y_train, y_hold = train_test_split(x, y, test_size=holdout, random_state=seed, stratify=y)
    rng = np.random.default_rng(seed)
    x_calib = x_train[rng.choice(len(x_train), size=min(calib, len(x_train)), replace=False)]
    return x_train, y_train, x_hold, y_hold, x_calib


def make_model():
    import torch.nn as nn

    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(32 * 4 * 4, 64), nn.ReLU(),
        nn.Linear(64, 10),
    )


def train(model, x, y, epochs: int, seed: int):
    import torch

    torch.manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    for _ in range(epochs):
        perm = torch.randperm(len(xt))
        for start in range(0, len(xt), 64):
            idx = perm[start:start + 64]
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(xt[idx]), yt[idx])
            loss.backward()
            opt.step()
    return model.eval()


def accuracy(model, x, y) -> float:
    import torch

    with torch.no_grad():
        return float((model(torch.from_numpy(x)).argmax(1).numpy() == y).mean())


def export(model, path: Path) -> None:
    import torch

    dummy = torch.zeros(2, 1, 8, 8)
    torch.onnx.export(model, (dummy,), str(path), input_names=["images"], output_names=["logits"], opset_version=17,
                      dynamic_axes={"images": {0: "N"}, "logits": {0: "N"}}, dynamo=False)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "tests" / "data"))
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    import torch

    torch.manual_seed(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    x_train, y_train, x_hold, y_hold, x_calib = load_splits(args.seed)
    model = train(make_model(), x_train, y_train, args.epochs, args.seed)
    export(model, out / "digits_cnn.onnx")
    np.savez_compressed(out / "digits_holdout.npz", x=x_hold, y=y_hold)
    np.savez_compressed(out / "digits_calib.npz", x=x_calib)
    print(f"train top-1 {accuracy(model, x_train, y_train):.4f}, holdout top-1 {accuracy(model, x_hold, y_hold):.4f} "
          f"({len(y_hold)} images); wrote {out}/digits_cnn.onnx, digits_holdout.npz, digits_calib.npz")
    return 0


if __name__ == "__main__":
    sys.exit(main())
