"""Execute mode's reuse of residents' host buffers (:mod:`ipukern.nn.host.buffers`): a buffer is
handed out again only when nothing references it, with its padding zeroed; whole networks
give the bits of fresh zeroed buffers at every thread count, across consecutive runs with
different inputs, with reused buffers poisoned (so an element a producer leaves
unwritten would show)."""
import contextlib

import numpy as np
import pytest

import ipukern as ik
from ipukern.nn.host import buffers as B
from ipukern.nn import program as C
from ipukern.nn import plan_context
from ipukern.nn.compile import compile_network
from ipukern.nn.layout import Resident, linear_layout

from tests._support.nets import attention_net


@contextlib.contextmanager
def _fresh_buffers():
    """Execute with fresh zeroed buffers (the behaviour before the pool)."""
    saved = C.pooled
    C.pooled = contextlib.nullcontext
    try:
        yield
    finally:
        C.pooled = saved


def _bits(outs):
    return {k: np.ascontiguousarray(v).view(np.uint8).tobytes() for k, v in outs.items()}


def _check_network(prog, feeds_list, params):
    with _fresh_buffers():
        want = [_bits(prog.execute(f, params)) for f in feeds_list]
    pool = B.BufferPool()
    pool.poison = True
    try:
        for n in (1, 2, 3):
            ik.set_num_threads(n)
            for f, w in zip(feeds_list, want):
                with B.pooled(pool):
                    got = _bits(prog._execute(f, params))
                assert got == w
    finally:
        ik.set_num_threads(None)
    assert pool.reused > 0


@pytest.mark.parametrize("model", ["mobilenet_v2", "resnet50", "efficientnet_b0"])
def test_zoo_network_pooled_equals_fresh(model):
    net = ik.models.MODELS[model](image_size=32)
    params = net.init_params(seed=0)
    prog = compile_network(net, 2, plan_context("float32", "float", ik.GC200))
    rng = np.random.default_rng(7)
    feeds = [{net.inputs[0]: rng.standard_normal((2, 3, 32, 32)).astype(np.float32) * s}
             for s in (1.0, 100.0)]
    _check_network(prog, feeds, params)


def test_attention_network_pooled_equals_fresh():
    net = attention_net()
    params = net.init_params(seed=5)
    prog = compile_network(net, 2, plan_context("float32", "float", ik.GC200))
    rng = np.random.default_rng(8)
    feeds = [{"ids": rng.integers(0, 50, (2, 8)), "labels": rng.integers(0, 3, 2)} for _ in range(2)]
    _check_network(prog, feeds, params)


def test_run_network_twice_with_different_inputs_no_stale_data():
    net = ik.models.mobilenet_v2(image_size=32)
    params = net.init_params(seed=1)
    rng = np.random.default_rng(2)
    x1, x2 = (rng.standard_normal((2, 3, 32, 32)).astype(np.float32) for _ in range(2))
    a1 = ik.run_network(net, x1, params, dtype="float32").output
    a2 = ik.run_network(net, x2, params, dtype="float32").output
    with _fresh_buffers():
        b2 = ik.run_network(net, x2, params, dtype="float32").output
        b1 = ik.run_network(net, x1, params, dtype="float32").output
    assert np.array_equal(a1.view(np.uint32), b1.view(np.uint32))
    assert np.array_equal(a2.view(np.uint32), b2.view(np.uint32))
    assert not np.array_equal(a1, a2)


def _layout(n=10, tiles=4):
    return linear_layout((n,), "float32", tiles)      # 3, 3, 2, 2 elements


def test_buffer_reused_only_when_unreferenced():
    pool = B.BufferPool()
    lay = _layout()
    with B.pooled(pool):
        r1 = Resident(lay, 4)
        first = r1.data
        r2 = Resident(lay, 4)                     # r1 holds its buffer: a new one
        assert r2.data is not first
        view = r1.view()
        del r1, first
        r3 = Resident(lay, 4)                     # a view of r1's buffer keeps it taken
        assert r3.data.base is None and not np.shares_memory(r3.data, view)
        assert pool.reused == 0 and pool.allocated == 3
        del view, r2
        r4 = Resident(lay, 4)
        assert pool.reused == 1
        assert not np.shares_memory(r4.data, r3.data)


def test_reused_buffer_padding_is_zero():
    pool = B.BufferPool()
    lay = _layout()
    with B.pooled(pool):
        r = Resident(lay, 4)
        r.data[...] = 0xAB
        del r
        r = Resident(lay, 4)
    assert pool.reused == 1
    used = lay.elems_per_tile(4) * 4
    for t in range(4):                            # padding zero, elements left to the producer
        assert not r.data[t, used[t]:].any()
        assert (r.data[t, :used[t]] == 0xAB).all()


def test_pool_off_outside_context_and_trim():
    lay = _layout()
    assert B.active_pool() is None
    r = Resident(lay, 4)
    assert not r.data.any()
    pool = B.BufferPool(free_bytes=0)
    with B.pooled(pool):
        Resident(lay, 4)
        Resident(_layout(40), 4)
        assert pool.free_nbytes() > 0
    assert pool.free_nbytes() == 0                # trimmed on leaving
    assert B.active_pool() is None


def test_free_reference_count_is_calibrated():
    pool = B.BufferPool()
    lay = _layout()
    with B.pooled(pool):
        for _ in range(5):
            Resident(lay, 4)
    assert pool.allocated == 1 and pool.reused == 4
