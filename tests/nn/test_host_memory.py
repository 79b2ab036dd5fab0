"""The max-batch search's host memory: trials compiled in scoped caches, and a trial whose
compile would not fit the host's memory refused with a clear error instead of the search
being killed."""
import mmap
import sys

import numpy as np
import pytest

import ipukern as ik
from ipukern import nn
from ipukern.nn.host import host_memory
from ipukern.nn import max_batch
from ipukern.nn.max_batch import search_max_batch
from ipukern.nn.compile import _PROGRAMS, compile_network, trial_caches
from ipukern.nn.host.host_memory import HostMemoryGuard
from ipukern.nn.layers import PlanContext

LINUX = sys.platform.startswith("linux")


def _net():
    net = nn.Network("trial")
    x = net.input("x", (4, 8, 8))
    net.output(net.add(nn.Conv2d(4, 4, 3, padding=1), x, name="c"))
    return net


def test_trial_caches_drop_what_the_trial_compiled_and_keep_the_rest():
    nn.clear_network_caches()                               # below the LRU's bound
    net, ctx = _net(), PlanContext(ik.GC200, "float16", "float16")
    kept = compile_network(net, 2, ctx)
    n = len(_PROGRAMS)
    with trial_caches():
        tried = compile_network(net, 3, ctx)
        assert compile_network(net, 3, ctx) is tried        # cached while the trial runs
        assert len(_PROGRAMS) == n + 1
    assert len(_PROGRAMS) == n
    assert compile_network(net, 2, ctx) is kept             # what was there before stays
    again = compile_network(net, 3, ctx)
    assert again is not tried and again.total_cycles == tried.total_cycles


def _allocating_spare(mib_per_sample, fits_up_to):
    def spare(b):
        # fresh anonymous pages, touched: resident whatever the allocator holds already
        with mmap.mmap(-1, b * mib_per_sample * 2**20) as m:
            np.frombuffer(m, dtype=np.uint8)[:] = 1
        return float(fits_up_to - b)
    return spare


@pytest.mark.skipif(not LINUX, reason="peak resident bytes are read from /proc")
def test_guard_refuses_a_trial_the_host_cannot_hold():
    guard = HostMemoryGuard(_allocating_spare(4, 1000), available=lambda: 100 * 2**20)
    with pytest.raises(MemoryError, match=r"before batch \d+: .* GiB .*\(largest batch found to "
                                          r"fit so far: 2\); search a bounded range"):
        search_max_batch(None, 1, 64, spare=guard)
    assert guard.bytes_per_sample >= 3.5 * 2**20                 # measured, not assumed
    assert guard.largest_fit == 2


def test_guard_gives_the_search_its_answer_when_memory_suffices():
    guard = HostMemoryGuard(_allocating_spare(1, 37), available=lambda: 2**40)
    assert search_max_batch(None, 1, 64, spare=guard) == 37
    no_proc = HostMemoryGuard(_allocating_spare(1, 37), available=lambda: None)
    assert search_max_batch(None, 1, 64, spare=no_proc) == 37


def test_network_max_batch_runs_guarded(monkeypatch):
    """The network's max batch goes through the guard (and its answer does not change)."""
    seen = []
    real = host_memory.HostMemoryGuard.__call__

    def spy(self, b):
        seen.append(b)
        return real(self, b)

    monkeypatch.setattr(host_memory.HostMemoryGuard, "__call__", spy)
    prof = nn.estimate_network(_net(), batch=2, dtype="float16", partials="half")
    mb = prof.memory["max_batch"]
    assert seen and mb >= 2
    ctx = PlanContext(ik.GC200, "float16", "float16")
    assert mb == search_max_batch(None, 2, spare=lambda b: max_batch._spare(_net(), b, ctx, True))


def test_guard_needs_callables():
    with pytest.raises(TypeError, match="callables"):
        HostMemoryGuard(5)
    with pytest.raises(TypeError, match="callables"):
        HostMemoryGuard(lambda b: 1.0, available=2**30)
