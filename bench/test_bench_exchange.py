"""Exchange throughput vs a contiguous memcpy of the same bytes; empty-superstep overhead.

Targets: exchange >= 0.75x the memcpy baseline's GB/s; empty superstep <= 50 us.
"""
import numpy as np
import pytest

import ipukern as ik
from ipukern._kernels import _exchange
from ipukern.core.engine import get_num_threads
from ipukern.core.program import Exchange, Superstep

from timing import best_seconds, measured_seconds

PER_TILE = 16 * 1024


@pytest.fixture(scope="module")
def ring():
    """Every tile receives 16 KiB from the next tile (a ring shift over all 1472 tiles)."""
    m = ik.GC200
    dev = ik.Device(m)
    src = dev.alloc("src", np.full(m.n_tiles, PER_TILE), "user")
    dst = dev.alloc("dst", np.full(m.n_tiles, PER_TILE), "exchange")
    tiles = np.arange(m.n_tiles)
    x = Exchange(m, (tiles + 1) % m.n_tiles, src, tiles, dst, np.full(m.n_tiles, PER_TILE),
                 name="ring 16 KiB")
    data = dev.arena.data
    data[:, src[0]:src[0] + PER_TILE] = np.random.default_rng(0).integers(
        0, 256, size=(m.n_tiles, PER_TILE), dtype=np.uint8)
    data[:, dst[0]:dst[0] + PER_TILE] = 0   # touch the pages once, like a reused arena
    return dev, x, int(src[0]), int(dst[0])


@pytest.mark.benchmark(group="exchange")
def test_memcpy_baseline(benchmark):
    total = ik.GC200.n_tiles * PER_TILE
    a = np.ones(total, np.uint8)
    b = np.zeros(total, np.uint8)
    benchmark(_exchange.memcpy_baseline, b, a)
    t = measured_seconds(benchmark)
    benchmark.extra_info.update(bytes=total, gbps=(total / t / 1e9) if t else None)


@pytest.mark.benchmark(group="exchange")
def test_exchange_1472_tiles_16k(benchmark, ring):
    dev, x, src, dst = ring
    data = dev.arena.data
    n_threads = get_num_threads()
    benchmark(x.run, data, n_threads)
    # correctness: tile t now holds tile t+1's source bytes
    np.testing.assert_array_equal(data[:-1, dst:dst + PER_TILE], data[1:, src:src + PER_TILE])
    total = x.total_bytes
    assert total == ik.GC200.n_tiles * PER_TILE
    a = np.ones(total, np.uint8)
    b = np.zeros(total, np.uint8)
    base = best_seconds(lambda: _exchange.memcpy_baseline(b, a))
    t = measured_seconds(benchmark)
    benchmark.extra_info.update(
        bytes=total, tiles=ik.GC200.n_tiles, simulated_cycles=x.cycles, host_threads=n_threads,
        baseline="contiguous memcpy, same bytes, same run",
        baseline_gbps=total / base / 1e9,
        gbps=(total / t / 1e9) if t else None,
        ratio_vs_baseline=(base / t) if t else None)
    # 16 KiB per tile at the default 24.35 B/cycle: ceil(16*16384/390) + 100
    assert x.cycles == -(-16 * PER_TILE // 390) + 100


@pytest.mark.benchmark(group="exchange")
def test_empty_superstep(benchmark):
    dev = ik.Device(ik.GC200)
    prog = dev.program([Superstep("empty")], label="empty")
    prof = benchmark(dev.run, prog)
    assert prof.total_cycles == ik.GC200.sync_cycles
    t = measured_seconds(benchmark)
    benchmark.extra_info.update(us_per_superstep=(t * 1e6) if t else None, target_us=50,
                                tiles=ik.GC200.n_tiles)
