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


def pytest_benchmark_update_machine_info(config, machine_info):
    """Record what the host numbers depend on next to pytest-benchmark's CPU details: the
    ipukern version, the conv kernel's ISA variant, OpenMP and the thread count."""
    import ipukern
    from ipukern._kernels import _conv, _exchange

    machine_info["ipukern"] = {
        "version": ipukern.__version__,
        "conv_isa": _conv.best_isa(),
        "conv_isas_available": list(_conv.available_isas()),
        "openmp": bool(_exchange.has_openmp()),
        "threads": ipukern.get_num_threads(),
        "max_threads": _exchange.max_threads(),
    }
