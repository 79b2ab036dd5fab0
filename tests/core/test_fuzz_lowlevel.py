"""Fuzz the low-level Device / Exchange / ComputeSet API as a hostile user would: random
tables (huge, negative, wrapped, mismatched values), random data arrays and thread counts.
Every call must succeed or raise ValueError/TypeError (ExchangeError is a ValueError); the
fuzzing runs in a subprocess so a crash fails this test instead of the test runner."""
from __future__ import annotations

import pytest

from tests._support.isolated import run_isolated

pytest.importorskip("hypothesis")

FUZZ = """
from hypothesis import given, settings, HealthCheck, strategies as st
from ipukern.core.vertices import KernelCodelet

MACHINE = ik.get_machine("GC200").replace(n_tiles=16)
DEV = ik.Device(MACHINE)
DEV.alloc("buf", np.full(MACHINE.n_tiles, 4096))
ROW = MACHINE.tile_bytes
edge = st.sampled_from([0, 1, 7, 4095, 4096, 4097, ROW - 1, ROW, ROW + 1, 2**31, 2**62,
                        2**63 - 8, 2**63 - 1, -1, -2**63, 2**64 - 1, 2**64])
num = st.one_of(st.integers(-8, 5000), edge)
cols = st.integers(1, 4).flatmap(lambda n: st.lists(st.lists(num, min_size=n, max_size=n),
                                                    min_size=5, max_size=5))
arrays = st.sampled_from(["arena", "short", "rows", "float", "1d", "readonly", "fortran", "list"])
threads = st.sampled_from([1, 2, 0, -1, 10**6, True, 1.5])
OK = (ValueError, TypeError)


def data_for(kind):
    a = DEV.arena.data
    return {"arena": a, "short": a[:, :8].copy(), "rows": a[:3].copy(),
            "float": a.view(np.float32), "1d": a.ravel(), "list": a.tolist()[:2],
            "readonly": np.frombuffer(a.tobytes(), np.uint8).reshape(a.shape),
            "fortran": np.asfortranarray(a)}[kind]


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(cols, arrays, threads, st.booleans())
def fuzz_exchange(table, kind, n_threads, via_device):
    try:
        x = DEV.exchange(*table) if via_device else Exchange(MACHINE, *table)
    except OK:
        return
    try:
        x.run(data_for(kind), n_threads)
    except OK:
        return
    DEV.run(DEV.program([Superstep("s", exchange=x)])) if via_device else None


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(st.integers(-2, 20), num, num), min_size=1, max_size=4), arrays, threads)
def fuzz_fill(rows, kind, n_threads):
    tiles, off, n = (list(c) for c in zip(*rows))
    fill = KernelCodelet("fill<float32>", "fill", ("off", "n"), (1.0, 0))
    try:
        batch = VertexBatch(fill, tiles, {"off": np.asarray(off), "n": np.asarray(n)},
                            [1] * len(tiles), regions=[(off, [4 * v for v in n])])
        cs = DEV.compute_set([batch])
    except OK:
        return
    try:
        cs.run(data_for(kind), n_threads)
    except OK:
        return


fuzz_exchange()
fuzz_fill()
print("FUZZED")
"""


def test_fuzz_low_level_api_never_crashes():
    assert "FUZZED" in run_isolated(FUZZ)
