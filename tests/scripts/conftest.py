"""Scripts under scripts/ imported by name, as their pool's spawned workers import them."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent.parent / "scripts"


def _script(name: str):
    sys.path.insert(0, str(SCRIPTS))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(SCRIPTS))


@pytest.fixture(scope="module")
def suite():
    yield from _script("onnx_backend_suite")


@pytest.fixture(scope="module")
def coverage():
    yield from _script("onnx_backend_coverage")
