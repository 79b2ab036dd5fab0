"""Ops under threads and memory bounds: a freshly planned program shared by many threads,
the plan cache bounded by host bytes, byte order handled alike for every input."""
import numpy as np
import pytest

import ipukern as ik
from ipukern.conv import build_conv_program
from ipukern import _settings
from ipukern.ops import _cache
from ipukern.ops._cache import DEFAULT_PLAN_CACHE_BYTES
from tests._support.reference import conv2d_nchw
from tests._support.threads import race


@pytest.fixture(scope="module")
def m32():
    return ik.GC200.replace(n_tiles=32, name="GC200-32")


def _conv_twice(x, w, machine):
    return [ik.conv2d(x, w, padding=1, machine=machine).output for _ in range(2)]


def test_threads_on_a_freshly_planned_shape_get_correct_outputs(m32):
    """Six threads race to the first execute of a planned, never executed program (arena
    creation, lazily built tensors) with a tiny switch interval; every output must match
    its float64 reference."""
    rng = np.random.default_rng(7)
    cases = [(rng.standard_normal((2, 8, 9, 9)).astype(np.float32),
              rng.standard_normal((8, 8, 3, 3)).astype(np.float32), m32) for _ in range(6)]
    refs = [conv2d_nchw(x, w, padding=1) for x, w, _ in cases]
    for _ in range(3):
        ik.clear_plan_cache()
        # planned (and cached) but never executed: no arena, no host tensors yet
        ik.plan_conv2d((2, 8, 9, 9), (8, 8, 3, 3), dtype="float32", padding=1, machine=m32)
        outs, errors = race(_conv_twice, cases)
        assert not errors, errors
        for i, pair in enumerate(outs):
            for out in pair:
                np.testing.assert_allclose(out, refs[i], rtol=1e-4, atol=1e-4)


def _tensors(prog):
    return prog.x, prog.w, prog.y


def test_lazily_built_tensors_are_built_once_under_threads(m32):
    """A program's host tensors are built on first use; two threads used to build (and
    register) the same tensor twice: "a tensor named ... already exists"."""
    plan = ik.plan_conv2d((2, 8, 9, 9), (8, 8, 3, 3), dtype="float32", padding=1, machine=m32)
    for _ in range(5):
        prog = build_conv_program(plan)
        got, errors = race(_tensors, [(prog,)] * 6)
        assert not errors, errors
        assert all(g[1] is got[0][1] for g in got)


def test_plan_cache_is_bounded_by_arena_bytes(m32):
    rng = np.random.default_rng(1)
    ik.clear_plan_cache()
    try:
        ik.set_plan_cache_limit(0)                 # keep no arena at all
        x = rng.standard_normal((1, 4, 8, 8)).astype(np.float32)
        w = rng.standard_normal((4, 4, 3, 3)).astype(np.float32)
        out = ik.conv2d(x, w, machine=m32).output
        np.testing.assert_allclose(out, conv2d_nchw(x, w), rtol=1e-4, atol=1e-4)
        assert ik.plan_cache_info()["arena_bytes"] == 0
        ik.estimate_conv2d(x.shape, w.shape, dtype="float32", machine=m32)   # estimates: no arena
        assert ik.plan_cache_info()["entries"] == 1
        ik.set_plan_cache_limit(10 * 2**20)
        sizes = [8, 12, 16, 20]
        for s in sizes:                            # distinct layers: each keeps an arena
            ik.conv2d(rng.standard_normal((1, 4, s, s)).astype(np.float32), w, machine=m32)
        info = ik.plan_cache_info()
        assert 0 < info["arena_bytes"] <= 10 * 2**20 and info["max_bytes"] == 10 * 2**20
        one = info["arena_bytes"] // info["entries"]
        ik.set_plan_cache_limit(one)               # shrink: least recently used go first
        assert ik.plan_cache_info()["arena_bytes"] <= one
        with pytest.raises(ValueError, match="max_bytes"):
            ik.set_plan_cache_limit(-1)
    finally:
        ik.set_plan_cache_limit(DEFAULT_PLAN_CACHE_BYTES)
        # follow IPUKERN_PLAN_CACHE_BYTES again (test_settings)
        _cache._PROGRAMS.set_limits(max_bytes=_settings.plan_cache_bytes)
        ik.clear_plan_cache()


def test_overflowing_device_refuses_a_huge_arena_but_estimates():
    dev = ik.Device(ik.GC200, allow_overflow=True)
    n = np.zeros(ik.GC200.n_tiles, np.int64)
    n[3] = 16 * 2**20                                   # one 16 MiB tile
    dev.alloc("big", n)
    prog = dev.program([])
    assert dev.run(prog, "estimate").total_cycles == 0
    with pytest.raises(ik.TileMemoryError, match=r"23\.0 GiB host arena.*fullest tile 3"):
        dev.run(prog)
    assert dev.arena_bytes == 0


def test_big_endian_inputs_are_converted_alike(m32):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    w = rng.standard_normal((4, 4, 3, 3)).astype(np.float32)
    want = ik.conv2d(x, w, machine=m32).output
    for xx, ww in ((x.astype(">f4"), w), (x, w.astype(">f4")), (x.astype(">f4"), w.astype(">f4"))):
        np.testing.assert_array_equal(ik.conv2d(xx, ww, machine=m32).output, want)
    a = rng.standard_normal((5, 7)).astype(np.float32)
    b = rng.standard_normal((7, 3)).astype(np.float32)
    np.testing.assert_array_equal(ik.matmul(a.astype(">f4"), b, machine=m32).output,
                                  ik.matmul(a, b.astype(">f4"), machine=m32).output)
