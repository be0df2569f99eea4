"""``scripts/line_budget.py``: the library's Python lines against ``[tool.trtkit] line_budget``."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.bench  # a script's test: pytest -m bench

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "line_budget.py"


def _script():
    spec = importlib.util.spec_from_file_location("line_budget", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tree(root: Path, budget: int) -> Path:
    (root / "trtkit" / "sub").mkdir(parents=True)
    (root / "calibrators").mkdir()
    (root / "trtkit" / "a.py").write_text("x = 1\n\n# why\n")
    (root / "trtkit" / "sub" / "b.py").write_text("y = 2\n")
    (root / "calibrators" / "c.py").write_text("z = 3\n")
    (root / "trtkit" / "notes.md").write_text("not counted\n" * 50)
    (root / "pyproject.toml").write_text(f"[tool.trtkit]\nline_budget = {budget}\n")
    return root


def test_within_the_budget_the_count_is_printed(tmp_path, capsys):
    assert _script().main(_tree(tmp_path, 5)) == 0
    assert "5 of 5 Python lines" in capsys.readouterr().out


def test_over_the_budget_it_fails_naming_the_count_and_the_fix(tmp_path, capsys):
    assert _script().main(_tree(tmp_path, 4)) == 1
    err = capsys.readouterr().err
    assert "hold 5 Python lines, over the budget of 4" in err and "raise the budget in a commit that says why" in err
