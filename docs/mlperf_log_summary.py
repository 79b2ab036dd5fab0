"""How the published MLPerf values in ipukern/validation/published_systems.csv were derived.

Usage (a local clone of github.com/mlcommons/training_results_v1.0 or v1.1)::

    python docs/mlperf_log_summary.py CLONE Graphcore/results/ipu-pod16-TF1/resnet ...

For each results directory (one ``result_*.txt`` MLLOG file per run) it prints:

- the MLPerf score: the mean of the runs' ``run_stop - run_start`` in minutes without the
  fastest and the slowest run (MLPerf Training rules for 5 (vision) or 10 (BERT) runs);
- the training rate from the logs: for epoch-logging runs (ResNet-50) the dataset size over the
  median ``epoch_start .. epoch_stop`` time, for block-logging runs (Graphcore BERT) the samples
  between two evaluations over the ``block_start .. block_stop`` time; the median over runs;
- NVIDIA's own ``training_sequences_per_second`` lines where a log prints them (their script
  divides global batch x ``max_steps`` by the training time, whatever the steps run: not a
  training-only rate);
- the median of the runs' ``train_samples`` (samples to convergence).
"""
from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path


def events(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        if ":::MLLOG" in line:
            out.append(json.loads(line.split(":::MLLOG", 1)[1]))
    return out


def run_rate(ev: list[dict], dataset: int | None) -> float | None:
    """Training samples per second of one run (None when the log has neither form)."""
    epochs, blocks, rates, start, prev = [], [], [], None, 0
    for e in ev:
        k = e["key"]
        if k in ("epoch_start", "block_start"):
            start = e["time_ms"]
        elif k == "epoch_stop" and start is not None:
            epochs.append(e["time_ms"] - start)
        elif k == "block_stop" and start is not None:
            blocks.append(e["time_ms"] - start)
        elif k == "eval_accuracy" and blocks:
            n = e.get("metadata", {}).get("epoch_num") or 0
            if n > prev + 1:          # Graphcore's BERT logs the samples seen as epoch_num
                rates.append((n - prev) / (blocks[-1] / 1e3))
                prev = n
    if epochs and dataset:
        return dataset / (statistics.median(epochs) / 1e3)
    return statistics.median(rates) if rates else None


def summarise(result_dir: Path) -> dict:
    ttt, rates, samples, nv = [], [], [], []
    for f in sorted(result_dir.glob("result_*.txt")):
        ev = events(f)
        t = {e["key"]: e["time_ms"] for e in ev if e["key"] in ("run_start", "run_stop")}
        ttt.append((t["run_stop"] - t["run_start"]) / 60e3)
        dataset = next((e["value"] for e in ev if e["key"] == "train_samples"), None)
        samples.append(dataset)
        r = run_rate(ev, dataset if any(e["key"] == "epoch_stop" for e in ev) else None)
        if r:
            rates.append(r)
        m = re.search(r"'training_sequences_per_second': ([0-9.]+)", f.read_text())
        if m:
            nv.append(float(m.group(1)))
    s = sorted(ttt)
    return {"runs": len(s), "score_minutes": round(statistics.fmean(s[1:-1] if len(s) > 2 else s), 3),
            "rate_median": round(statistics.median(rates)) if rates else None,
            "nvidia_sequences_per_second_median": round(statistics.median(nv)) if nv else None,
            "train_samples_median": statistics.median(x for x in samples if x) if any(samples) else None}


if __name__ == "__main__":
    root = Path(sys.argv[1])
    for d in sys.argv[2:]:
        print(d, summarise(root / d))
