"""``ipukern tune resnet50 --system POD16 --bn-group 2 --sample-bytes 150528`` (issue 31's
30 s target) with the plan reuse across proportions against the same search without it
(``ipukern.systems.tune.REUSE_PLANS = False``), same run, both cold (every cache cleared).

The shortcut must change no answer: the winner, its throughput and every runner-up with why it
lost are asserted identical. ``ratio_vs_no_reuse`` = seconds with / seconds without. CPU
seconds of this process are recorded too: on 2 CPUs shared with other work the wall time
says more about the load (also recorded) than about the search. With benchmarks disabled:
resnet8 on an M2000 at three proportions, checked identical.
"""
import importlib
import os
import time

import pytest

import ipukern as ik
from ipukern.nn.models import MODELS

_TUNE = importlib.import_module("ipukern.systems.tune")
FULL = ("resnet50", "POD16", dict(bn_replica_group=2, sample_bytes=150528))
TINY = ("resnet8", "M2000", dict(max_micro_batch=8, max_global_batch=32,
                                 available_memory_proportion=(0.6, 0.3, 0.15)))


def _cold(model, system, kw, reuse):
    """One cold search; returns (result, wall seconds, CPU seconds)."""
    _TUNE.REUSE_PLANS = reuse
    ik.nn.clear_network_caches()
    net = MODELS[model]()
    t, c = time.perf_counter(), time.process_time()
    try:
        res = ik.tune(net, system, **kw)
    finally:
        _TUNE.REUSE_PLANS = True
    return res, time.perf_counter() - t, time.process_time() - c


def _rows(res):
    return [(c.config, c.why, c.samples_per_second) for c in res.candidates]


@pytest.mark.benchmark(group="tune")
def test_tune_resnet50_pod16_reuse_vs_none(benchmark):
    model, system, kw = TINY if benchmark.disabled else FULL
    load_before = os.getloadavg()[0]
    got = {}

    def run():
        got["fast"] = _cold(model, system, kw, True)
        return got["fast"][0]

    fast = benchmark.pedantic(run, rounds=1, iterations=1, warmup_rounds=0)
    slow, base, base_cpu = _cold(model, system, kw, False)
    assert fast.best_config == slow.best_config
    assert fast.samples_per_second == slow.samples_per_second
    assert _rows(fast) == _rows(slow)
    assert fast.best.info["fits"]
    _, seconds, cpu = got["fast"]
    benchmark.extra_info.update(
        model=model, system=system, winner=fast.candidates[0].label(),
        samples_per_second=fast.samples_per_second, evaluations=fast.evaluations,
        baseline="the same search with REUSE_PLANS = False, same run, cold",
        seconds=seconds, baseline_seconds=base, ratio_vs_no_reuse=seconds / base,
        cpu_seconds=cpu, baseline_cpu_seconds=base_cpu, cpu_ratio=cpu / base_cpu,
        target_seconds=30, load_before=load_before, load_after=os.getloadavg()[0], cpus=os.cpu_count())
