"""The scripts the tests here are about, one fixture each."""

from __future__ import annotations

import pytest

from tests.scripts import script_module


@pytest.fixture(scope="module")
def suite():
    with script_module("scripts", "onnx_backend_suite") as module:
        yield module


@pytest.fixture(scope="module")
def coverage():
    with script_module("scripts", "onnx_backend_coverage") as module:
        yield module


@pytest.fixture(scope="module")
def real_models():
    with script_module("scripts", "real_models") as module:
        yield module
