"""Fixtures for the bench tests: the fake GPU installed where trtkit looks for TensorRT and cuda-python."""

from tests.runtime.fakes import fake_gpu  # noqa: F401 - a fixture, found by pytest here
