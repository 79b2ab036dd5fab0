"""The forked planning worker of cold estimates (ipukern.conv.host.prefetch): same results as a
serial estimate, every plan it sends equal to the caller's own, every pass it is told about
one the estimate plans, and a worker that cannot plan a pass changes nothing."""
import dataclasses
import os
import time

import numpy as np
import pytest

import ipukern as ik
from ipukern import nn
from ipukern.conv.host import prefetch
from ipukern.conv import ConvParams, plan_conv
from ipukern.nn import convops
from ipukern.nn.layers import PlanContext
from ipukern.nn.plan_keys import network_plan_keys
from ipukern.nn.zoo_bert import bert
from tests._support.nets import tiny_cnn

pytestmark = pytest.mark.skipif(not prefetch.worker_enabled(),
                                reason="needs os.fork and two CPUs (the worker's preconditions)")


def _records_of(records):
    return [{k: (v.tolist() if isinstance(v, np.ndarray) else v)
             for k, v in dataclasses.asdict(r).items()} for r in records]


def _records(prof):
    return _records_of(prof.supersteps)


@pytest.fixture(autouse=True)
def _any_load(monkeypatch):
    """The worker whatever the machine's load (unset, a loaded CI machine plans serially)."""
    monkeypatch.setenv("IPUKERN_PLAN_WORKER", "1")


def _estimate(net, monkeypatch, worker: bool, **kw):
    nn.clear_network_caches()
    ik.clear_plan_cache()
    monkeypatch.setenv("IPUKERN_PLAN_WORKER", "1" if worker else "0")
    prof = ik.estimate_network(net, allow_overflow=True, **kw)
    plans = {repr(k): v.plan for k, v in convops._PROGRAMS.items()}
    plans.update({repr(k): v.plan for k, v in convops._PASSES.items()})
    return prof.to_dict(), _records(prof), plans


@pytest.mark.parametrize("make, kw", [
    (lambda: tiny_cnn(bn=True), {"batch": 4, "training": True}),
    (lambda: bert("bert_mini", 1, 64, 2, seq_len=16), {"batch": 2, "training": True}),
])
def test_worker_gives_the_serial_estimate(make, kw, monkeypatch):
    monkeypatch.setattr(prefetch, "MIN_PLANS", 1)
    started = []
    orig = prefetch._Worker.__init__

    def spy(self, keys, machine, build):
        started.append(len(keys))
        orig(self, keys, machine, build)
    monkeypatch.setattr(prefetch._Worker, "__init__", spy)
    net = make()
    serial = _estimate(net, monkeypatch, worker=False, **kw)
    assert not started
    parallel = _estimate(net, monkeypatch, worker=True, **kw)
    assert started and started[0] > 1
    assert parallel == serial
    assert not prefetch._ACTIVE                 # the worker is gone with the estimate


@pytest.mark.parametrize("make, kw", [
    (lambda: tiny_cnn(bn=True), {"batch": 4}),
    (lambda: bert("bert_mini", 1, 64, 2, seq_len=16), {"batch": 2}),
])
@pytest.mark.parametrize("training", [False, True])
def test_plan_keys_cover_what_the_estimate_plans(make, kw, training, monkeypatch):
    """Every pass the estimate plans is listed, before the estimate and not yet built."""
    net = make()
    ctx = PlanContext(ik.GC200, "float16", "half", None)
    nn.clear_network_caches()
    ik.clear_plan_cache()
    keys, costed = network_plan_keys(net, kw["batch"], ctx, fold_bn=not training,
                                     backward=training)
    assert len(keys) == len(set(keys)) and set(costed) <= set(keys)
    assert bool(costed) == (training and net.name == "tiny_cnn")     # conv passes only
    asked = []
    monkeypatch.setattr(prefetch, "take", lambda p, m, b, a: asked.append((p, m, b, a)))
    monkeypatch.setattr(convops, "take", prefetch.take)
    from ipukern.ops import _cache
    monkeypatch.setattr(_cache, "take", prefetch.take)
    monkeypatch.setenv("IPUKERN_PLAN_WORKER", "0")
    ik.estimate_network(net, training=training, allow_overflow=True, **kw)
    assert asked and set(asked) <= set(keys)
    # the estimate's own order: the first pass it plans is the first listed
    assert asked[0] == keys[0]
    # built passes are not listed again
    left, _ = network_plan_keys(net, kw["batch"], ctx, fold_bn=not training, backward=training)
    assert not set(left) & {(k[0], k[1], k[2], k[4]) for k in convops._PROGRAMS}


def _wait_for(worker, n, timeout=120.0):
    end = time.monotonic() + timeout
    while len(worker.plans) < n and time.monotonic() < end:
        time.sleep(0.01)


def test_worker_plans_equal_the_callers_and_skips_what_it_cannot_plan(monkeypatch):
    monkeypatch.setattr(prefetch, "MIN_PLANS", 1)
    m = ik.GC200
    good = [ConvParams.from_shapes((2, c, 8, 8), (c, c, 3, 3), padding=1) for c in (4, 8, 16)]
    # a conv whose tensors exceed the chip: the worker skips it, the caller raises
    huge = ConvParams.from_shapes((64, 512, 512, 512), (512, 512, 3, 3), padding=1)
    keys = [(good[0], m, False, None), (huge, m, False, None), (good[1], m, True, None),
            (good[2], m, False, 0.2)]
    with prefetch.plan_worker(keys, build=[keys[3]]):
        (worker,) = prefetch._ACTIVE
        _wait_for(worker, 3)
        assert set(worker.plans) == {keys[0], keys[2], keys[3]}
        for p, _, bias, amp in (keys[0], keys[2], keys[3]):
            got = prefetch.take(p, m, bias, amp)
            assert got == plan_conv(p, m, bias=bias, available_memory_proportion=amp)
            assert got.machine is m                     # the caller's machine, not a copy
        assert prefetch.take(huge, m, False, None) is None
        assert prefetch.take(good[0], m, True, None) is None      # not a listed key
        # the built pass: the same records and bytes as building it here
        assert prefetch.take_built(good[0], m, None) is None      # planned only
        built = prefetch.take_built(good[2], m, 0.2)
        prog = convops.conv_program(good[2], m, False, amp=0.2)
        assert built.plan == prog.plan
        assert _records_of(built.records) == _records_of(prog.program.records)
        np.testing.assert_array_equal(built.memory_used, prog.device.memory.used)
    assert not prefetch._ACTIVE
    with pytest.raises(MemoryError):
        plan_conv(huge, m)


def test_claimed_keys_are_skipped_and_too_few_keys_fork_nothing(monkeypatch):
    m = ik.GC200
    ps = [ConvParams.from_shapes((1, 4, 6, 6), (4, 4, 3, 3), padding=p) for p in range(2)]
    keys = [(p, m, False, None) for p in ps]
    with prefetch.plan_worker(keys):
        assert not prefetch._ACTIVE                  # below MIN_PLANS: serial
    monkeypatch.setattr(prefetch, "MIN_PLANS", 1)
    monkeypatch.setenv("IPUKERN_PLAN_WORKER", "0")
    with prefetch.plan_worker(keys):
        assert not prefetch._ACTIVE                  # switched off
    monkeypatch.delenv("IPUKERN_PLAN_WORKER")        # automatic: only with a CPU idle
    monkeypatch.setattr(os, "getloadavg", lambda: (64.0, 64.0, 64.0))
    assert not prefetch.spare_core()
    with prefetch.plan_worker(keys):
        assert not prefetch._ACTIVE
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert prefetch.spare_core()
    with prefetch.plan_worker(keys):
        (worker,) = prefetch._ACTIVE
        with prefetch.plan_worker(keys):             # nested: the running worker serves
            assert prefetch._ACTIVE == [worker]
        assert worker.claimed[0] == 0
        if prefetch.take(*keys[0]) is None:
            assert worker.claimed[0] == 1
