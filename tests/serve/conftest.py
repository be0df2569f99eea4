"""The serve tests' engine: the tiny conv net as a fake engine, batch 1..4 (opt 2)."""

from __future__ import annotations

import pytest

from tests import models
from tests.runtime.fakes import fake_engine_bytes

PROFILE = {"x": [[1, 3, 8, 8], [2, 3, 8, 8], [4, 3, 8, 8]]}


def tiny_engine_bytes() -> bytes:
    return fake_engine_bytes(models.tiny_conv(), [PROFILE])


@pytest.fixture
def engine(tmp_path):
    path = tmp_path / "tiny.engine"
    path.write_bytes(tiny_engine_bytes())
    return path
