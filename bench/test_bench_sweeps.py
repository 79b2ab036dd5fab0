"""Sweeps: the ``executor="auto"`` default against a serial run of the same sweep, same run.

Two grouped-conv sweeps, each cold (plan cache cleared before every run, and pool workers
start with empty caches): ``default`` is the built-in ``ipukern scaling`` sweep (5 layers,
batch 1 and 32, GC200 vs A100: 70 points), which must not get slower; ``large`` is the
same layers at batch 1, 8 and 32 on GC200 and Bow (105 points, two IPU rows each), where
``"auto"`` should move to a process pool. ``ratio_vs_serial`` = serial seconds / auto
seconds (> 1: the default is faster); ``executor`` says what ``"auto"`` chose, and the
load average before and after is recorded next to it (on a busy machine ``"auto"`` stays
serial by design), and so are the seconds of ``executor="process"`` (a pool whatever the
sweep) and their ratio to serial: what a pool would give at that moment. With benchmarks
disabled: a tiny sweep, results checked identical.
"""
import os
import time

import pytest

import ipukern as ik
from ipukern import _pool
from ipukern.scaling import DEFAULT_BATCH, ConvLayer, grouped_conv_sweep
from timing import measured_seconds

SWEEPS = {
    "default": dict(batch=DEFAULT_BATCH),
    "large": dict(batch=(1, 8, 32), machines=("GC200", "BOW")),
}
TINY = dict(layer=ConvLayer("tiny", channels=16, height=8, width=8, kernel=3),
            channels_per_group=(1, 4), batch=(1,))


def _cold(kw, executor):
    ik.clear_plan_cache()
    return grouped_conv_sweep(executor=executor, **kw)


@pytest.mark.benchmark(group="sweeps")
@pytest.mark.parametrize("sweep", sorted(SWEEPS))
def test_sweep_auto_vs_serial(benchmark, sweep):
    kw = TINY if benchmark.disabled else SWEEPS[sweep]
    _cold(TINY, None)                           # one-time imports and tables out of the way
    load_before = os.getloadavg()[0]
    first_pool = not _pool._STATE["server"]
    auto = benchmark.pedantic(_cold, args=(kw, "auto"), rounds=1, iterations=1, warmup_rounds=0)
    t0 = time.perf_counter()
    serial = _cold(kw, None)
    base = time.perf_counter() - t0
    t0 = time.perf_counter()
    pooled = _cold(kw, "process")               # what a pool gives here now, whatever "auto" chose
    pool_seconds = time.perf_counter() - t0
    for other in (auto, pooled):
        assert other.to_dicts() == serial.to_dicts() and repr(other.to_dicts()) == repr(serial.to_dicts())
    t = measured_seconds(benchmark)
    benchmark.extra_info.update(
        sweep=sweep, rows=len(auto), executor=auto.meta["executor"],
        first_pool_of_process=first_pool, cpus=_pool.worker_count(),
        load_before=load_before, load_after=os.getloadavg()[0],
        baseline="the same sweep with executor=None (serial), same run, one round, cold",
        baseline_seconds=base, seconds=t, ratio_vs_serial=(base / t) if t else None,
        process_pool_seconds=pool_seconds, ratio_process_pool_vs_serial=base / pool_seconds)
