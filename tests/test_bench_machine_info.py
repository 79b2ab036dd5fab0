"""bench/conftest.py records the ipukern build and threads in pytest-benchmark's machine_info."""
import importlib.util
from pathlib import Path

import ipukern


def test_machine_info_hook_records_version_isa_openmp_threads():
    path = Path(__file__).resolve().parents[1] / "bench" / "conftest.py"
    spec = importlib.util.spec_from_file_location("bench_conftest_for_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    info: dict = {}
    mod.pytest_benchmark_update_machine_info(None, info)
    got = info["ipukern"]
    assert got["version"] == ipukern.__version__
    assert got["conv_isa"] in got["conv_isas_available"]
    assert isinstance(got["openmp"], bool) and got["threads"] >= 1 and got["max_threads"] >= 1
