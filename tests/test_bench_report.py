"""Tests for bench/report.py: a synthetic pytest-benchmark JSON checked cell by cell, and a
real one produced by running the exchange benchmarks."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def report():
    spec = importlib.util.spec_from_file_location("bench_report", ROOT / "bench" / "report.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


SYNTHETIC = {"benchmarks": [
    {"group": "planner", "name": "test_a", "stats": {"min": 0.0123, "median": 0.0150, "rounds": 5},
     "extra_info": {"ratio_cold_vs_planner": 3.3512, "simulated_cycles": 7844,
                    "baseline": "planner only"}},
    {"group": "planner", "name": "test_b", "stats": {"min": 1.6e-5, "median": 1.7e-5, "rounds": 900},
     "extra_info": {"ratio_warm_vs_planner": 0.00238, "meets_target": True}},
    {"group": "exchange", "name": "test_x", "stats": {"min": 2.5, "median": 3.0, "rounds": 1},
     "extra_info": {"ratio_vs_baseline": None}},
]}


def test_synthetic_tables(report, tmp_path, capsys):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(SYNTHETIC))
    assert report.main([str(path), "--extra", "simulated_cycles,meets_target"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "group planner: 2 benchmarks"
    header = lines[1].split()
    assert header == ["benchmark", "min", "median", "rounds", "ratio_cold_vs_planner",
                      "ratio_warm_vs_planner", "simulated_cycles", "meets_target"]
    assert lines[3].split() == ["test_a", "12.3", "ms", "15", "ms", "5", "3.35", "-", "7844", "-"]
    assert lines[4].split() == ["test_b", "16", "us", "17", "us", "900", "-", "0.00238", "-", "yes"]
    assert "  baseline: planner only" in lines
    i = lines.index("group exchange: 1 benchmark")
    assert lines[i + 3].split() == ["test_x", "2.5", "s", "3", "s", "1", "-", "-", "-"]


def test_group_filter_and_errors(report, tmp_path, capsys):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(SYNTHETIC))
    assert report.main([str(path), "--group", "exchange"]) == 0
    out = capsys.readouterr().out
    assert "planner" not in out and "test_x" in out
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    assert report.main([str(bad)]) == 1
    assert "not a pytest-benchmark JSON" in capsys.readouterr().err


def test_real_exchange_benchmark_run(report, tmp_path):
    pytest.importorskip("pytest_benchmark")
    out = tmp_path / "b.json"
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "bench/test_bench_exchange.py", "-q", "-p",
         "no:cacheprovider", f"--benchmark-json={out}", "--benchmark-max-time=0.05",
         "--benchmark-min-rounds=1"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    text = report.report(report.load(out))
    assert text.startswith("group exchange: 3 benchmarks")
    assert "ratio_vs_baseline" in text.splitlines()[1]
    row = next(line for line in text.splitlines() if line.startswith("test_exchange_1472_tiles_16k"))
    ratio = json.loads(out.read_text())["benchmarks"]
    want = next(b for b in ratio if b["name"] == "test_exchange_1472_tiles_16k")
    assert f"{want['extra_info']['ratio_vs_baseline']:.3g}" in row
    assert "baseline: contiguous memcpy, same bytes, same run" in text
