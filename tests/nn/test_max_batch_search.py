"""The max-batch search (doubling/halving from the estimated batch, then bisection) and the
training-schedule cache behind fast repeated estimates."""
import math

import pytest

from hypothesis import given, settings
from hypothesis import strategies as st

import ipukern as ik
from ipukern import nn
from ipukern.nn.max_batch import search_max_batch
from ipukern.nn.layers import PlanContext
from ipukern.nn.training import _fits, training_schedule


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 5000), st.integers(1, 5000), st.integers(1, 4096))
def test_search_finds_the_largest_fitting_batch(answer, start, limit):
    calls = []

    def fits(b):
        assert 1 <= b <= limit
        calls.append(b)
        return b <= answer

    assert search_max_batch(fits, start, limit) == min(answer, limit)
    # doubling/halving then bisection: logarithmic evaluations, never a linear scan
    assert len(calls) <= 2 * math.log2(max(answer, start, 2)) + 3


def chain(per_sample):
    """Two element-wise layers (a, b) on a flat input: memory linear in the batch."""
    net = nn.Network("chain")
    h = net.input("x", (per_sample,))
    for name, layer in (("a", nn.ReLU()), ("b", nn.Sigmoid())):
        h = net.add(layer, h, name=name)
    net.output(h)
    return net


def test_training_max_batch_equals_a_linear_scan():
    m = ik.GC200
    net = chain(m.n_tiles * 2048)
    ctx = PlanContext(m, "float32", "float32")
    opt = ik.Optimizer("sgd")
    brute = 0
    while _fits(net, brute + 1, ctx, None, opt, "chip"):
        brute += 1
    assert 2 <= brute < 100
    for start in (1, brute, brute + 1, 64):
        prof = nn.estimate_network(net, batch=start, dtype="float32", partials="float",
                                   training=True, optimizer="sgd", allow_overflow=True)
        assert prof.memory["max_batch"] == brute
        assert prof.fits == (start <= brute)


def test_training_schedule_is_cached_until_the_network_changes():
    net = chain(64)
    ctx = PlanContext(ik.GC200, "float32", "float32")
    a = training_schedule(net, 2, ctx)
    assert training_schedule(net, 2, ctx) is a
    assert not a[1].flags.writeable                      # shared: read-only
    assert training_schedule(net, 3, ctx) is not a
    nn.clear_network_caches()
    b = training_schedule(net, 2, ctx)
    assert b is not a and b[1].tolist() == a[1].tolist()
    net.add(nn.ReLU(), "b", name="c")                    # a new version of the network
    assert training_schedule(net, 2, ctx) is not b


def test_a_host_memory_error_is_not_taken_for_a_batch_that_does_not_fit(monkeypatch):
    # the search asks "does batch b fit the tiles?": a layer with no plan that fits
    # (TileMemoryError) says no; the host running out of memory is no answer and propagates
    from ipukern.nn import max_batch as api, training
    ctx = nn.plan_context("float32", "float", ik.GC200)
    net = ik.Network("one")
    net.output(net.add(ik.nn.ReLU(), net.input("x", (8,)), name="a"))

    def tile_full(*a, **k):
        raise ik.TileMemoryError("no plan fits")

    def host_full(*a, **k):
        raise MemoryError("host")

    monkeypatch.setattr(api, "compile_network", tile_full)
    assert api.max_batch(net, ctx) == 0
    monkeypatch.setattr(api, "compile_network", host_full)
    with pytest.raises(MemoryError, match="host"):
        api.max_batch(net, ctx)
    monkeypatch.setattr(training, "training_schedule", host_full)
    with pytest.raises(MemoryError, match="host"):
        training._max_batch(net, ctx, None, None, "chip", 1)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 5000), st.integers(1, 5000), st.integers(1, 4096),
       st.floats(0, 1e6), st.floats(0, 0.5), st.integers(0, 50))
def test_search_guided_by_the_bytes_left_is_exact(answer, start, limit, per_sample, curve, step):
    # any monotone spare(b) whose zero crossing is just after `answer`: an affine part, a
    # curvature and steps that the linear guess does not know about
    def spare(b):
        assert 1 <= b <= limit
        calls.append(b)
        d = (answer + 0.5 - b)
        return d * (per_sample + 1) + curve * d * abs(d) + step * (1 if d > 0 else -1) * (b % 7)

    calls = []
    assert search_max_batch(None, start, limit, spare=spare) == min(answer, limit)
    assert len(calls) <= 2 * math.log2(max(answer, start, limit, 2)) + 3


@pytest.mark.parametrize("answer, start, limit", [(5000, 4, 4096), (4096, 1, 4096), (9, 4, 8),
                                                  (1000, 4, 4096), (37, 1, 4096)])
def test_the_line_through_the_spare_bytes_gets_to_the_answer_fast(answer, start, limit):
    calls = []

    def spare(b):
        calls.append(b)
        return 3 * (answer - b) + 1

    assert search_max_batch(None, start, limit, spare=spare) == min(answer, limit)
    assert len(calls) <= 4                     # start, its double, the line's zero, the limit


@pytest.mark.parametrize("args, kw, err, msg", [
    ((None,), {}, TypeError, "exactly one of fits"),
    ((lambda b: True,), {"spare": lambda b: 1.0}, TypeError, "exactly one of fits"),
    ((3,), {}, TypeError, "a callable"),
    ((lambda b: True, 1.5), {}, TypeError, "start must be an int"),
    ((lambda b: True, 1, "x"), {}, TypeError, "limit must be an int"),
    ((lambda b: True, 1, True), {}, TypeError, "limit must be an int"),
    ((lambda b: True, 1, 0), {}, ValueError, "limit must be at least 1"),
    ((None, 1, 10), {"spare": lambda b: float("nan")}, ValueError, "is NaN"),
])
def test_search_rejects_bad_arguments(args, kw, err, msg):
    with pytest.raises(err, match=msg):
        search_max_batch(*args, **kw)


def test_search_takes_huge_limits_and_starts():
    assert search_max_batch(lambda b: b <= 37, 10**30, 10**30) == 37
    assert search_max_batch(lambda b: b <= 37, -5, 100) == 37
