"""Regenerate trtkit/builder/data/onnx_ops.json: which ONNX ops each TensorRT release's ONNX parser lists as
supported, read from onnx-tensorrt's docs/operators.md at its release refs.

    python scripts/onnx_op_table.py --repo PATH/TO/onnx-tensorrt.git 8.6=release/8.6-GA 10.1=release/10.1-GA
    python scripts/onnx_op_table.py 11.0=path/to/operators-11.0.md          # or files saved from a release

Each source is LABEL=REF (a git ref of --repo) or LABEL=FILE. The table keeps only what operators.md states: per
version, the ops marked Y (supported) and N (not), and the opset range of its header line.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "trtkit" / "builder" / "data" / "onnx_ops.json"
# What a release's own parser answered where it differs from its line's operators.md (kept when regenerating):
# {label: {full version: {"unsupported": [ops], "source": how it was measured}}}
PATCH_DIFFERENCES = {
    "8.6": {
        "8.6.0": {
            "unsupported": ["NonMaxSuppression", "NonZero", "RoiAlign"],
            "source": "TensorRT 8.6.0's own ONNX parser (supportsOperator), asked on the GPU host on 2026-12-01 "
            "(tests/gpu/test_hardening_gpu.py): the 8.6-GA list is 8.6.1's",
        }
    }
}
_ROW = re.compile(r"^\|\s*([A-Za-z][A-Za-z0-9_]*)\s*\|\s*([YN])\b")
_OPSET_UP_TO = re.compile(r"supports operators up to Opset (\d+)", re.IGNORECASE)
_OPSET_RANGE = re.compile(r"range of opset (\d+) to opset (\d+)", re.IGNORECASE)


def parse_operators_md(text: str) -> dict:
    """``{"supported": [...], "unsupported": [...], "max_opset": int | None, "min_opset": int | None}``."""
    supported, unsupported = set(), set()
    for line in text.splitlines():
        m = _ROW.match(line.strip())
        if m and m.group(1) != "Operator":
            (supported if m.group(2) == "Y" else unsupported).add(m.group(1))
    low = high = None
    if m := _OPSET_RANGE.search(text):
        low, high = int(m.group(1)), int(m.group(2))
    elif m := _OPSET_UP_TO.search(text):
        high = int(m.group(1))
    if not supported:
        raise SystemExit("no operator rows found: is this onnx-tensorrt's docs/operators.md?")
    return {"min_opset": low, "max_opset": high, "supported": sorted(supported), "unsupported": sorted(unsupported)}


def read_source(spec: str, repo: str | None) -> tuple[str, str, str]:
    """``(label, text, where)`` for ``LABEL=REF`` or ``LABEL=FILE``."""
    label, _, source = spec.partition("=")
    if not label or not source:
        raise SystemExit(f"'{spec}': give LABEL=REF or LABEL=FILE")
    if Path(source).is_file():
        return label, Path(source).read_text(), source
    if repo is None:
        raise SystemExit(f"'{source}' is not a file; give --repo to read it as a git ref")
    git = ["git", f"--git-dir={repo}"] if Path(repo, "HEAD").exists() else ["git", "-C", repo]
    commit = subprocess.run([*git, "rev-parse", f"{source}^{{commit}}"], check=True, capture_output=True,
                            text=True).stdout.strip()
    text = subprocess.run([*git, "show", f"{commit}:docs/operators.md"], check=True, capture_output=True,
                          text=True).stdout
    return label, text, f"onnx/onnx-tensorrt {source} ({commit[:12]}) docs/operators.md"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="+", metavar="LABEL=REF|FILE")
    parser.add_argument("--repo", help="an onnx-tensorrt git repository (or bare git dir) to read refs from")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args(argv)
    versions = {}
    for spec in args.sources:
        label, text, where = read_source(spec, args.repo)
        versions[label] = {"source": where, **parse_operators_md(text)}
        if label in PATCH_DIFFERENCES:
            versions[label]["patch_differences"] = PATCH_DIFFERENCES[label]
    data = {"about": "ONNX ops each TensorRT release's ONNX parser lists in onnx-tensorrt's docs/operators.md "
                     "(made by scripts/onnx_op_table.py)", "versions": versions}
    Path(args.out).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out}: " + ", ".join(f"{k} ({len(v['supported'])} Y, {len(v['unsupported'])} N)"
                                           for k, v in versions.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
