"""The scripts under test are imported by name from their folder (scripts/, benchmarks/), as their own spawned
workers import them."""

from __future__ import annotations

import contextlib
import importlib
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent


@contextlib.contextmanager
def script_module(folder: str, name: str):
    """``folder/name.py`` imported as the module ``name``, its folder on ``sys.path`` meanwhile."""
    sys.path.insert(0, str(REPO / folder))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(REPO / folder))
