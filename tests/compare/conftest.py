"""Fixtures for the compare tests: the fake GPU, and the detection set whose right answer is known."""

from tests.eval.test_detection_eval import dataset  # noqa: F401 - a fixture, found by pytest here
from tests.runtime.fakes import fake_gpu  # noqa: F401 - a fixture, found by pytest here
