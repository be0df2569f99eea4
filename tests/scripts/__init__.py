"""Tests of the scripts under scripts/, which are imported by name (:func:`script_module`)."""

from __future__ import annotations

import contextlib
import importlib
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent.parent.parent / "scripts"


@contextlib.contextmanager
def script_module(name: str):
    """``scripts/<name>.py`` imported by name, as their pool's spawned workers import them."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(SCRIPTS))
