"""The plan cache keeps no failed call's inputs and keys one entry per proportion value
(issue 36, item 5)."""
from __future__ import annotations

import dataclasses
import gc
import weakref

import numpy as np
import pytest

import ipukern as ik
from ipukern.core.memory import TileMemoryError
from ipukern.ops import _cache

SMALL = dataclasses.replace(ik.GC200, n_tiles=4, name="4 tiles")


def _failing_call():
    x = np.ones((1, 64, 128, 128), np.float32)
    ref = weakref.ref(x)
    with pytest.raises(TileMemoryError) as info:
        ik.conv2d(x, np.ones((64, 64, 3, 3), np.float32), padding=1, machine=SMALL)
    return ref, info.value


def test_a_failed_plan_keeps_no_input_alive():
    ik.clear_plan_cache()
    refs = []
    for _ in range(3):
        ref, err = _failing_call()       # the second and third calls hit the cached failure
        refs.append(ref)
        assert err.budget == SMALL.tile_budget_bytes and "no plan" in str(err)
        del err
    gc.collect()
    assert all(r() is None for r in refs)
    hit = [v for v in _cache._PLANS.values() if isinstance(v, _cache._Failure)]
    assert len(hit) == 1 and hit[0].cls is TileMemoryError


def test_a_cached_failure_is_raised_anew_each_time():
    ik.clear_plan_cache()
    _, a = _failing_call()
    _, b = _failing_call()
    assert a is not b and str(a) == str(b) and type(a) is type(b)
    assert b.__context__ is None and b.__cause__ is None


@pytest.mark.parametrize("bad", [True, False, np.bool_(True), "1", float("nan"), 0, 1.5])
def test_a_bad_proportion_is_refused_whatever_the_cache_holds(bad):
    ik.clear_plan_cache()
    shape = ((1, 4, 8, 8), (4, 4, 3, 3))
    ok = ik.estimate_conv2d(*shape, available_memory_proportion=1).total_cycles
    with pytest.raises(ValueError, match="available_memory_proportion"):
        ik.estimate_conv2d(*shape, available_memory_proportion=bad)
    assert ik.estimate_conv2d(*shape, available_memory_proportion=1.0).total_cycles == ok


def test_one_and_one_point_zero_share_an_entry_and_true_never_poisons_it():
    ik.clear_plan_cache()
    shape = ((1, 4, 8, 8), (4, 4, 3, 3))
    with pytest.raises(ValueError):
        ik.estimate_conv2d(*shape, available_memory_proportion=True)
    a = ik.estimate_conv2d(*shape, available_memory_proportion=1)
    n = len(_cache._PLANS)
    b = ik.estimate_conv2d(*shape, available_memory_proportion=np.float64(1.0))
    assert len(_cache._PLANS) == n and a.total_cycles == b.total_cycles
