"""Bad input to the low-level Device / Exchange / ComputeSet API and to the compiled kernels
gets a clear error, never a crash.

Each case that crashed the interpreter before it was fixed (SIGSEGV, or OpenMP ending the
process) runs in a subprocess, so a regression fails one test instead of the test runner.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

import ipukern as ik
from ipukern.core.program import ComputeSet, Exchange, ExchangeError, VertexBatch
from ipukern.core.threads import MAX_THREADS, check_num_threads

from tests._support.isolated import run_isolated

# --------------------------------------------------------------------------- exchanges
def test_exchange_beyond_allocated_memory_is_refused_at_run():
    """A copy inside the tile (624 KiB) but past what the device allocated (the arena row is
    the high-water mark) used to write past the host arena."""
    out = run_isolated("""
        dev = ik.Device(ik.GC200)
        dev.alloc("x", np.full(ik.GC200.n_tiles, 64))
        x = dev.exchange([0], [0], [1471], [600_000], [38_000])
        prog = dev.program([Superstep("far", exchange=x)])
        expect(lambda: dev.run(prog), ExchangeError, "allocate the buffers on the device")
        assert dev.run(prog, mode="estimate").total_cycles > 0     # estimating needs no bytes
    """)
    assert "REJECTED: ExchangeError" in out


def test_program_of_another_device_is_refused():
    out = run_isolated("""
        a, b = ik.Device(ik.GC200), ik.Device(ik.GC200)
        for d, size in ((a, 200_000), (b, 64)):
            d.alloc("buf", np.full(ik.GC200.n_tiles, size))
        prog = a.program([Superstep("s", exchange=a.exchange([0], [0], [1], [100_000], [50_000]))])
        expect(lambda: b.run(prog), ValueError, "built for another device")
        expect(lambda: ik.run_program(prog, device=b), ValueError, "built for another device")
        a.run(prog)                                                   # its own device: fine
    """)
    assert out.count("REJECTED") == 2


def test_offsets_near_int64_max_do_not_wrap():
    """``off + nb > row`` wrapped to a negative number and passed."""
    m = ik.GC200
    for cols in ([0, 0, 1, 2**63 - 8, 16], [0, 2**63 - 8, 1, 0, 16], [0, 0, 1, 0, 2**63 - 1]):
        with pytest.raises(ExchangeError, match="outside the tile"):
            Exchange(m, *([c] for c in cols))
    with pytest.raises(ExchangeError, match="outside the int64 range"):
        Exchange(m, [0], [0], [1], [2**64 - 8], [16])
    with pytest.raises(ExchangeError, match="outside the int64 range"):
        Exchange(m, [0], [0], [1], np.array([2**63], dtype=np.uint64), [16])


def test_exchange_run_validates_the_data_array():
    """``Exchange(...).run(np.zeros((2, 16), np.uint8), 1)`` used to segfault."""
    out = run_isolated("""
        m = ik.GC200
        x = Exchange(m, [0], [0], [1], [0], [16])
        good = np.zeros((m.n_tiles, 64), np.uint8)
        for data, text in [(np.zeros((1, 16), np.uint8), "uses tile 1"),
                           (np.zeros((m.n_tiles, 8), np.uint8), "rows hold 8 B"),
                           (np.zeros((m.n_tiles, 64), np.float32), "uint8"),
                           (np.zeros(m.n_tiles * 64, np.uint8), "2-D"),
                           (np.zeros((64, m.n_tiles), np.uint8).T, "C-contiguous"),
                           ("not an array", "device arena")]:
            expect(lambda: x.run(data, 1), ExchangeError, text)
        far = Exchange(m, [0], [0], [1471], [100], [16])
        expect(lambda: far.run(np.zeros((2, 16), np.uint8), 1), ExchangeError, "uses tile 1471")
        ro = good.copy()
        ro.flags.writeable = False
        expect(lambda: x.run(ro, 1), ExchangeError, "writeable")
        for n in (0, -3, 2.0, True, 10**6):
            expect(lambda: x.run(good, n), (TypeError, ValueError), "number of threads")
        good[0, :16] = 7
        x.run(good, 1)
        assert (good[1, :16] == 7).all()
    """)
    assert out.count("REJECTED") == 13


# --------------------------------------------------------------------------- compute sets
def _fill_batch(m, tiles, off, n):
    from ipukern.core.vertices import KernelCodelet
    codelet = KernelCodelet("fill<float32>", "fill", ("off", "n"), (1.0, 0))
    n = np.asarray(n, np.int64)
    return VertexBatch(codelet, tiles, {"off": np.asarray(off, np.int64), "n": n},
                       np.ones(len(tiles), np.int64), regions=[(off, n * 4)])


def test_vertex_batch_validation_does_not_wrap():
    m = ik.GC200
    with pytest.raises(ValueError, match="outside the tile"):
        ComputeSet(m, [_fill_batch(m, [0], [2**63 - 8], [4])])
    with pytest.raises(ValueError, match="outside the int32 range"):
        _fill_batch(m, [2**32], [0], [4])                 # used to wrap to tile 0
    with pytest.raises(ValueError, match="for 2 vertices"):
        from ipukern.core.vertices import KernelCodelet
        VertexBatch(KernelCodelet("f", "fill", ("off", "n"), (1.0, 0)), [0, 1], {}, [1, 1],
                    regions=[([0], [4])]).check(m, m.tile_bytes)


def test_compute_set_beyond_allocated_memory_is_refused_at_run():
    out = run_isolated("""
        from ipukern.core.vertices import KernelCodelet
        dev = ik.Device(ik.GC200)
        dev.alloc("x", np.full(ik.GC200.n_tiles, 64))
        fill = KernelCodelet("fill<float32>", "fill", ("off", "n"), (1.0, 0))
        batch = VertexBatch(fill, [5], {"off": np.array([500_000]), "n": np.array([1000])}, [10],
                            regions=[(np.array([500_000]), np.array([4000]))])
        prog = dev.program([Superstep("far", compute=dev.compute_set([batch]))])
        expect(lambda: dev.run(prog), ValueError, "allocate the buffers on the device")
        cs = dev.compute_set([batch])
        expect(lambda: cs.run(np.zeros((3, 64), np.uint8), 1), ValueError, "uses tile 5")
    """)
    assert out.count("REJECTED") == 2


def test_kernels_check_operands_against_the_arena():
    """The compiled kernels refuse operands outside ``data`` themselves (the last line of
    defence when a batch's declared regions do not match its arguments)."""
    out = run_isolated("""
        from ipukern._kernels import _exchange, _vertices
        data = np.zeros((4, 256), np.uint8)
        i32 = lambda *v: np.array(v, np.int32)
        i64 = lambda *v: np.array(v, np.int64)
        bounds = i64(0, 1)
        expect(lambda: _exchange.copy_runs(data, data, i32(0), i64(0), i32(1), i64(2**63 - 8),
                                           i64(16), bounds), ValueError, "outside the arrays")
        expect(lambda: _exchange.copy_runs(data, data, i32(0), i64(0), i32(9), i64(0), i64(16),
                                           bounds), ValueError, "outside the arrays")
        expect(lambda: _exchange.copy_runs(data, data, i32(0), i64(0), i32(1), i64(0), i64(16),
                                           i64(0, 5)), ValueError, "bounds")
        expect(lambda: _exchange.copy_strided(data, np.zeros(64, np.uint8), i32(0), i64(0), i64(64),
                                              i64(0), i64(0), i64(16), i64(5), bounds),
               ValueError, "outside the arrays")
        expect(lambda: _vertices.fill(data, i32(1), i64(250), i64(4), 1.0, 0, 1), ValueError,
               "outside the arena row")
        expect(lambda: _vertices.fill(data, i32(4), i64(0), i64(4), 1.0, 0, 1), ValueError,
               "outside the arena")
        expect(lambda: _vertices.binary(data, i32(0), i64(0), i64(0), i64(2**62), i64(4), 0, 0, 1),
               ValueError, "outside the arena row")
        expect(lambda: _vertices.sum_rows(data, i32(0), i64(0), i64(0, 0), i64(), i64(4), 0, 0, 1),
               ValueError, "source range")
        expect(lambda: _vertices.sum_elems(data, i32(0), i64(256), i64(0), i64(4), 0, 0, 1),
               ValueError, "outside the arena row")
        expect(lambda: _vertices.add_bias(data, i32(0), i64(0), i64(0),
                                          np.array([[0, 4, 1, 1, 10**6, 1, 0]], np.int64), 0, 1),
               ValueError, "reach outside")
        expect(lambda: _vertices.fill(data, i32(0), i64(0), i64(4), 1.0, 0, 0), ValueError,
               "n_threads")
    """)
    assert out.count("REJECTED") == 11


# --------------------------------------------------------------------------- threads
@pytest.mark.parametrize("bad, exc", [(0, ValueError), (-1, ValueError), (MAX_THREADS + 1, ValueError),
                                      (2000, ValueError), (True, TypeError), (2.0, TypeError),
                                      ("4", TypeError)])
def test_set_num_threads_rejects_nonsense(bad, exc):
    before = ik.get_num_threads()
    with pytest.raises(exc, match="number of threads"):
        ik.set_num_threads(bad)
    assert ik.get_num_threads() == before


def test_thread_count_is_bounded_everywhere():
    """2000 threads under a memory limit made OpenMP end the process; environment variables
    are bounded too (IPUKERN_NUM_THREADS refused, OMP_NUM_THREADS clamped)."""
    assert check_num_threads(np.int64(2)) == 2
    assert MAX_THREADS == min(256, 4 * (os.cpu_count() or 1))
    out = run_isolated("""
        from ipukern.core.threads import MAX_THREADS
        expect(lambda: ik.get_num_threads(), ValueError, "IPUKERN_NUM_THREADS")
    """, env={"IPUKERN_NUM_THREADS": "2000"})
    assert "REJECTED" in out
    out = run_isolated("""
        from ipukern.core.threads import MAX_THREADS
        assert ik.get_num_threads() == MAX_THREADS, ik.get_num_threads()
        x = np.random.default_rng(0).standard_normal((1, 8, 6, 6)).astype(np.float32)
        ik.conv2d(x, np.ones((8, 8, 3, 3), np.float32), padding=1)
        print("RAN")
    """, env={"OMP_NUM_THREADS": "5000", "IPUKERN_NUM_THREADS": ""})
    assert "RAN" in out
