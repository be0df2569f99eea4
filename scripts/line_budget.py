"""The library's line budget: the Python lines of trtkit/ and calibrators/ against ``[tool.trtkit] line_budget``.

    python scripts/line_budget.py        # prints the count; exits 1 when it is over the budget

Raising the budget is a deliberate commit to pyproject.toml that says why.
"""

from __future__ import annotations

import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("trtkit", "calibrators")


def count_lines(root: Path = ROOT) -> int:
    """Lines of every ``.py`` file under the library's packages (blank lines and comments included, as ``wc -l``)."""
    return sum(len(path.read_bytes().splitlines()) for package in PACKAGES for path in (root / package).rglob("*.py"))


def main(root: Path = ROOT) -> int:
    budget = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["trtkit"]["line_budget"]
    lines = count_lines(root)
    if lines > budget:
        print(
            f"line budget: trtkit/ + calibrators/ hold {lines} Python lines, over the budget of {budget} "
            "([tool.trtkit] line_budget in pyproject.toml): delete lines, or raise the budget in a commit "
            "that says why",
            file=sys.stderr,
        )
        return 1
    print(f"line budget: {lines} of {budget} Python lines in trtkit/ + calibrators/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
