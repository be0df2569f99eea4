#!/usr/bin/env python3
"""Compare a new run of a benchmark with the committed one: every figure trtkit's speed claims rest on, side by side.

    python scripts/compare_results.py benchmarks/results/runner-h200.json NEW/runner-h200.json [--tolerance 0.02]
    python scripts/compare_results.py benchmarks/results/precision-h200.json NEW/precision-h200.json

The runner benchmark is compared on trtkit against the floors measured in the same run (``trtkit_graph_ms /
floor_ms``, ``trtkit_ms / floor_ms``, ``trtkit_device_ms / floor_compute_ms``, ``bench_gpu_compute_ms /
floor_compute_ms``), so a GPU that runs a little faster or slower that day does not count; the precision benchmark
on trtkit's engines against their raw-API twins (``trtkit_vs_raw``) and on images/s. Prints one line per figure and
exits 1 when one moved by more than the tolerance (relative), 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

RUNNER_RATIOS = (("trtkit_graph_ms", "floor_ms"), ("trtkit_ms", "floor_ms"), ("trtkit_device_ms", "floor_compute_ms"),
                 ("bench_gpu_compute_ms", "floor_compute_ms"))


def runner_figures(data: dict) -> dict:
    """``batch/numerator/denominator`` → ratio, for every batch of a runner benchmark JSON."""
    figures = {}
    for batch in data.get("batches", []):
        row = data.get(str(batch), {})
        for num, den in RUNNER_RATIOS:
            if row.get(num) and row.get(den):
                figures[f"{batch}/{num}/{den}"] = row[num] / row[den]
    return figures


def precision_figures(data: dict) -> dict:
    """``trtkit_vs_raw/<engine>/<batch>`` and ``images_per_s/<engine>/<batch>`` of a precision benchmark JSON."""
    figures = {}
    for name, key in (("trtkit_vs_raw", "trtkit_vs_raw"), ("images_per_s", "resnet50_images_per_s")):
        for engine, by_batch in (data.get(key) or {}).items():
            if not isinstance(by_batch, dict):
                continue
            for batch, value in by_batch.items():
                if isinstance(value, (int, float)) and value:
                    figures[f"{name}/{engine}/{batch}"] = float(value)
    return figures


def figures_of(data: dict) -> dict:
    return precision_figures(data) if "resnet50_images_per_s" in data else runner_figures(data)


def compare(before: dict, after: dict, tolerance: float) -> tuple[list[str], bool]:
    """Lines ``figure: before -> after (change)``, and whether every figure stayed within ``tolerance``."""
    old, new = figures_of(before), figures_of(after)
    if not old or not new:  # nothing to compare is not a pass
        return [f"no figures {'before' if not old else 'now'}: the run measured nothing comparable"], False
    lines, ok = [], True
    for key in sorted(set(old) | set(new)):
        if key not in old or key not in new:
            lines.append(f"{key}: {'missing before' if key not in old else 'missing now'}")
            ok = False
            continue
        change = new[key] / old[key] - 1
        within = abs(change) <= tolerance
        ok = ok and within
        lines.append(f"{key}: {old[key]:.4f} -> {new[key]:.4f} ({change:+.1%}){'' if within else '  OUTSIDE'}")
    return lines, ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path, help="the committed results JSON")
    parser.add_argument("after", type=Path, help="the new run's JSON")
    parser.add_argument("--tolerance", type=float, default=0.02, help="largest relative change accepted")
    args = parser.parse_args()
    lines, ok = compare(json.loads(args.before.read_text()), json.loads(args.after.read_text()), args.tolerance)
    print("\n".join(lines))
    print(f"{'within' if ok else 'NOT within'} {args.tolerance:.0%} of {args.before}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
