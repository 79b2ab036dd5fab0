"""Shared helpers for the benchmark suite (pytest-benchmark).

Each benchmark records simulated metrics and, where it has one, the same-run baseline's
speed and the ratio in ``benchmark.extra_info``; ``python bench/report.py`` turns a saved
JSON into a table of ratios.
"""
import pytest

from timing import best_seconds


@pytest.fixture
def baseline():
    return best_seconds
