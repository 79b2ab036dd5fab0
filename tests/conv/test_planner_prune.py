"""The planner's pruning is exact: plans equal those of the exhaustive search.

``search.PRUNE = False`` costs every split vector of every scored method in full (no
branch and bound inside a method, no cutting against the best plan of earlier methods).
Every field of the plan -- method, split, serial slices, estimated cycles and bytes,
breakdown -- must be the same with and without it, on shapes that exercise each vertex
method, in-channel reductions, kernel-row splits (every k x k kernel with k > 1 has them
among its split vectors), casts, bias, serial splits and machines small enough that the
tile memory binds.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import ipukern as ik
from ipukern.conv import ConvParams, plan_conv, search
from ipukern.core.memory import TileMemoryError

MACHINES = {
    "GC200": ik.GC200,
    "GC200-64": ik.GC200.replace(n_tiles=64, name="GC200-64"),
    # tiles so small that serial out-channel splits are needed
    "tiny-16": ik.GC200.replace(n_tiles=16, tile_bytes=96 * 1024, name="tiny-16"),
}


def _plan(p, machine, prune, monkeypatch, seed=search.BNB_SEED, **kw):
    monkeypatch.setattr(search, "PRUNE", prune)
    monkeypatch.setattr(search, "BNB_SEED", seed)
    try:
        plan = plan_conv(p, machine, **kw)
    except (ValueError, TileMemoryError) as err:
        return type(err).__name__, str(err)
    return plan, plan.to_dict(), plan.describe()


def _same(p, machine, monkeypatch, **kw):
    want = _plan(p, machine, False, monkeypatch, **kw)
    # a seed of 1 split vector leaves the most to the bound
    for seed in (search.BNB_SEED, 1):
        assert _plan(p, machine, True, monkeypatch, seed, **kw) == want


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.sampled_from([1, 2, 4, 16]), cpg=st.sampled_from([1, 2, 3, 4, 8, 16, 64, 256]),
       opg=st.sampled_from([1, 4, 16, 64, 512]), g=st.sampled_from([1, 2, 8, 32]),
       hw=st.sampled_from([1, 7, 14, 28, 56]), k=st.sampled_from([1, 3, 5, 7]),
       s=st.sampled_from([1, 2]), dtype=st.sampled_from([("float16", "float"),
                                                          ("float16", "half"),
                                                          ("float32", "float")]),
       bias=st.booleans(), machine=st.sampled_from(sorted(MACHINES)))
def test_pruned_plan_equals_exhaustive(monkeypatch, n, cpg, opg, g, hw, k, s, dtype, bias,
                                       machine):
    if k > hw + 2 * (k // 2):
        return
    p = ConvParams.from_shapes((n, cpg * g, hw, hw), (opg * g, cpg, k, k), stride=s,
                               padding=k // 2, groups=g, dtype=dtype[0], partials=dtype[1])
    _same(p, MACHINES[machine], monkeypatch, bias=bias)


@pytest.mark.parametrize("shape", [
    ((16, 3, 224, 224), (64, 3, 7, 7), 2, 3, 1, False),    # ResNet-50 stem
    ((64, 16, 112, 112), (3, 16, 7, 7), 1, 3, 1, False),   # its weight-update pass
    ((16, 256, 56, 56), (64, 256, 1, 1), 1, 0, 1, False),
    ((16, 240, 28, 28), (240, 1, 5, 5), 2, 2, 240, False),  # depthwise
    ((1, 65536, 1, 64), (64, 65536, 1, 1), 1, 0, 1, False),  # large-K matmul
    # MobileNetV2 1x1 layers whose plan is a near tie, not the fastest split vector: a
    # bound without the NEAR_TIE margin would drop it
    ((16, 144, 56, 56), (24, 144, 1, 1), 1, 0, 1, True),
    ((16, 96, 56, 56), (24, 96, 1, 1), 1, 0, 1, True),
    ((1, 12288, 1, 128), (24576, 64, 1, 1), 1, 0, 192, False),  # BERT attention, batched
    # EfficientNet-B0 features.6.1 (5x5 depthwise on 7x7): its plan is a kernel split
    ((8, 1152, 7, 7), (1152, 1, 5, 5), 1, 2, 1152, False),
])
def test_pruned_plan_equals_exhaustive_on_network_layers(monkeypatch, shape):
    x, w, stride, pad, groups, bias = shape
    p = ConvParams.from_shapes(x, w, stride=stride, padding=pad, groups=groups, dtype="float16")
    _same(p, ik.GC200, monkeypatch, bias=bias)


@pytest.mark.parametrize("shape", [
    ((16, 144, 56, 56), (24, 144, 1, 1), 1, 0, 1, True),
    ((1, 12288, 1, 128), (24576, 64, 1, 1), 1, 0, 192, False),
    ((8, 64, 56, 56), (64, 64, 3, 3), 1, 1, 1, False),
    ((64, 16, 112, 112), (3, 16, 7, 7), 1, 3, 1, False),
])
def test_bound_keeps_every_near_tie(monkeypatch, shape):
    """Within one method, the rows the bound keeps include every row within NEAR_TIE of the
    fastest (those the tie-break may pick), with their exact costs, for any seed size."""
    x, w, stride, pad, groups, bias = shape
    p = ConvParams.from_shapes(x, w, stride=stride, padding=pad, groups=groups, dtype="float16")
    full_costs = search._costs
    calls = []

    def checked(p_, machine, cand, c, bias_, beat=None):
        monkeypatch.setattr(search, "PRUNE", False)
        everything, want = full_costs(p_, machine, cand, c, bias_)
        monkeypatch.setattr(search, "PRUNE", True)
        total = want["total"]
        near = set(np.flatnonzero(total <= total.min() * (1 + search.NEAR_TIE)).tolist())
        for seed in (1, 2, 16):
            monkeypatch.setattr(search, "BNB_SEED", seed)
            rows, got = full_costs(p_, machine, cand, c, bias_)
            assert near <= set(rows.tolist())
            for k, v in got.items():
                assert np.array_equal(v, want[k][rows]), k
        calls.append(len(everything))
        return everything, want

    monkeypatch.setattr(search, "_costs", checked)
    plan_conv(p, ik.GC200, bias=bias)
    assert calls


@pytest.mark.parametrize("shape", [
    ((8, 128, 56, 56), (128, 128, 3, 3), 1, 1, 1),      # ResNeXt g1: kernel-row split
    ((8, 240, 28, 28), (240, 1, 5, 5), 1, 2, 240),      # EfficientNet depthwise 5x5
    ((16, 3, 224, 224), (64, 3, 7, 7), 2, 3, 1),        # ResNet-50 stem (expandDims wins)
])
def test_beat_finds_the_plan_or_says_nothing_is_faster(shape):
    """``plan_direct(beat=b)``: the unseeded plan when it has fewer than ``b`` cycles (and
    no serial slices), else NotFaster -- also at ``b`` equal to its cycles (ties keep the
    caller's plan)."""
    from ipukern.conv.planner import NotFaster, plan_direct
    x, w, stride, pad, groups = shape
    p = ConvParams.from_shapes(x, w, stride=stride, padding=pad, groups=groups, dtype="float16")
    plan = plan_direct(p, ik.GC200)
    assert plan.serial == 1
    got = plan_direct(p, ik.GC200, beat=plan.estimated_cycles + 1)
    assert (got, got.to_dict()) == (plan, plan.to_dict())
    for b in (plan.estimated_cycles, plan.estimated_cycles // 2, 0):
        with pytest.raises(NotFaster, match="beats"):
            plan_direct(p, ik.GC200, beat=b)
