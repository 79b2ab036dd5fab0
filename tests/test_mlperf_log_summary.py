"""docs/mlperf_log_summary.py (how the MLPerf values of published_systems.csv were derived)
on hand-written MLLOG files whose answers are computed by hand."""
import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "docs" / "mlperf_log_summary.py"


@pytest.fixture(scope="module")
def mod():
    spec = importlib.util.spec_from_file_location("mlperf_log_summary", SCRIPT)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def _log(path, events):
    path.write_text("".join(f":::MLLOG {json.dumps(e)}\n" for e in events))


def ev(key, t, **meta):
    return {"key": key, "time_ms": t, "metadata": meta}


def test_epoch_runs(mod, tmp_path):
    # 5 runs of 1000 samples, epochs of 2 s, 3 s, 2 s; run lengths 1..5 minutes
    for k in range(5):
        _log(tmp_path / f"result_{k}.txt",
             [ev("run_start", 0), {"key": "train_samples", "time_ms": 0, "value": 1000},
              ev("epoch_start", 0), ev("epoch_stop", 2000), ev("epoch_start", 2000), ev("epoch_stop", 5000),
              ev("epoch_start", 5000), ev("epoch_stop", 7000), ev("run_stop", (k + 1) * 60_000)])
    s = mod.summarise(tmp_path)
    assert s["runs"] == 5 and s["score_minutes"] == 3.0          # mean of 2, 3, 4 minutes
    assert s["rate_median"] == 500                                # 1000 samples / median 2 s
    assert s["train_samples_median"] == 1000


def test_block_runs(mod, tmp_path):
    # samples seen logged as epoch_num at each evaluation; blocks of 10 s and 20 s
    _log(tmp_path / "result_0.txt",
         [ev("run_start", 0), ev("block_start", 0), ev("block_stop", 10_000),
          {"key": "eval_accuracy", "time_ms": 10_500, "metadata": {"epoch_num": 1000}},
          ev("block_start", 10_500), ev("block_stop", 30_500),
          {"key": "eval_accuracy", "time_ms": 31_000, "metadata": {"epoch_num": 5000}},
          {"key": "train_samples", "time_ms": 31_000, "value": 5000}, ev("run_stop", 60_000)])
    s = mod.summarise(tmp_path)
    assert s["rate_median"] == 150          # median of 1000/10 and 4000/20
    assert s["score_minutes"] == 1.0
