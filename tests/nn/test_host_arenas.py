"""The conv programs' pooled arenas (:mod:`ipukern.nn.host.arenas`): which arena a run
leases, when one is made, grown or reused, and the device binding they rely on."""
import numpy as np
import pytest

import ipukern as ik
from ipukern.core import Arena, Device
from ipukern.nn.host.arenas import ArenaPool


def test_lease_prefers_an_arena_without_pending_outputs_and_never_an_avoided_one():
    pool = ArenaPool(max_idle=2)
    with pool.lease(4) as a:
        pass
    with pool.lease(4) as b:
        assert b is a                                   # reused, no new arena
        with pool.lease(4) as c:
            assert c is not a                           # a is leased: another is made
    a.pending.add(a)                                    # stands for a kept output
    with pool.lease(4) as d:
        assert d is c
    with pool.lease(4, avoid=[c]) as e:                 # only a is left: reused (2 idle)
        assert e is a
    with pool.lease(4, avoid=[a, c]) as f:              # nothing left: a new one
        assert f is not a and f is not c
    with pool.lease(8) as g:                            # per tile count
        assert g.arena.n_tiles == 8
    assert pool.info()["entries"] == 2 + 1     # f, made past max_idle, was not kept
    with pool.lease(4) as h1, pool.lease(4) as h2, pool.lease(4) as h3:
        assert len({id(h1), id(h2), id(h3)}) == 3       # three concurrent runs
    assert pool.info()["entries"] == 2 + 1     # back to max_idle once they end


def test_ensure_keeps_contents_only_while_outputs_are_pending():
    pool = ArenaPool()
    pool.reserve(2, 128)
    with pool.lease(2) as s:
        pool.ensure(s, 64)
        assert s.arena.row_bytes == 128                 # the reserved length
        s.arena.data[:] = 7
        s.pending.add(s)
        pool.ensure(s, 256)
        assert s.arena.row_bytes == 256 and (s.arena.data[:, :128] == 7).all()
    assert pool.nbytes() == 2 * 256
    pool.clear()
    assert pool.nbytes() == 0


def test_arena_growth_without_keep():
    a = Arena(3, 64)
    a.data[:] = 1
    a.ensure(32, keep=False)                            # no growth: untouched
    assert a.row_bytes == 64 and (a.data == 1).all()
    a.ensure(200, keep=False)
    assert a.data.shape == (3, 256)


def test_bind_arena_checks_its_argument():
    dev = Device(ik.GC200)
    with pytest.raises(TypeError, match="expected an Arena"):
        dev.bind_arena(np.zeros((1472, 64), np.uint8))
    with pytest.raises(ValueError, match="cannot hold the 1472 tiles"):
        dev.bind_arena(Arena(4, 64))
    a = Arena(ik.GC200.n_tiles, 64)
    dev.bind_arena(a)
    assert dev.arena is a and dev.arena_bytes == a.data.nbytes
    dev.bind_arena(None)
    assert dev.arena_bytes == 0
